//! Library steps of a plan: recovered row ops, data-movement copies and the GEMM (with a
//! matmul's epilogue kernel and activation run per finished row tile), in place in the
//! plan's memory; and the weights packed for the GEMM when the plan is built.

use super::native::{call_native, epilogue_name};
use super::*;
use crate::backend::cpu::activation::Activation;
use crate::kernel::{Addend, ChannelPost};

impl CpuExecutable {
    /// `m`'s right operand packed for the GEMM kernel, when it is an f32 constant matrix
    /// (leading dims all 1) of a product the library runs.
    pub(super) fn pack_weight(&self, p: &Program, m: &MatmulCall) -> Option<PackedB> {
        if !self.all_f32(p, &[m.a, m.b, m.out]) {
            return None;
        }
        let Loc::Const(t) = &self.locs[m.b.index()] else { return None };
        PackedB::matmul_operand(t.as_f32()?, t.shape(), m.transpose_b)
    }

    /// A convolution's constant f32 weight packed for the blocked kernel, when it has one and
    /// the kernel takes it.
    pub(super) fn pack_conv_weight(&self, p: &Program, c: &crate::kernel::ConvCall) -> Option<PackedWeights> {
        if !self.all_f32(p, &[c.x, c.w, c.out]) {
            return None;
        }
        let Loc::Const(t) = &self.locs[c.w.index()] else { return None };
        PackedWeights::new(t.shape(), usize::try_from(c.groups).ok()?, t.as_f32()?)
    }

    /// A recovered op through its f32 library kernel (`backend::cpu::rows::run_native`; a
    /// bool attention mask goes as bytes), in place in the plan's memory.
    pub(super) fn run_rows(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        l: &LibraryCall,
    ) -> Result<(), ExecError> {
        let mut shapes = std::mem::take(&mut st.cpu.arg_shapes);
        // Grown, never shrunk: the vectors keep their capacity for later steps and runs.
        if shapes.len() < l.args.len() {
            shapes.resize_with(l.args.len(), Vec::new);
        }
        for (s, &b) in shapes.iter_mut().zip(&l.args) {
            if let Err(e) = st.sizes.shape_into(p, b, s) {
                st.cpu.arg_shapes = shapes;
                return Err(e);
            }
        }
        let mut ptrs: SmallVec<[(usize, usize); 4]> = SmallVec::new();
        for &b in &l.args {
            ptrs.push((self.address(st, inputs, b), st.sizes.lens[b.index()]));
        }
        let (out, out_len) = (self.address(st, inputs, l.out), st.sizes.lens[l.out.index()]);
        // SAFETY: each address is the start of its buffer for this run, holding `len`
        // elements of its dtype (lengths from `bind`, inputs checked against their shapes):
        // f32, or, where `native_operands` allowed it, bool, stored one byte per element (read
        // as u8, valid for any byte). The output is a temporary or an output slot whose
        // lifetime overlaps the arguments', so the memory plan gives it bytes disjoint from
        // theirs; nothing else touches them in this step.
        use crate::backend::cpu::rows::Operand;
        let args: SmallVec<[Operand; 4]> = ptrs
            .iter()
            .zip(&l.args)
            .map(|(&(a, n), &b)| match p.buffers[b].dtype {
                crate::ir::DType::Bool => Operand::Bool(unsafe { std::slice::from_raw_parts(a as *const u8, n) }),
                _ => Operand::F32(unsafe { std::slice::from_raw_parts(a as *const f32, n) }),
            })
            .collect();
        let out = unsafe { std::slice::from_raw_parts_mut(out as *mut f32, out_len) };
        let shape_refs: SmallVec<[&[usize]; 4]> = shapes[..l.args.len()].iter().map(Vec::as_slice).collect();
        let result = crate::backend::cpu::rows::run_native(l.op, &l.attrs, &args, &shape_refs, out, self.threads)
            .map_err(|e| ExecError::Native { kernel: l.op.name().into(), message: e.to_string() });
        drop(shape_refs);
        st.cpu.arg_shapes = shapes;
        result
    }

    /// A data-movement prim through its library kernel (`backend::cpu::copy`), on the bytes of
    /// the plan's memory.
    pub(super) fn run_copy(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        l: &LibraryCall,
    ) -> Result<(), ExecError> {
        let mut shapes = std::mem::take(&mut st.cpu.arg_shapes);
        // Grown, never shrunk: the vectors keep their capacity for later steps and runs.
        if shapes.len() <= l.args.len() {
            shapes.resize_with(l.args.len() + 1, Vec::new);
        }
        for (s, &b) in shapes.iter_mut().zip(l.args.iter().chain(std::iter::once(&l.out))) {
            st.sizes.shape_into(p, b, s)?;
        }
        let bytes = |st: &St, b: BufferId| st.sizes.lens[b.index()] * elem_size(p.buffers[b].dtype);
        let mut ptrs: SmallVec<[(usize, usize); 8]> = SmallVec::new();
        for &b in &l.args {
            ptrs.push((self.address(st, inputs, b), bytes(st, b)));
        }
        let (out, out_len) = (self.address(st, inputs, l.out), bytes(st, l.out));
        // SAFETY: each address is the start of its buffer for this run, holding `len` bytes
        // (lengths from `bind`, inputs checked against their shapes; bools are one byte, 0 or
        // 1). The output is a temporary or an output slot whose lifetime overlaps the
        // arguments', so the memory plan gives it bytes disjoint from theirs; nothing else
        // touches them in this step, and the slices are dropped before it ends.
        let out = unsafe { bytes_mut_at(out, out_len) };
        let (arg_shapes, out_shape) = (&shapes[..l.args.len()], &shapes[l.args.len()]);
        let operands: SmallVec<[crate::backend::cpu::copy::Operand<'_>; 8]> = ptrs
            .iter()
            .zip(arg_shapes)
            .zip(&l.args)
            .map(|((&(a, n), shape), &b)| crate::backend::cpu::copy::Operand {
                // SAFETY: as for `out` above.
                bytes: unsafe { bytes_at(a, n) },
                shape,
                dtype: p.buffers[b].dtype,
            })
            .collect();
        let result = crate::backend::cpu::copy::run(
            l.op,
            &l.attrs,
            &operands,
            out,
            out_shape,
            p.buffers[l.out].dtype,
            self.threads,
        )
        .map_err(|error| ExecError::Library { what: l.op.name(), error });
        drop(operands);
        st.cpu.arg_shapes = shapes;
        result
    }

    /// A library step: data movement through `backend::cpu::copy`, a recovered op through its
    /// row kernel (native mode, supported dtypes), else the op's reference meaning.
    pub(super) fn run_library(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        l: &LibraryCall,
    ) -> Result<(), ExecError> {
        self.run_library_op(p, st, inputs, l)?;
        match &l.post {
            Some(post) => self.run_post(p, st, inputs, post, l.out),
            None => Ok(()),
        }
    }

    /// A library step's per-channel post-op on its finished result `out` (`[N, C, ...]`):
    /// natively on f32, one call per channel plane (in cache right after the step), else by
    /// the reference meaning.
    pub(super) fn run_post(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        post: &ChannelPost,
        out: BufferId,
    ) -> Result<(), ExecError> {
        use crate::backend::cpu::activation::{add_then_apply_f32, apply_f32};
        let f32_bias = match &post.addend {
            Some(Addend::Channel(b)) => p.buffers[*b].dtype == crate::ir::DType::F32,
            _ => true,
        };
        if !(self.native_library && p.buffers[out].dtype == crate::ir::DType::F32 && f32_bias) {
            let t = self.tensor(p, st, inputs, out)?;
            let bias = match &post.addend {
                Some(Addend::Channel(b)) => Some(self.tensor(p, st, inputs, *b)?),
                _ => None,
            };
            let t = crate::kernel::eval::channel_post(post, t, bias.as_ref())
                .map_err(|error| ExecError::Library { what: "post-op", error })?;
            return self.write(p, st, out, &t);
        }
        let mut shape = std::mem::take(&mut st.cpu.shape_a);
        st.sizes.shape_into(p, out, &mut shape)?;
        let channels = shape.get(1).copied().unwrap_or(1).max(1);
        let plane = shape.iter().skip(2).product::<usize>().max(1);
        st.cpu.shape_a = shape;
        let (activation, after) = post_activations(Some(post))?;
        let bias = self.post_bias(p, st, inputs, post, channels)?;
        let len = st.sizes.lens[out.index()];
        let ptr = self.address(st, inputs, out) as *mut f32;
        // SAFETY: `out` starts a buffer of `len` f32 elements for this run, which this step
        // alone writes now; the bias is another buffer or the run state's vector (the
        // scheduler never makes the result its own addend).
        let (data, bias) = unsafe { (slice_or_empty_mut(ptr, len), bias.map(|(b, n)| slice_or_empty(b, n))) };
        let one = |(i, run): (usize, &mut [f32])| {
            match bias {
                Some(b) => add_then_apply_f32(b[i % channels], &activation, run),
                None => apply_f32(&activation, run),
            }
            if let Some(a) = &after {
                apply_f32(a, run);
            }
        };
        // Planes split across the threads where the work pays for it (a few instructions per
        // element; tens for an activation).
        let per_elem =
            if after.is_some() || !matches!(activation, Activation::None | Activation::Relu) { 16 } else { 2 };
        let threads = ((len as u64 * per_elem / PAR_WORK) as usize).min(self.threads);
        if threads > 1 && len / plane > 1 {
            use rayon::prelude::*;
            data.par_chunks_mut(plane).enumerate().with_min_len((len / plane).div_ceil(4 * threads)).for_each(one);
        } else {
            data.chunks_mut(plane).enumerate().for_each(one);
        }
        Ok(())
    }

    /// The f32 addend per channel of `post` (`channels` values) for this run, as a pointer and
    /// length: the channel buffer itself, or the constant repeated in the run state.
    fn post_bias(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        post: &ChannelPost,
        channels: usize,
    ) -> Result<Option<(*const f32, usize)>, ExecError> {
        Ok(match &post.addend {
            Some(Addend::Channel(b)) => {
                let len = st.sizes.lens[b.index()];
                if p.buffers[*b].dtype != crate::ir::DType::F32 || len != channels {
                    return Err(ExecError::Invalid(format!("per-channel addend {b} is not {channels} f32 values")));
                }
                Some((self.address(st, inputs, *b) as *const f32, len))
            }
            Some(Addend::Scalar(v)) => {
                st.cpu.post_addend.clear();
                st.cpu.post_addend.resize(channels, *v as f32);
                Some((st.cpu.post_addend.as_ptr(), channels))
            }
            None => None,
        })
    }

    fn run_library_op(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        l: &LibraryCall,
    ) -> Result<(), ExecError> {
        let copy = crate::backend::cpu::copy::supports(
            l.op,
            l.args.iter().map(|b| p.buffers[*b].dtype),
            p.buffers[l.out].dtype,
        );
        if self.native_library && copy {
            return self.run_copy(p, st, inputs, l);
        }
        if self.native_library && crate::ops::library::is_library_op(l.op) && self.native_operands(p, l) {
            return self.run_rows(p, st, inputs, l);
        }
        if l.op == OpKind::DimValues {
            return self.run_dim_values(p, st, l);
        }
        let args: Vec<Tensor> = l.args.iter().map(|&b| self.tensor(p, st, inputs, b)).collect::<Result<_, _>>()?;
        let refs: Vec<&Tensor> = args.iter().collect();
        let out = &p.buffers[l.out];
        let shape = st.sizes.shape(p, l.out)?;
        let t = eval_library(l.op, &l.attrs, &refs, out.dtype, &shape)
            .map_err(|error| ExecError::Library { what: l.op.name(), error })?;
        self.write(p, st, l.out, &t)
    }

    /// `dim_values`: the op's meaning, with this run's symbols.
    fn run_dim_values(&self, p: &Program, st: &mut St, l: &LibraryCall) -> Result<(), ExecError> {
        let out = &p.buffers[l.out];
        let shape = st.sizes.shape(p, l.out)?;
        let symbols =
            p.symbols.iter().zip(&st.sizes.symbols).filter_map(|(s, v)| v.map(|v| (s.to_string(), v))).collect();
        let t = crate::kernel::eval::eval_library_with(l.op, &l.attrs, &[], out.dtype, &shape, symbols)
            .map_err(|error| ExecError::Library { what: l.op.name(), error })?;
        self.write(p, st, l.out, &t)
    }

    /// An f32 matmul step through the GEMM library, in place in the plan's memory. With a
    /// native epilogue kernel whose rows match the product's, the kernel runs per finished
    /// row tile inside the GEMM; so does the step's elementwise activation (`gelu`) on f32
    /// buffers, after the kernel (only when the kernel, if any, runs there too). Returns which
    /// of the two ran inside; the caller runs the others after.
    pub(super) fn run_gemm(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        m: &MatmulCall,
        epilogue: Option<&KernelStep>,
        packed: Option<&PackedB>,
    ) -> Result<(bool, bool), ExecError> {
        let (mut a_shape, mut b_shape) = (std::mem::take(&mut st.cpu.shape_a), std::mem::take(&mut st.cpu.shape_b));
        st.sizes.shape_into(p, m.a, &mut a_shape)?;
        st.sizes.shape_into(p, m.b, &mut b_shape)?;
        let kernel = match epilogue {
            Some(k) => self.prepare_native(p, st, k)?.filter(|&(_, count, _)| {
                let n = row_len(p, m.out);
                n > 0 && count >= 0 && (count as usize).checked_mul(n) == Some(st.sizes.lens[m.out.index()])
            }),
            None => None,
        };
        let native = match (epilogue.map(|k| &k.exec), kernel) {
            (Some(KernelExec::Native(native)), Some((args, _, _))) => Some((native, args)),
            _ => None,
        };
        // The activation runs inside only after a kernel that does, or on the product itself.
        let activation = m.activation.as_ref().filter(|l| {
            (native.is_some() || epilogue.is_none())
                && crate::ops::library::is_activation(l.op)
                && self.native_operands(p, l)
        });
        let activation = match activation {
            Some(l) => {
                let (x, out, n) = (l.args[0], l.out, row_len(p, l.args[0]));
                let rows = st.sizes.lens[m.out.index()] / row_len(p, m.out).max(1);
                let fits = n > 0
                    && rows.checked_mul(n) == Some(st.sizes.lens[x.index()])
                    && st.sizes.lens[out.index()] == st.sizes.lens[x.index()];
                fits.then(|| (l, self.address(st, inputs, x), self.address(st, inputs, out), n))
            }
            None => None,
        };
        let result = if native.is_none() && activation.is_none() {
            let none = crate::backend::cpu::gemm::Epilogue::none();
            self.gemm_with(st, inputs, m, &a_shape, &b_shape, &none, packed).map(|()| (false, false))
        } else {
            let failed: Mutex<Option<(String, String)>> = Mutex::new(None);
            let fail = |kernel: String, message: String| {
                let mut slot = failed.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert((kernel, message));
            };
            let hook = |tile: crate::backend::cpu::gemm::Tile<'_, f32>| {
                let (r0, r1) = (tile.row0, tile.row0 + tile.rows);
                if let Some((native, args)) = native {
                    if let Some(e) = call_native(native, args, r0 as i64, r1 as i64) {
                        return fail(epilogue_name(epilogue), e);
                    }
                }
                if let Some((l, x, out, n)) = activation {
                    // SAFETY: `x` and `out` are the starts of f32 buffers of `rows * n`
                    // elements (checked above); rows `r0..r1` of `x` are final (written by the
                    // GEMM or by the kernel just above for these rows), `out` is disjoint
                    // from every buffer of this step (the memory plan keeps the activation's
                    // buffers alive for the whole step), and distinct tiles take distinct rows.
                    let (x, y) = unsafe {
                        (
                            std::slice::from_raw_parts((x as *const f32).add(r0 * n), (r1 - r0) * n),
                            std::slice::from_raw_parts_mut((out as *mut f32).add(r0 * n), (r1 - r0) * n),
                        )
                    };
                    let shape = [r1 - r0, n];
                    if let Err(e) = crate::backend::cpu::rows::run_f32(l.op, &l.attrs, &[x], &[&shape], y, 1) {
                        fail(l.op.name().into(), e.to_string());
                    }
                }
            };
            let epi = crate::backend::cpu::gemm::Epilogue {
                hook: Some(&hook),
                whole_rows: true,
                ..crate::backend::cpu::gemm::Epilogue::none()
            };
            self.gemm_with(st, inputs, m, &a_shape, &b_shape, &epi, packed).and_then(|()| {
                match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
                    None => Ok((native.is_some(), activation.is_some())),
                    Some((kernel, message)) => Err(ExecError::Native { kernel, message }),
                }
            })
        };
        (st.cpu.shape_a, st.cpu.shape_b) = (a_shape, b_shape);
        result
    }

    /// An f32 convolution through the CPU backend's kernel (`backend::cpu::conv`), in place in
    /// the plan's memory, with its post-op as the kernel's epilogue (bias and activation per
    /// finished tile or row, while it is in cache); its im2col scratch is kept in the run state
    /// between calls.
    pub(super) fn run_conv(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        c: &crate::kernel::ConvCall,
        packed: Option<&PackedWeights>,
    ) -> Result<(), ExecError> {
        use crate::backend::cpu::activation::apply_f32;
        use crate::backend::cpu::conv::ConvGeom;
        use crate::backend::cpu::gemm::Epilogue;
        use crate::backend::cpu::pool::{max_pool2d, RowPool};
        let native = conv_error;
        let (mut xs, mut ws) = (std::mem::take(&mut st.cpu.shape_a), std::mem::take(&mut st.cpu.shape_b));
        st.sizes.shape_into(p, c.x, &mut xs)?;
        st.sizes.shape_into(p, c.w, &mut ws)?;
        let geom = ConvGeom::from_call(&xs, &ws, c).map_err(native);
        (st.cpu.shape_a, st.cpu.shape_b) = (xs, ws);
        let geom = geom?;
        let (x_len, w_len, out_len) =
            (st.sizes.lens[c.x.index()], st.sizes.lens[c.w.index()], st.sizes.lens[c.out.index()]);
        let (x, w, out) =
            (self.address(st, inputs, c.x), self.address(st, inputs, c.w), self.address(st, inputs, c.out));
        // The post-op as the kernel's epilogue: a bias (the channel buffer, or the constant
        // repeated per channel), then one activation; a ReLU with an activation after it runs
        // the second over the finished output.
        let post = c.post.as_ref();
        let bias_ptr = match post {
            Some(post) => self.post_bias(p, st, inputs, post, geom.out_ch)?,
            None => None,
        };
        let (activation, after) = post_activations(post)?;
        // SAFETY: as in `gemm_with`: each address starts its buffer for this run with `len` f32
        // elements, and `out` (a temporary or an output live while the operands are) is
        // disjoint from them (the scheduler folds a post-op only into a buffer the convolution
        // does not read). The bias is a buffer of this run (length checked above) or the run
        // state's own vector, which nothing touches until the step ends. The scratch is the
        // run state's own vector.
        let (x, w, out, bias) = unsafe {
            (
                slice_or_empty(x as *const f32, x_len),
                slice_or_empty(w as *const f32, w_len),
                slice_or_empty_mut(out as *mut f32, out_len),
                bias_ptr.map(|(ptr, len)| slice_or_empty(ptr, len)),
            )
        };
        let epilogue = Epilogue { bias, activation, ..Epilogue::none() };
        if let Some(pool) = &c.pool {
            // The pooling runs on each band of finished rows inside the blocked kernel with
            // packed weights; otherwise on the whole result, held in the run state.
            let rows = match geom.out_sp[..] {
                [h, w] => RowPool::new(&pool.attrs, h, w).map_err(native)?,
                _ => None,
            };
            if let (Some(pw), Some(rows)) = (packed, rows) {
                if pw.conv_pooled(&geom, Some(&rows), x, out, self.threads, &epilogue).map_err(native)? {
                    if let Some(a) = after {
                        apply_f32(&a, out);
                    }
                    return Ok(());
                }
            }
            let mut whole = std::mem::take(&mut st.cpu.conv_result);
            let mut shape = std::mem::take(&mut st.cpu.shape_a);
            let result = (|| {
                st.sizes.shape_into(p, pool.unpooled, &mut shape)?;
                // Each buffer's size is within the run's limit (checked when the sizes were
                // bound); memory the system cannot give is an error, not an abort.
                let len = st.sizes.lens[pool.unpooled.index()];
                whole.try_reserve(len.saturating_sub(whole.len())).map_err(|_| ExecError::Native {
                    kernel: "conv".into(),
                    message: format!("cannot allocate the {len} elements of the convolution's result"),
                })?;
                whole.resize(len, 0.0);
                let none = Epilogue::none();
                self.conv_into(st, &geom, x, w, &mut whole, packed, &none)?;
                max_pool2d(&pool.attrs, &whole, &shape, out, self.threads).map_err(native)
            })();
            (st.cpu.conv_result, st.cpu.shape_a) = (whole, shape);
            result?;
            return match &c.post {
                Some(post) => self.run_post(p, st, inputs, post, c.out),
                None => Ok(()),
            };
        }
        self.conv_into(st, &geom, x, w, out, packed, &epilogue)?;
        if let Some(a) = after {
            apply_f32(&a, out);
        }
        Ok(())
    }

    /// `out = epilogue(conv(x, w))`: with the weight packed when the plan was built (no
    /// scratch, no packing) where it fits, else with the run state's scratch.
    #[allow(clippy::too_many_arguments)]
    fn conv_into(
        &self,
        st: &mut St,
        geom: &crate::backend::cpu::conv::ConvGeom,
        x: &[f32],
        w: &[f32],
        out: &mut [f32],
        packed: Option<&PackedWeights>,
        epilogue: &crate::backend::cpu::gemm::Epilogue<'_, f32>,
    ) -> Result<(), ExecError> {
        let native = conv_error;
        if let Some(pw) = packed {
            if pw.conv(geom, x, out, self.threads, epilogue).map_err(native)? {
                return Ok(());
            }
        }
        let need = geom.scratch_len(self.threads);
        if st.cpu.conv_scratch.len() < need {
            st.cpu.conv_scratch.resize(need, 0.0);
        }
        let scratch = &mut st.cpu.conv_scratch[..need];
        crate::backend::cpu::conv::conv(geom, x, w, out, Some(scratch), self.threads, epilogue).map_err(native)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemm_with(
        &self,
        st: &mut St,
        inputs: &[TensorView],
        m: &MatmulCall,
        a_shape: &[usize],
        b_shape: &[usize],
        epilogue: &crate::backend::cpu::gemm::Epilogue<'_, f32>,
        packed: Option<&PackedB>,
    ) -> Result<(), ExecError> {
        let (a_len, b_len, out_len) =
            (st.sizes.lens[m.a.index()], st.sizes.lens[m.b.index()], st.sizes.lens[m.out.index()]);
        let (a, b, out) =
            (self.address(st, inputs, m.a), self.address(st, inputs, m.b), self.address(st, inputs, m.out));
        // SAFETY: each address is the start of its buffer for this run (an input tensor's data,
        // a constant's data, or the buffer's place in the arena), holding `len` f32 elements
        // (the lengths were evaluated from the buffers' shapes by `bind`, and inputs were
        // checked against those shapes). `out` is a temporary whose lifetime overlaps the
        // operands', so the memory plan gives it bytes disjoint from theirs, and nothing else
        // touches the arena during this step.
        let (a, b, out) = unsafe {
            (
                std::slice::from_raw_parts(a as *const f32, a_len),
                std::slice::from_raw_parts(b as *const f32, b_len),
                std::slice::from_raw_parts_mut(out as *mut f32, out_len),
            )
        };
        crate::backend::cpu::gemm::matmul_f32(
            a,
            a_shape,
            b,
            b_shape,
            m.transpose_a,
            m.transpose_b,
            out,
            self.threads,
            epilogue,
            packed,
        )
        .map_err(|e| ExecError::Native { kernel: "matmul".into(), message: e.to_string() })
    }
}

/// A post-op's ReLU or activation as the one activation of a CPU epilogue, and the
/// activation to run after it when the post-op has both.
fn post_activations(post: Option<&ChannelPost>) -> Result<(Activation, Option<Activation>), ExecError> {
    let after = match post.and_then(|p| p.activation.as_ref()) {
        Some((op, attrs)) => Some(
            Activation::from_op(*op, attrs)
                .ok_or_else(|| ExecError::Invalid(format!("post-op activation {op} has no CPU kernel")))?,
        ),
        None => None,
    };
    Ok(match (post.is_some_and(|p| p.relu), after) {
        (true, after) => (Activation::Relu, after),
        (false, Some(a)) => (a, None),
        (false, None) => (Activation::None, None),
    })
}

/// `len` elements at `ptr` (empty when `len` is 0, whatever the pointer).
///
/// # Safety
/// When `len > 0`, `ptr` must point to `len` initialised elements nothing writes while the
/// slice lives.
unsafe fn slice_or_empty<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's guarantee.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// `len` writable elements at `ptr` (empty when `len` is 0).
///
/// # Safety
/// When `len > 0`, `ptr` must point to `len` initialised elements nothing else touches while
/// the slice lives.
unsafe fn slice_or_empty_mut<'a, T>(ptr: *mut T, len: usize) -> &'a mut [T] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's guarantee.
    unsafe { std::slice::from_raw_parts_mut(ptr, len) }
}

/// A convolution kernel's error as the step's.
fn conv_error(e: crate::backend::cpu::gemm::KernelError) -> ExecError {
    ExecError::Native { kernel: "conv".into(), message: e.to_string() }
}
