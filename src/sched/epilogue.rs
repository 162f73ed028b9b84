//! GEMM epilogues: a kernel that consumes a matrix product row by row runs as the product's
//! epilogue, per finished row tile, while the tile is still in cache.
//!
//! After assembly, a `matmul` step immediately followed by a kernel step is fused when:
//!
//! - the kernel reads the product only through affine loads (never a computed `LoadAt`) and
//!   never writes it;
//! - the kernel's outermost loop runs over the product's rows (the output viewed as
//!   `[rows, n]` with `n` its static last dim; `rows` the product of the other dims), and
//!   every load of the product in iteration `r` of that loop stays inside row `r`: the index
//!   is `n·o0 + Σ strideᵢ·varᵢ` with static non-negative strides and extents whose span is
//!   below `n`.
//!
//! An elementwise library op (a recovered `gelu`) right after such a matmul whose argument is
//! the product, or a buffer the epilogue kernel stores row by row (the same index test), runs
//! per row tile too, after the kernel: an MLP's `matmul → bias → gelu` is one GEMM call.
//!
//! The same op right after a plain kernel step runs on that kernel's rows when its argument
//! is an f32 temporary the kernel stores row by row (the same index test), never loads, and
//! nothing else reads (`Kernel::activation`): `x·a + b → gelu` is one pass, the kernel writing
//! straight into gelu's result and gelu applied there per range of rows while they are in L1.
//!
//! Then iteration `r` of the kernel needs only row `r` of the product, so a backend can run
//! the kernel for rows `r0..r1` as soon as the GEMM has written them (bias adds, activations,
//! residual adds, a following layer norm's row statistics: whatever the scheduler fused into
//! the consumer). A backend that does not fuse runs the kernel after the whole product, which
//! means the same. The fused kernel keeps its name, so `ladder dump --stage kernels` shows it
//! under its matmul.
//!
//! Last, per-channel post-ops (`kernel::ChannelPost`): a kernel right after a convolution or
//! another library step (a pooling) that computes `max?(v + bias[c] or a constant, +0)` at
//! every element `v` of the step's result (an f32 temporary nothing else reads), with the
//! kernel's activation if it has one, folds into that step, which then writes the kernel's
//! (or the activation's) result itself: `conv → bias → ReLU` or `conv → bias → SiLU` is one
//! step, `max_pool2d → bias → ReLU` another (the simplifier puts a convolution's bias and
//! ReLU after its max pooling). A native backend applies the post-op while the result is in
//! cache: per finished block of rows of the blocked convolution, per GEMM tile, per plane.
//!
//! A `max_pool2d` of a convolution's result (with its post-op) then folds into the
//! convolution (`kernel::ConvPool`): a native backend pools each band of rows as the
//! convolution finishes them, and the convolution's full result is never stored.

use std::fmt::Write;

use cranelift_entity::EntityRef;

use crate::ir::{DType, Dim};
use crate::kernel::{
    Addend, BufferId, BufferKind, ChannelPost, ConvCall, ConvPool, Instr, Kernel, Program, Scalar, Step, Var,
};
use crate::ops::OpKind;

/// Fuses every eligible (matmul, consumer kernel) pair of `p`, then a recovered `gelu` right
/// after; returns one line per fusion, and per refusal of an adjacent pair, for `--explain`.
pub fn fuse(p: &mut Program) -> String {
    let mut notes = String::new();
    let mut uses = Uses::of(p);
    let mut i = 0;
    while i + 1 < p.steps.len() {
        let verdict = match (&p.steps[i], &p.steps[i + 1]) {
            (Step::Matmul(m), Step::Kernel(k)) if m.epilogue.is_none() => eligible(p, m.out, k),
            (Step::Matmul(m), Step::Library(l))
                if m.activation.is_none() && crate::ops::library::is_activation(l.op) =>
            {
                activation_eligible(p, m, l)
            }
            (Step::Kernel(k), Step::Library(l))
                if k.activation.is_none() && crate::ops::library::is_activation(l.op) =>
            {
                kernel_activation_eligible(p, &uses, i, k, l)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let (fused, refused) = match (&p.steps[i], &p.steps[i + 1]) {
            (Step::Matmul(m), Step::Kernel(k)) => (
                format!("{} runs as the epilogue of matmul {}", k.name, m.out),
                format!("{} is not the epilogue of matmul {}", k.name, m.out),
            ),
            (Step::Matmul(m), Step::Library(l)) => (
                format!("{} {} runs in matmul {} after its epilogue", l.op, l.out, m.out),
                format!("{} {} does not run in matmul {}", l.op, l.out, m.out),
            ),
            (Step::Kernel(k), Step::Library(l)) => (
                format!("{} {} runs on the rows kernel {} stores", l.op, l.out, k.name),
                format!("{} {} does not run in kernel {}", l.op, l.out, k.name),
            ),
            _ => unreachable!("matched above"),
        };
        let Err(why) = verdict else {
            uses.forget(&p.steps[i]);
            uses.forget(&p.steps[i + 1]);
            let next = p.steps.remove(i + 1);
            let fused_step = match (&mut p.steps[i], next) {
                (Step::Matmul(m), Step::Kernel(k)) => {
                    m.epilogue = Some(Box::new(k));
                    false
                }
                (Step::Matmul(m), Step::Library(l)) => {
                    m.activation = Some(l);
                    false
                }
                (Step::Kernel(k), Step::Library(l)) => {
                    k.activation = Some(l);
                    true
                }
                _ => unreachable!("matched above"),
            };
            uses.count(&p.steps[i]);
            if fused_step {
                let _ = writeln!(notes, "; {fused} (per range of rows)");
                i += 1;
                continue;
            }
            let _ = writeln!(notes, "; {fused} (per finished row tile)");
            // The same matmul may take the step after too (a gelu after its kernel).
            continue;
        };
        let _ = writeln!(notes, "; {refused}: {why}");
        i += 1;
    }
    notes.push_str(&fold_posts(p, &mut uses));
    notes.push_str(&fold_pools(p, &mut uses));
    notes
}

/// How many steps touch each buffer (a step counts once however often it names one), kept up
/// to date as steps fuse: what [`private_to`] asks, without scanning every step each time
/// (which costs the square of the steps over a program).
struct Uses(Vec<u32>);

impl Uses {
    fn of(p: &Program) -> Uses {
        let mut uses = Uses(vec![0; p.buffers.len()]);
        for s in &p.steps {
            uses.count(s);
        }
        uses
    }

    /// The buffers `s` touches, once each.
    fn buffers(s: &Step) -> Vec<BufferId> {
        let mut seen = Vec::new();
        s.for_each_buffer(|b| {
            if !seen.contains(&b) {
                seen.push(b);
            }
        });
        seen
    }

    fn count(&mut self, s: &Step) {
        for b in Self::buffers(s) {
            if b.index() >= self.0.len() {
                self.0.resize(b.index() + 1, 0);
            }
            self.0[b.index()] += 1;
        }
    }

    fn forget(&mut self, s: &Step) {
        for b in Self::buffers(s) {
            if let Some(n) = self.0.get_mut(b.index()) {
                *n = n.saturating_sub(1);
            }
        }
    }

    fn get(&self, b: BufferId) -> u32 {
        self.0.get(b.index()).copied().unwrap_or(0)
    }
}

/// Folds every kernel right after a convolution or another library step (a pooling) that
/// adds a per-channel bias (or one constant) to the step's result and maybe clamps it at
/// zero, with that kernel's activation, into the step's [`ChannelPost`]: the step then writes
/// the final buffer itself, and its own result buffer is left untouched. A convolution takes
/// an activation step right after it the same way. Runs after the kernel activations are
/// fused, so `conv → bias → silu` folds whole. One line per fold or refusal.
fn fold_posts(p: &mut Program, uses: &mut Uses) -> String {
    let mut notes = String::new();
    let mut i = 0;
    while i + 1 < p.steps.len() {
        // An activation step right after (its kernel's loops did not let it fuse there).
        if let (Step::Conv(c), Step::Library(l)) = (&p.steps[i], &p.steps[i + 1]) {
            if c.post.as_ref().is_none_or(|post| post.activation.is_none()) && crate::ops::library::is_activation(l.op)
            {
                match conv_activation_of(p, uses, i, c, l) {
                    Ok(()) => {
                        let _ = writeln!(notes, "; {} {} runs inside conv {}", l.op, l.out, c.out);
                        uses.forget(&p.steps[i]);
                        uses.forget(&p.steps[i + 1]);
                        let Step::Library(l) = p.steps.remove(i + 1) else { unreachable!("matched above") };
                        if let Step::Conv(c) = &mut p.steps[i] {
                            let post =
                                c.post.get_or_insert(ChannelPost { addend: None, relu: false, activation: None });
                            post.activation = Some((l.op, l.attrs));
                            c.out = l.out;
                        }
                        uses.count(&p.steps[i]);
                    }
                    Err(why) => {
                        let _ = writeln!(notes, "; {} {} does not run inside conv {}: {why}", l.op, l.out, c.out);
                    }
                }
                i += 1;
                continue;
            }
        }
        let Step::Kernel(k) = &p.steps[i + 1] else {
            i += 1;
            continue;
        };
        // The step the kernel may fold into: what it reads and writes, and how it is named.
        let (reads, x, what) = match &p.steps[i] {
            Step::Conv(c) if c.post.is_none() => (vec![c.x, c.w], c.out, "conv"),
            Step::Library(l) if l.post.is_none() => (l.args.clone(), l.out, l.op.name()),
            _ => {
                i += 1;
                continue;
            }
        };
        match post_of(p, uses, i, &reads, x, k) {
            Ok((post, out)) => {
                let _ = writeln!(notes, "; {} runs inside {what} {x}, which writes {out}", k.name);
                uses.forget(&p.steps[i]);
                uses.forget(&p.steps[i + 1]);
                p.steps.remove(i + 1);
                match &mut p.steps[i] {
                    Step::Conv(c) => (c.post, c.out) = (Some(post), out),
                    Step::Library(l) => (l.post, l.out) = (Some(post), out),
                    _ => unreachable!("matched above"),
                }
                uses.count(&p.steps[i]);
                // The same step may take an activation step after it too.
                continue;
            }
            Err(why) => {
                let _ = writeln!(notes, "; {} does not run inside {what} {x}: {why}", k.name);
            }
        }
        i += 1;
    }
    notes
}

/// Folds every `max_pool2d` step right after a convolution into it, when it pools the
/// convolution's f32 result `[N, C, H, W]` (a temporary nothing else touches) and the
/// convolution has no post-op of its own: the convolution then writes the pooled result,
/// with the pooling's post-op (the bias and ReLU the simplifier moved past the pooling), and
/// its own result is never stored. Runs after [`fold_posts`], so `conv → max_pool2d → bias →
/// ReLU` is one step. One line per fold or refusal.
fn fold_pools(p: &mut Program, uses: &mut Uses) -> String {
    let mut notes = String::new();
    let mut i = 0;
    while i + 1 < p.steps.len() {
        let (Step::Conv(c), Step::Library(l)) = (&p.steps[i], &p.steps[i + 1]) else {
            i += 1;
            continue;
        };
        if l.op != OpKind::MaxPool2d || l.args[..] != [c.out] {
            i += 1;
            continue;
        }
        match pool_of(p, uses, i, c, l) {
            Ok(()) => {
                let _ = writeln!(notes, "; max_pool2d {} runs inside conv {} on its finished rows", l.out, c.out);
                uses.forget(&p.steps[i]);
                uses.forget(&p.steps[i + 1]);
                let Step::Library(l) = p.steps.remove(i + 1) else { unreachable!("matched above") };
                if let Step::Conv(c) = &mut p.steps[i] {
                    c.pool = Some(ConvPool { attrs: l.attrs, unpooled: c.out });
                    (c.post, c.out) = (l.post, l.out);
                }
                uses.count(&p.steps[i]);
            }
            Err(why) => {
                let _ = writeln!(notes, "; max_pool2d {} does not run inside conv {}: {why}", l.out, c.out);
            }
        }
        i += 1;
    }
    notes
}

/// Whether pooling `l` (step `i + 1`) of convolution `c`'s result (step `i`) folds into it.
fn pool_of(p: &Program, uses: &Uses, i: usize, c: &ConvCall, l: &crate::kernel::LibraryCall) -> Result<(), String> {
    if c.post.is_some() || c.pool.is_some() {
        return Err("the convolution has a post-op of its own".into());
    }
    private_to(p, uses, i, c.out)?;
    let (bx, bo) = (&p.buffers[c.out], &p.buffers[l.out]);
    if bx.dtype != DType::F32 || bo.dtype != DType::F32 || bx.shape.rank() != 4 {
        return Err(format!("{} is not an f32 result of a two-dimensional convolution", c.out));
    }
    if conv_reads(c, l.post.as_ref(), l.out) {
        return Err(format!("the convolution reads {}", l.out));
    }
    Ok(())
}

/// Whether convolution `c`, with the per-channel addend of `post` if it has one, reads `b`.
fn conv_reads(c: &ConvCall, post: Option<&ChannelPost>, b: BufferId) -> bool {
    let bias = match post.and_then(|post| post.addend.as_ref()) {
        Some(Addend::Channel(a)) => Some(*a),
        _ => None,
    };
    [c.x, c.w].into_iter().chain(bias).any(|x| x == b)
}

/// Whether the elementwise activation `l` (step `i + 1`) can run inside convolution `c`
/// (step `i`): its one argument is `c`'s f32 result, a temporary nothing else reads, and its
/// result is an f32 buffer of that shape the convolution does not read.
fn conv_activation_of(
    p: &Program,
    uses: &Uses,
    i: usize,
    c: &ConvCall,
    l: &crate::kernel::LibraryCall,
) -> Result<(), String> {
    if l.args[..] != [c.out] {
        return Err(format!("its argument is not {}", c.out));
    }
    private_to(p, uses, i, c.out)?;
    let (bx, bo) = (&p.buffers[c.out], &p.buffers[l.out]);
    if bx.dtype != DType::F32 || bo.dtype != DType::F32 || bx.shape != bo.shape {
        return Err(format!("{} and {} are not f32 buffers of one shape", c.out, l.out));
    }
    if conv_reads(c, c.post.as_ref(), l.out) {
        return Err(format!("the convolution reads {}", l.out));
    }
    Ok(())
}

/// The post-op and final buffer of library step `i` (a convolution, a pooling: it reads
/// `reads` and writes `x`) with kernel `k` (step `i + 1`) folded in, or why not: `k` computes
/// `y = max?(v + addend?, +0)` at every element `v` of `x` (an f32 temporary nothing else
/// reads), the addend one value per channel (`bias[c]`, dim 1) or a constant, and stores `y`
/// at the same index; `y`, or the result of `k`'s activation on `y`, is what the step writes
/// instead.
fn post_of(
    p: &Program,
    uses: &Uses,
    i: usize,
    reads: &[BufferId],
    x: BufferId,
    k: &Kernel,
) -> Result<(ChannelPost, BufferId), String> {
    private_to(p, uses, i, x)?;
    let (mut post, y) = channel_map(p, x, k)?;
    let out = match &k.activation {
        Some(l) => {
            private_to(p, uses, i, y)?;
            post.activation = Some((l.op, l.attrs.clone()));
            l.out
        }
        None => y,
    };
    let (bx, bo) = (&p.buffers[x], &p.buffers[out]);
    if bo.dtype != DType::F32 || bo.shape != bx.shape {
        return Err(format!("{out} is not an f32 buffer of {x}'s shape"));
    }
    let bias = match &post.addend {
        Some(Addend::Channel(b)) => Some(*b),
        _ => None,
    };
    if reads.iter().copied().chain(bias).any(|b| b == out) {
        return Err(format!("the step reads {out}"));
    }
    Ok((post, out))
}

/// What a kernel reading `x` (a library step's f32 result, `[N, C, spatial...]`) computes, when
/// it is `y[e] = max?(x[e] + addend?, +0)` for every element `e` of `x`, in one stage without
/// accumulators: the post-op (no activation yet) and `y`. The index of `x`'s load and `y`'s
/// store must enumerate `x` exactly once (see [`enumerates`]); a per-channel addend is a load
/// of an f32 buffer of `C` values at `1·v`, `v` the loop whose stride in that index is the
/// spatial plane's size and whose extent is `C`.
fn channel_map(p: &Program, x: BufferId, k: &Kernel) -> Result<(ChannelPost, BufferId), String> {
    #[derive(Clone)]
    enum Sym {
        X,
        Bias(BufferId),
        Const(f64),
        Sum(Addend),
        Relu(Option<Addend>),
    }
    let [stage] = &k.stages[..] else { return Err("it has more than one stage".into()) };
    if !stage.accumulators.is_empty() {
        return Err("it reduces".into());
    }
    let bx = &p.buffers[x];
    let dims = bx.shape.dims();
    if bx.dtype != DType::F32 || dims.len() < 3 {
        return Err(format!("{x} is not an f32 result with channels"));
    }
    let channels = dims[1].clone();
    let mut plane = Dim::from(1u64);
    for d in &dims[2..] {
        plane = plane.mul(d).map_err(|e| format!("{x}'s plane: {e}"))?;
    }
    let numel = bx.shape.numel().map_err(|e| format!("{x}'s size: {e}"))?;
    let extent = |v: Var| match v {
        Var::Outer(j) => k.outer.get(j as usize).cloned(),
        Var::Inner(j) => stage.inner.get(j as usize).cloned(),
    };
    let mut regs: std::collections::HashMap<crate::kernel::Reg, Sym> = Default::default();
    let (mut x_index, mut bias_var, mut stored) = (None, None, None);
    let unexpected = |what: &str| Err(format!("it {what}"));
    for instr in &stage.body {
        match instr {
            Instr::Load { dst, buf, index } if *buf == x => {
                if x_index.is_some() {
                    return unexpected(&format!("loads {x} twice"));
                }
                enumerates(index, &extent, &numel)
                    .map_err(|e| format!("loads {x} at an index that does not visit each element once: {e}"))?;
                x_index = Some(index.clone());
                regs.insert(*dst, Sym::X);
            }
            Instr::Load { dst, buf, index } => {
                let b = &p.buffers[*buf];
                let n = b.shape.numel().ok();
                match (&index.terms[..], index.offset.as_const()) {
                    ([(v, s)], Some(0))
                        if s.as_const() == Some(1) && b.dtype == DType::F32 && n.as_ref() == Some(&channels) =>
                    {
                        if bias_var.replace(*v).is_some_and(|w| w != *v) {
                            return unexpected("loads per-channel values along two loops");
                        }
                        regs.insert(*dst, Sym::Bias(*buf));
                    }
                    _ => return unexpected(&format!("loads {buf}, which is not one value per channel")),
                }
            }
            Instr::Const { dst, value: Scalar::Float(v), dtype: DType::F32 } => {
                regs.insert(*dst, Sym::Const(*v));
            }
            Instr::Binary { dst, op, a, b, dtype: DType::F32 } => {
                let (a, b) = (regs.get(a).cloned(), regs.get(b).cloned());
                let sym = match (op, a, b) {
                    (OpKind::Add, Some(Sym::X), Some(c)) | (OpKind::Add, Some(c), Some(Sym::X)) => match c {
                        Sym::Bias(buf) => Sym::Sum(Addend::Channel(buf)),
                        Sym::Const(v) => Sym::Sum(Addend::Scalar(v)),
                        _ => return unexpected(&format!("adds something other than a bias to {x}")),
                    },
                    (OpKind::Max, Some(v), Some(Sym::Const(z))) | (OpKind::Max, Some(Sym::Const(z)), Some(v))
                        if z == 0.0 && z.is_sign_positive() =>
                    {
                        match v {
                            Sym::X => Sym::Relu(None),
                            Sym::Sum(a) => Sym::Relu(Some(a)),
                            _ => return unexpected(&format!("clamps something other than the biased {x}")),
                        }
                    }
                    _ => return unexpected(&format!("computes a {op} that is not a bias or a clamp at +0")),
                };
                regs.insert(*dst, sym);
            }
            Instr::Store { buf, index, value } => {
                if stored.is_some() {
                    return unexpected("stores twice");
                }
                let post = match regs.get(value) {
                    Some(Sym::Sum(a)) => ChannelPost { addend: Some(a.clone()), relu: false, activation: None },
                    Some(Sym::Relu(a)) => ChannelPost { addend: a.clone(), relu: true, activation: None },
                    _ => return unexpected(&format!("stores into {buf} something other than the biased {x}")),
                };
                if Some(index) != x_index.as_ref() || *buf == x {
                    return unexpected(&format!("stores {buf} at another index than it loads {x}"));
                }
                stored = Some((post, *buf));
            }
            _ => return unexpected("computes more than a bias and a clamp"),
        }
    }
    let (post, y) = stored.ok_or("it stores nothing")?;
    if let Some(v) = bias_var {
        let stride = x_index.iter().flat_map(|ix| &ix.terms).find(|(w, _)| *w == v).map(|(_, s)| s.clone());
        if stride != Some(plane) || extent(v) != Some(channels) {
            return Err(format!("its per-channel values are not indexed by {x}'s channel"));
        }
    }
    Ok((post, y))
}

/// Whether `index` visits each of `numel` elements exactly once as its loops run: offset 0,
/// and strides that (symbolic ones too) chain up from 1, each the one before times that
/// loop's extent, the last times its extent being `numel`; a loop appears once (loops of one
/// iteration aside).
fn enumerates(index: &crate::kernel::Index, extent: &dyn Fn(Var) -> Option<Dim>, numel: &Dim) -> Result<(), String> {
    if index.offset.as_const() != Some(0) {
        return Err("at an offset".into());
    }
    let mut left: Vec<(Dim, Dim, Var)> = Vec::with_capacity(index.terms.len());
    for (v, s) in &index.terms {
        if left.iter().any(|t| t.2 == *v) {
            return Err("a loop appears twice".into());
        }
        let e = extent(*v).ok_or("over an unknown loop")?;
        // A loop of one iteration adds nothing, whatever its stride.
        if e.as_const() != Some(1) {
            left.push((s.clone(), e, *v));
        }
    }
    let mut expected = Dim::from(1u64);
    while !left.is_empty() {
        let Some(j) = left.iter().position(|t| t.0 == expected) else {
            return Err(format!("no loop has stride {expected}"));
        };
        let (_, e, _) = left.swap_remove(j);
        expected = expected.mul(&e).map_err(|e| e.to_string())?;
    }
    if &expected != numel {
        return Err(format!("it covers {expected} elements"));
    }
    Ok(())
}

/// The rows and static row length (> 0) of buffer `b` viewed as `[rows, n]`.
fn rows_of(p: &Program, b: BufferId) -> Result<(Dim, u64), String> {
    let Some((last, lead)) = p.buffers[b].shape.dims().split_last() else { return Err(format!("{b} is a scalar")) };
    let n = last.as_const().filter(|&n| n > 0).ok_or_else(|| format!("{b}'s last dim is not a static size > 0"))?;
    let mut rows = Dim::from(1u64);
    for d in lead {
        rows = rows.mul(d).map_err(|e| format!("{b}'s row count: {e}"))?;
    }
    Ok((rows, n))
}

/// Whether the elementwise library op `l` (the step after matmul `m`) can run per row tile:
/// its argument is `m`'s output, or a buffer `m`'s epilogue kernel stores at `n·o0 + (a span
/// below n)`, `n` its static last dim, with the product's rows as its leading dims.
fn activation_eligible(
    p: &Program,
    m: &crate::kernel::MatmulCall,
    l: &crate::kernel::LibraryCall,
) -> Result<(), String> {
    let [x] = l.args[..] else { return Err("it does not take one argument".into()) };
    if x == m.out {
        return if m.epilogue.is_none() { Ok(()) } else { Err(format!("it reads {x} before the epilogue kernel")) };
    }
    let Some(k) = &m.epilogue else { return Err(format!("its argument {x} is not the product")) };
    let ((rows, _), (x_rows, n)) = (rows_of(p, m.out)?, rows_of(p, x)?);
    if rows != x_rows {
        return Err(format!("{x} does not have the product's rows"));
    }
    let mut stored = false;
    for stage in &k.stages {
        for instr in &stage.body {
            if let Instr::Store { buf, index, .. } = instr {
                if *buf != x {
                    continue;
                }
                row_local(index, n, k, stage).map_err(|e| format!("the epilogue kernel stores {x} {e}"))?;
                stored = true;
            }
        }
    }
    if stored {
        Ok(())
    } else {
        Err(format!("the epilogue kernel does not store {x}"))
    }
}

/// Whether `index` is `n·o0 + Σ strideᵢ·varᵢ` with static strides and extents spanning less
/// than `n`: iteration `o0` of the outermost loop touches only row `o0`.
fn row_local(index: &crate::kernel::Index, n: u64, k: &Kernel, stage: &crate::kernel::Stage) -> Result<(), String> {
    if index.offset.as_const() != Some(0) {
        return Err("at an offset".into());
    }
    let (mut row_term, mut span) = (false, 0u64);
    for (var, stride) in &index.terms {
        let stride = stride.as_const().ok_or("with a symbolic stride")?;
        if *var == Var::Outer(0) {
            if stride != n || row_term {
                return Err("not one row per outer iteration".into());
            }
            row_term = true;
            continue;
        }
        let extent = match var {
            Var::Outer(j) => k.outer.get(*j as usize),
            Var::Inner(j) => stage.inner.get(*j as usize),
        };
        let extent = extent.and_then(Dim::as_const).ok_or("over a symbolic extent")?;
        span = span.saturating_add(stride.saturating_mul(extent.saturating_sub(1)));
    }
    if row_term && span < n {
        Ok(())
    } else {
        Err("outside its row".into())
    }
}

/// Whether the elementwise library op `l` (step `i + 1`) can run on the rows kernel `k` (step
/// `i`) stores: its one argument is an f32 temporary of `l`'s result shape that `k` stores
/// block by block over its outermost loop (`B·o0 + a span below B`, `B` a row or, for a
/// static shape, the buffer's size over the loop's count) and never loads, and that no other
/// step and no output reads. Then a backend may run `l` per range of rows, or have `k` store
/// straight into `l`'s result and apply `l` there in place.
fn kernel_activation_eligible(
    p: &Program,
    uses: &Uses,
    i: usize,
    k: &Kernel,
    l: &crate::kernel::LibraryCall,
) -> Result<(), String> {
    let [x] = l.args[..] else { return Err("it does not take one argument".into()) };
    let (bx, bo) = (&p.buffers[x], &p.buffers[l.out]);
    if bx.kind != BufferKind::Temp || p.outputs.iter().any(|(_, b)| *b == x) {
        return Err(format!("its argument {x} is not a temporary only it reads"));
    }
    if bx.dtype != DType::F32 || bo.dtype != DType::F32 || bx.shape != bo.shape {
        return Err(format!("{x} and {} are not f32 buffers of one shape", l.out));
    }
    // The activation is elementwise: it runs on the block each outermost iteration stores,
    // a row of `x` or (a static shape) `len / outer[0]` elements, several rows at once.
    let (rows, n) = rows_of(p, x)?;
    let block = if k.outer.first() == Some(&rows) {
        n
    } else {
        let len = p.buffers[x].shape.numel().ok().and_then(|d| d.as_const());
        let outer = k.outer.first().and_then(Dim::as_const);
        match (len, outer) {
            (Some(len), Some(o)) if o > 0 && len % o == 0 => len / o,
            _ => {
                return Err(format!(
                    "the kernel's outermost loop does not run over {x}'s {rows} rows or static blocks of them"
                ))
            }
        }
    };
    let mut stored = false;
    for stage in &k.stages {
        for instr in &stage.body {
            match instr {
                Instr::Store { buf, index, .. } if *buf == x => {
                    row_local(index, block, k, stage).map_err(|e| format!("the kernel stores {x} {e}"))?;
                    stored = true;
                }
                Instr::Load { buf, .. } | Instr::LoadAt { buf, .. } if *buf == x => {
                    return Err(format!("the kernel reads {x}"));
                }
                _ => {}
            }
        }
    }
    if !stored {
        return Err(format!("the kernel does not store {x}"));
    }
    private_to(p, uses, i, x)
}

/// Whether `b` is a temporary (not an output) that no step but `i` and `i + 1` touches: what a
/// fusion of those two steps may stop writing.
fn private_to(p: &Program, uses: &Uses, i: usize, b: BufferId) -> Result<(), String> {
    if p.buffers[b].kind != BufferKind::Temp || p.outputs.iter().any(|(_, o)| *o == b) {
        return Err(format!("{b} is not a temporary only these steps use"));
    }
    let here = [i, i + 1].iter().filter(|&&j| p.steps.get(j).is_some_and(|s| step_uses(s, b))).count();
    if uses.get(b) as usize > here {
        return Err(format!("another step uses {b} too"));
    }
    Ok(())
}

/// Whether step `s` reads or writes buffer `b`.
fn step_uses(s: &Step, b: BufferId) -> bool {
    let mut used = false;
    s.for_each_buffer(|x| used |= x == b);
    used
}

/// Whether kernel `k` (the step after a matmul writing `out`) can run per row tile. Later
/// steps may read `out` too: the product is whole when the matmul step ends.
fn eligible(p: &Program, out: BufferId, k: &Kernel) -> Result<(), String> {
    let (rows, n) = rows_of(p, out)?;
    if k.outer.first() != Some(&rows) {
        return Err(format!("its outermost loop does not run over {out}'s {rows} rows"));
    }
    for stage in &k.stages {
        for instr in &stage.body {
            match instr {
                Instr::Store { buf, .. } if *buf == out => return Err(format!("it writes {out}")),
                Instr::LoadAt { buf, .. } if *buf == out => {
                    return Err(format!("it reads {out} at computed offsets"));
                }
                Instr::Load { buf, index, .. } if *buf == out => {
                    row_local(index, n, k, stage).map_err(|e| format!("it loads {out} {e}"))?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}
