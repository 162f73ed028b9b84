//! Kernel steps of a plan: the reference executor or the native entry point, split over the
//! current rayon pool, and a kernel whose stores go straight into its fused activation.

use super::*;

impl CpuExecutable {
    pub(super) fn run_kernel_step(
        &self,
        p: &Program,
        st: &mut St,
        k: &KernelStep,
        inputs: &[TensorView],
    ) -> Result<(), ExecError> {
        match &k.exec {
            KernelExec::Reference => {
                let symbols = &st.sizes.symbols;
                let lookup = |s: &str| p.symbols.iter().position(|x| &**x == s).and_then(|i| symbols[i]);
                k.prepared.eval_dims(&lookup, &mut st.cpu.dims)?;
                let lens = &st.sizes.lens;
                k.prepared.check(&st.cpu.dims, &|b: BufferId| lens[b.index()])?;
                let mut mem = RunMemory {
                    locs: &self.locs,
                    dtypes: &self.dtypes,
                    lens: &st.sizes.lens,
                    offsets: &st.cpu.offsets,
                    inputs,
                    arena: arena_bytes_mut(&mut st.cpu.arena),
                    outs: st.outs,
                    kernel: &k.prepared.name,
                };
                run_kernel(&k.prepared, &st.cpu.dims, &mut mem, &mut st.cpu.scratch)
            }
            KernelExec::Native(native) => {
                let Some((args, count, work)) = self.prepare_native(p, st, k)? else {
                    return Err(ExecError::Native { kernel: k.prepared.name.clone(), message: "not native".into() });
                };
                match run_native(native, args, count, self.threads, work) {
                    None => Ok(()),
                    Some(message) => Err(ExecError::Native { kernel: k.prepared.name.clone(), message }),
                }
            }
        }
    }

    /// A kernel step and its activation, if it has one: fused where that qualifies
    /// ([`Self::run_kernel_activation`]), else in turn.
    pub(super) fn run_kernel_and_activation(
        &self,
        p: &Program,
        st: &mut St,
        inputs: &[TensorView],
        kernel: &crate::kernel::Kernel,
        k: Option<&KernelStep>,
    ) -> Result<(), ExecError> {
        let mut fused = false;
        if let Some(k) = k {
            if let Some(l) = &kernel.activation {
                fused = self.run_kernel_activation(p, st, k, l)?;
            }
            if !fused {
                self.run_kernel_step(p, st, k, inputs)?;
            }
        }
        if let (Some(l), false) = (&kernel.activation, fused) {
            self.run_library(p, st, inputs, l)?;
        }
        Ok(())
    }

    /// Whether kernel step `k` runs its activation `l` fused ([`Self::run_kernel_activation`]):
    /// a native kernel, and `gelu` on f32 buffers with a static row length. Fixed when the plan
    /// is made (the stored temporary then gets no memory).
    pub(super) fn fuses_activation(&self, p: &Program, k: &KernelStep, l: &LibraryCall) -> bool {
        matches!(k.exec, KernelExec::Native(_))
            && self.native_library
            && crate::ops::library::is_activation(l.op)
            && crate::backend::cpu::activation::Activation::from_op(l.op, &l.attrs).is_some()
            && matches!(l.args[..], [x] if self.all_f32(p, &[x, l.out]) && row_len(p, x) > 0)
    }

    /// A native kernel step with its elementwise activation `l` (`gelu`, on f32 buffers of one
    /// shape; see `Kernel::activation`): the kernel's stores to `l`'s argument go straight to
    /// `l`'s result (the argument's pointer in the buffer table is the result's), and after
    /// each range of rows of about [`FUSED_ROWS_BYTES`] the activation runs there in place,
    /// while the rows are in L1. The argument buffer is never touched (it has no memory).
    /// Returns `false`, having done nothing, when the step does not qualify (a
    /// reference-executor kernel, other dtypes; see [`Self::fuses_activation`]); the caller
    /// then runs the two in turn.
    pub(super) fn run_kernel_activation(
        &self,
        p: &Program,
        st: &mut St,
        k: &KernelStep,
        l: &LibraryCall,
    ) -> Result<bool, ExecError> {
        use crate::backend::cpu::activation::{apply_f32, Activation};
        if !self.fuses_activation(p, k, l) {
            return Ok(false);
        }
        // From here on the stored temporary has no memory (see `compile`), so running the two
        // steps in turn is not an option: what `fuses_activation` and the scheduler's checks
        // make unreachable is an error, not a fallback.
        let unfit =
            || ExecError::Invalid(format!("kernel {} cannot run {} {} on its rows", k.prepared.name, l.op, l.out));
        let (KernelExec::Native(native), &[x]) = (&k.exec, &l.args[..]) else { return Err(unfit()) };
        let act = Activation::from_op(l.op, &l.attrs).ok_or_else(unfit)?;
        let (args, count, work) = self.prepare_native(p, st, k)?.ok_or_else(unfit)?;
        let len = st.sizes.lens[x.index()];
        // Each outermost iteration stores one block of `n` elements (a row, or several: the
        // scheduler checked the stores' indices).
        let rows = usize::try_from(count).unwrap_or(usize::MAX);
        let n = len.checked_div(rows).unwrap_or_else(|| row_len(p, x));
        if n == 0 || st.sizes.lens[l.out.index()] != len || rows.checked_mul(n) != Some(len) {
            return Err(unfit());
        }
        let saved = st.cpu.ptrs[x.index()];
        st.cpu.ptrs[x.index()] = st.cpu.ptrs[l.out.index()];
        let out = st.cpu.ptrs[l.out.index()];
        // The kernel's table again, with the new address (same storage: `args` still holds).
        let args = NativeArgs { bufs: Self::buffer_table(st, k), ..args };
        let per = (FUSED_ROWS_BYTES / (4 * n)).max(1);
        let run = |begin: usize, end: usize| -> Option<String> {
            let mut r0 = begin;
            while r0 < end {
                let r1 = (r0 + per).min(end);
                if let Some(e) = call_native(native, args, r0 as i64, r1 as i64) {
                    return Some(e);
                }
                // SAFETY: `out` holds `rows * n` f32 (checked above); rows `r0..r1` were just
                // written by the kernel (its stores of `x` land there) and no other thread
                // touches them: ranges of rows are disjoint.
                let y = unsafe { std::slice::from_raw_parts_mut((out as *mut f32).add(r0 * n), (r1 - r0) * n) };
                apply_f32(&act, y);
                r0 = r1;
            }
            None
        };
        // The activation's work counts too (tens of instructions per element for gelu).
        let work = work.saturating_add(len as u64 * 16);
        let threads = ((work / PAR_WORK).min(self.threads as u64) as usize).clamp(1, rows.max(1));
        let error = if threads <= 1 {
            run(0, rows)
        } else {
            use rayon::prelude::*;
            let chunk = rows.div_ceil(threads);
            (0..threads)
                .into_par_iter()
                .with_max_len(1)
                .map(|t| run(t * chunk, ((t + 1) * chunk).min(rows)))
                .reduce(|| None, |a, b| a.or(b))
        };
        st.cpu.ptrs[x.index()] = saved;
        match error {
            None => Ok(true),
            Some(message) => Err(ExecError::Native { kernel: k.prepared.name.clone(), message }),
        }
    }

    /// For a native kernel: its call's arguments (the run's buffer table and its dim table),
    /// its outermost loop's count and its work estimate; `None` for a kernel on the reference
    /// executor. The dims are evaluated and every access checked against the buffers the
    /// first time a run state meets the kernel with these symbol values, then kept.
    pub(super) fn prepare_native(
        &self,
        p: &Program,
        st: &mut St,
        k: &KernelStep,
    ) -> Result<Option<(NativeArgs, i64, u64)>, ExecError> {
        let KernelExec::Native(native) = &k.exec else { return Ok(None) };
        // Evaluated and checked once per set of symbol values (the run state keeps them).
        if st.cpu.prepared.get(k.id).is_none_or(Option::is_none) {
            let symbols = &st.sizes.symbols;
            let lookup = |s: &str| p.symbols.iter().position(|x| &**x == s).and_then(|i| symbols[i]);
            k.prepared.eval_dims(&lookup, &mut st.cpu.dims)?;
            let lens = &st.sizes.lens;
            k.prepared.check(&st.cpu.dims, &|b: BufferId| lens[b.index()])?;
            let mut native_dims = Vec::with_capacity(native.dims.len());
            for d in &native.dims {
                let v = d.eval(&lookup)?;
                native_dims.push(i64::try_from(v).map_err(|_| ExecError::Overflow)?);
            }
            let (count, work) = (k.prepared.outer_count(&st.cpu.dims), k.prepared.work(&st.cpu.dims));
            if st.cpu.prepared.len() <= k.id {
                st.cpu.prepared.resize_with(k.id + 1, || None);
            }
            st.cpu.prepared[k.id] = Some(Prepared { native_dims, count, work });
        }
        let bufs = Self::buffer_table(st, k);
        let Some(Some(prep)) = st.cpu.prepared.get(k.id) else { unreachable!("prepared just above") };
        let args = NativeArgs { bufs, dims: prep.native_dims.as_ptr() };
        Ok(Some((args, prep.count, prep.work)))
    }

    /// The buffer table kernel step `k`'s code reads: the run's, or for code compiled from
    /// the kernel's canonical form, its own buffers' addresses in that form's order, taken
    /// from the run's table now (so call it again after changing an address there).
    pub(super) fn buffer_table(st: &mut St, k: &KernelStep) -> *const *mut u8 {
        let Some(slots) = &k.slots else { return st.cpu.ptrs.as_ptr().cast() };
        if st.cpu.tables.len() <= k.id {
            st.cpu.tables.resize_with(k.id + 1, Vec::new);
        }
        let (table, ptrs) = (&mut st.cpu.tables[k.id], &st.cpu.ptrs);
        table.clear();
        table.extend(slots.iter().map(|b| ptrs[b.index()]));
        table.as_ptr().cast()
    }
}

/// Calls a native kernel for `begin..end` of its outermost loop on this thread; returns the
/// error it recorded, if any.
pub(super) fn call_native(k: &NativeKernel, a: NativeArgs, begin: i64, end: i64) -> Option<String> {
    if let Some(t) = k.take_error {
        t();
    }
    // SAFETY: `a` points to a buffer table with one valid base address per program buffer
    // (every affine access of the kernel was checked against the buffer sizes) and to the
    // kernel's evaluated dim table; both outlive the call, and concurrent calls get disjoint
    // ranges of the outermost loop, which write disjoint elements.
    unsafe { (k.entry)(a.bufs, a.dims, begin, end) };
    k.take_error.and_then(|t| t())
}

pub(super) fn epilogue_name(k: Option<&KernelStep>) -> String {
    k.map_or_else(String::new, |k| k.prepared.name.clone())
}

/// Calls a native kernel for `0..count` of its outermost loop, split into at most `threads`
/// contiguous ranges run on the current rayon pool when `work` (its instruction estimate) is
/// at least [`PAR_WORK`] per range. Returns the first error the kernel recorded.
pub(super) fn run_native(k: &NativeKernel, args: NativeArgs, count: i64, threads: usize, work: u64) -> Option<String> {
    let call = |a: NativeArgs, begin: i64, end: i64| call_native(k, a, begin, end);
    let by_work = (work / PAR_WORK).min(threads as u64) as i64;
    let threads = by_work.clamp(1, count.max(1));
    if threads <= 1 {
        return call(args, 0, count);
    }
    let chunk = (count + threads - 1) / threads;
    use rayon::prelude::*;
    (0..threads as usize)
        .into_par_iter()
        .with_max_len(1)
        .map(|t| {
            let t = t as i64;
            let (begin, end) = (t * chunk, ((t + 1) * chunk).min(count));
            if begin < end {
                call(args, begin, end)
            } else {
                None
            }
        })
        .reduce(|| None, |a, b| a.or(b))
}
