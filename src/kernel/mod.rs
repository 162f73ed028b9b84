//! Kernel IR: the loop-level, backend-neutral program a scheduled graph becomes.
//!
//! A [`Program`] is a list of [`Step`]s over typed [`Buffer`]s. A step is a generated
//! [`Kernel`], a call into a library kernel (`matmul`, `conv`, recovered ops, the
//! data-movement prims), or a *graph break*: a small graph the reference interpreter runs
//! because no backend implements one of its ops. Nothing here is specific to a backend: the
//! CPU backend compiles each kernel to a native loop nest with Cranelift, and the Vulkan
//! backend lowers the same kernels to compute shaders.
//!
//! ## Kernels
//!
//! A kernel is a nest of *outer* loops (independent: a backend may run them in any order or
//! in parallel) around a sequence of *stages*. For every point of the outer loops, the stages
//! run in order; each stage is its own nest of *inner* loops around a straight-line body of
//! scalar instructions. A stage may declare accumulators (sum, prod, max, min, argmax, and
//! the fused sum of exponentials `sumexp`); they are reset before the stage's inner loops, fed
//! by `Accumulate` instructions, and their final values are registers that later stages read.
//! So a softmax row is one kernel with an outer loop over rows and two stages: the max over the
//! row together with the sum of `exp(x - max)` (a `max` and a `sumexp` accumulator fed the
//! same value), then the pointwise `exp(x - max) / sum` written out.
//!
//! A `sumexp` accumulator means exactly what a `max` stage followed by a stage summing
//! `exp(x - max)` over the same values means: `Σ exp(x - c)` with `c` the maximum of the
//! values fed (`sumexp_finite`: `c` is 0 where that maximum is ±inf, logsumexp's shift), each
//! term rounded like the `sub` and `exp` prims and summed like a `sum`. It needs the maximum
//! before the first term, so a backend computes it online: a running maximum `m` and a
//! running sum `s` of `exp(y - m)`, rescaled by `exp(m_old - m_new)` whenever the maximum
//! grows (every term stays at most 1, so nothing overflows); partial states merge the same way.
//! That reassociates the sum and rounds each term through the rescaling factors instead of
//! once, an error of the same order as the sum's own (the softmax rows of the tolerance
//! table bound it); special values keep the two-stage meaning: a NaN fed gives NaN; a
//! maximum of `+inf` gives NaN (`sumexp_finite`: `+inf`); a maximum of `-inf` gives NaN for a
//! non-empty range (`sumexp_finite`: 0); an empty range gives `+0`.
//!
//! Registers are SSA scalars numbered per kernel. A register defined by a stage with no
//! inner loops, and every accumulator result, is visible to all later stages (it is one value
//! per outer point); a register defined inside a stage with inner loops is local to it.
//!
//! ## Sizes and indices
//!
//! Loop extents, buffer shapes and index strides are [`Dim`]s: constants or polynomials over
//! the graph's size symbols. They are evaluated when the program runs, from the symbol values
//! bound by the inputs, and passed to compiled kernels as arguments — so a new batch size or
//! sequence length never recompiles. An [`Index`] is affine in the loop variables: an element
//! offset plus, per loop variable, a stride (broadcasting is a zero stride, so a stride-0
//! term is simply absent; permutes and slices fold into strides and the offset).
//!
//! ## Meaning
//!
//! Every scalar instruction means exactly what the prim of the same name means
//! (`crate::ops::elementwise::{unary_float, binary_float, binary_int}`), computed in the
//! instruction's dtype. Accumulation happens in the accumulator's dtype in row-major order of
//! the stage's inner loops; a backend may reassociate sums and products (the tolerance table
//! covers reductions) and compute `sumexp` online (above), but not change any other result. [`eval`] is the reference executor:
//! the exact rules (sum and product fold from the first element, so the sum of `[-0.0]` is
//! `-0.0`; an empty sum is `+0`; an empty argmax is an error) are stated and implemented there.

use std::fmt;

use cranelift_entity::{entity_impl, PrimaryMap};

use crate::ir::{DType, Dim, Graph, Shape, Symbol, Value};
use crate::ops::OpKind;

mod calls;
mod elems;
pub mod eval;
pub mod memory;
pub mod print;

/// A buffer of the program. Prints as `b3`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(u32);
entity_impl!(BufferId, "b");

/// A scalar register of a kernel. Prints as `r7`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(u32);
entity_impl!(Reg, "r");

/// Where a buffer's memory comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// Graph input number `n` (the caller's data; never written).
    Input(usize),
    /// A constant: the graph blob of this name.
    Const(String),
    /// Scratch memory owned by the plan; the memory planner assigns it an arena offset.
    Temp,
}

/// A dense row-major array.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub dtype: DType,
    pub shape: Shape,
    pub kind: BufferKind,
    /// The prims-graph value this buffer holds, for printing and debugging.
    pub value: Option<Value>,
}

/// A loop variable: outer loop `k` of the kernel, or inner loop `k` of the current stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Var {
    Outer(u32),
    Inner(u32),
}

/// An affine element offset: `offset + Σ stride × var`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Index {
    pub offset: Dim,
    pub terms: Vec<(Var, Dim)>,
}

/// A constant scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Float(f64),
    Int(i64),
    Bool(bool),
}

/// The reduction an accumulator performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    /// First index of the maximum (NaN counts as the maximum); its result is i64. The argmax
    /// of an empty range is a run-time error.
    Argmax,
    /// `Σ exp(x - c)` over the values `x` fed, where `c` is their maximum (NaN-propagating,
    /// `-inf` when empty): what a `max` stage followed by a `sum` stage of `exp(x - max)`
    /// computes (softmax, log_softmax), in one pass. Float dtypes only.
    SumExp,
    /// [`ReduceOp::SumExp`] with `c` the maximum where it is finite and `0` where it is
    /// `±inf` (logsumexp's shift).
    SumExpFinite,
}

impl ReduceOp {
    /// The name the kernel text form (and its drawings) use.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Argmax => "argmax",
            ReduceOp::SumExp => "sumexp",
            ReduceOp::SumExpFinite => "sumexp_finite",
        }
    }

    /// Whether this is one of the fused `Σ exp(x - max)` accumulators.
    pub fn is_sum_exp(self) -> bool {
        matches!(self, ReduceOp::SumExp | ReduceOp::SumExpFinite)
    }
}

/// An accumulator of a stage.
#[derive(Clone, Debug, PartialEq)]
pub struct Accumulator {
    pub op: ReduceOp,
    /// The accumulation dtype (of the values fed in).
    pub dtype: DType,
    /// The register holding the final value, visible to later stages.
    pub result: Reg,
}

impl Accumulator {
    /// Whether it may be fed a value of `dt`: its own dtype, or for an f16 or bf16 sum also
    /// f32 (exact products of the half type's values), each partial sum rounded once to its
    /// dtype: how the Vulkan device writes matmul and convolution in those dtypes.
    pub fn takes(&self, dt: DType) -> bool {
        let half = matches!(self.dtype, DType::F16 | DType::BF16);
        dt == self.dtype || (self.op == ReduceOp::Sum && half && dt == DType::F32)
    }
}

/// One scalar instruction. Every instruction that produces a value writes `dst`, in the
/// given dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Instr {
    Load {
        dst: Reg,
        buf: BufferId,
        index: Index,
    },
    /// A load at a computed element offset (`index` is an i64 register): for gathers, `rev`,
    /// and `pad`'s in-bounds reads. An offset outside the buffer is a run-time error (never a
    /// read of other memory); executors must check it.
    LoadAt {
        dst: Reg,
        buf: BufferId,
        index: Reg,
    },
    Const {
        dst: Reg,
        value: Scalar,
        dtype: DType,
    },
    /// The current value of a loop variable.
    LoopVar {
        dst: Reg,
        var: Var,
        dtype: DType,
    },
    /// A unary elementwise prim (`neg`, `exp`, `isnan`, …).
    Unary {
        dst: Reg,
        op: OpKind,
        x: Reg,
        dtype: DType,
    },
    /// A binary elementwise prim (`add`, `max`, `lt`, …); operands have one dtype, the result
    /// is `dtype` (bool for comparisons).
    Binary {
        dst: Reg,
        op: OpKind,
        a: Reg,
        b: Reg,
        dtype: DType,
    },
    Select {
        dst: Reg,
        cond: Reg,
        a: Reg,
        b: Reg,
        dtype: DType,
    },
    Convert {
        dst: Reg,
        x: Reg,
        dtype: DType,
    },
    /// Feeds `x` (and, for argmax, its position `index`, an i64 register) to accumulator
    /// `acc` of the current stage, of a dtype it takes ([`Accumulator::takes`]).
    Accumulate {
        acc: u32,
        x: Reg,
        index: Option<Reg>,
    },
    Store {
        buf: BufferId,
        index: Index,
        value: Reg,
    },
}

/// One stage of a kernel: inner loops around a body.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Stage {
    pub inner: Vec<Dim>,
    pub accumulators: Vec<Accumulator>,
    pub body: Vec<Instr>,
}

/// A generated kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub outer: Vec<Dim>,
    pub stages: Vec<Stage>,
    /// The number of registers (all `Reg`s are below this).
    pub n_regs: u32,
    /// The prims-graph nodes this kernel computes.
    pub covers: Vec<Value>,
    /// An elementwise library op (a recovered `gelu`) run on a buffer this kernel stores row
    /// by row (iteration `r` of the outermost loop stores only row `r` of it, viewed as
    /// `[rows, n]`), which nothing else reads: `crate::sched::epilogue` checks it. A backend
    /// may run it after the kernel, or per range of rows right after the kernel writes them;
    /// a native one may even have the kernel write those rows straight into the op's result
    /// and apply the op there in place, so the stored buffer is never touched. Always `None`
    /// on a matmul's epilogue kernel (the matmul carries its own).
    pub activation: Option<LibraryCall>,
}

/// `out = a @ b` (with optional transposes of the last two dims), through a library GEMM.
#[derive(Clone, Debug, PartialEq)]
pub struct MatmulCall {
    pub a: BufferId,
    pub b: BufferId,
    pub out: BufferId,
    pub transpose_a: bool,
    pub transpose_b: bool,
    /// A kernel that runs after the product and reads `out` row by row: its outermost loop
    /// runs over the rows of `out` viewed as `[rows, n]`, and iteration `r` reads only row
    /// `r` of `out` (see `crate::sched::epilogue`). A backend may run it per finished row
    /// tile of the product; running it after the whole product means the same.
    pub epilogue: Option<Box<Kernel>>,
    /// An elementwise library op (a recovered `gelu`) after the epilogue: its argument is
    /// `out` (without an epilogue kernel) or a buffer the epilogue kernel stores row by row,
    /// so row `r` of its result needs only row `r` of the product, and a backend may run it on
    /// each finished row tile too. Running it after the whole step means the same.
    pub activation: Option<LibraryCall>,
}

/// A convolution through a library kernel, with the `conv` op's attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvCall {
    pub x: BufferId,
    pub w: BufferId,
    pub out: BufferId,
    pub stride: Vec<i64>,
    pub padding: Vec<i64>,
    pub dilation: Vec<i64>,
    pub groups: i64,
    /// A `max_pool2d` the convolution's result goes through before `post` (then `out` has
    /// the pooled shape): `crate::sched::epilogue` folds a pooling of a convolution's
    /// result into the convolution, which a native backend runs on each band of finished
    /// rows while they are in cache.
    pub pool: Option<ConvPool>,
    /// What runs on each element of the convolution (of its pooling, with `pool`) before it
    /// is stored in `out`.
    pub post: Option<ChannelPost>,
}

/// The pooling of a [`ConvCall`]: `max_pool2d` with `attrs` over the convolution's result.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvPool {
    /// The `max_pool2d` op's attributes.
    pub attrs: crate::ir::Attrs,
    /// The buffer that held the convolution's result before the pooling was folded in: it
    /// gives that result's shape (an executor that pools a whole result holds it elsewhere).
    /// No step reads or writes it, so it takes no memory.
    pub unpooled: BufferId,
}

/// Elementwise work a library step (a convolution, a pooling) does on its f32 result
/// `[N, C, ...]` before leaving it, in this order, each step rounded to f32 as the prims it
/// stands for: `v + addend` (the `add` prim), `max(v, +0)` when `relu` (the `max` prim: NaN
/// stays NaN, -0 becomes +0), then the elementwise `activation` op. `crate::sched::epilogue`
/// folds a bias-and-ReLU kernel after the step (and that kernel's activation) into it;
/// executors apply it as written (`eval::channel_post`), a native one while the result is
/// still in cache.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelPost {
    pub addend: Option<Addend>,
    pub relu: bool,
    /// An elementwise activation op (`crate::ops::library::is_activation`) and its attributes.
    pub activation: Option<(OpKind, crate::ir::Attrs)>,
}

/// What [`ChannelPost`] adds to an element of output channel `c`.
#[derive(Clone, Debug, PartialEq)]
pub enum Addend {
    /// `bias[c]`: a buffer of one value per output channel (any shape with that many
    /// elements, `[C]` or `[C, 1, 1]`).
    Channel(BufferId),
    /// One value for every element (exactly an f32).
    Scalar(f64),
}

/// An op through a hand-written library kernel: `out = op(args...)` with the op's attributes,
/// for a recovered high-level op (`crate::ops::library::recoverable`) or a data-movement prim
/// (`pad`, `cat`, `rev`, `gather`, `scatter_add`). The arguments are buffers of the op's
/// operands in order, `out` a buffer of its result, disjoint from them. Its meaning is the
/// op's own (the interpreter's), which the reference executor runs; a backend runs its kernel
/// for it.
#[derive(Clone, Debug, PartialEq)]
pub struct LibraryCall {
    pub op: OpKind,
    pub attrs: crate::ir::Attrs,
    pub args: Vec<BufferId>,
    pub out: BufferId,
    /// What runs on each element of the result before the step ends (never on an
    /// activation run inside a matmul or kernel step).
    pub post: Option<ChannelPost>,
}

impl LibraryCall {
    /// Calls `f` with every buffer the call reads or writes (repeats included).
    pub fn for_each_buffer(&self, f: &mut dyn FnMut(BufferId)) {
        self.args.iter().chain(std::iter::once(&self.out)).for_each(|&b| f(b));
        if let Some(Addend::Channel(b)) = self.post.as_ref().and_then(|p| p.addend.as_ref()) {
            f(*b);
        }
    }
}

/// A graph break: `graph` runs in the reference interpreter, reading `args` (its inputs, in
/// order) and writing `results` (its outputs, in order).
#[derive(Clone, Debug, PartialEq)]
pub struct InterpCall {
    pub graph: Graph,
    pub args: Vec<BufferId>,
    pub results: Vec<BufferId>,
    /// Why these nodes are not compiled.
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Kernel(Kernel),
    Matmul(MatmulCall),
    Conv(ConvCall),
    Library(LibraryCall),
    Interp(InterpCall),
}

/// A scheduled program.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub buffers: PrimaryMap<BufferId, Buffer>,
    pub steps: Vec<Step>,
    /// Graph outputs: name and the buffer holding each.
    pub outputs: Vec<(String, BufferId)>,
    /// The size symbols, in the order their values are passed at run time.
    pub symbols: Vec<Symbol>,
}

impl Program {
    /// Every kernel of the program, in step order: kernel steps and matmul epilogues.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.steps.iter().filter_map(|s| match s {
            Step::Kernel(k) => Some(k),
            Step::Matmul(m) => m.epilogue.as_deref(),
            _ => None,
        })
    }
}

impl Kernel {
    /// Calls `f` with every buffer the kernel loads or stores, and its activation's argument
    /// and result (repeats included).
    pub fn for_each_buffer(&self, f: &mut impl FnMut(BufferId)) {
        for instr in self.stages.iter().flat_map(|s| &s.body) {
            if let Instr::Load { buf, .. } | Instr::LoadAt { buf, .. } | Instr::Store { buf, .. } = instr {
                f(*buf);
            }
        }
        if let Some(l) = &self.activation {
            l.for_each_buffer(f);
        }
    }
}

impl Step {
    /// Calls `f` with every buffer the step reads or writes, its epilogue kernel's and its
    /// activation's included (repeats included).
    pub fn for_each_buffer(&self, mut f: impl FnMut(BufferId)) {
        let call = |l: &LibraryCall, f: &mut dyn FnMut(BufferId)| l.for_each_buffer(f);
        match self {
            Step::Kernel(k) => k.for_each_buffer(&mut f),
            Step::Matmul(m) => {
                [m.a, m.b, m.out].into_iter().for_each(&mut f);
                if let Some(k) = &m.epilogue {
                    k.for_each_buffer(&mut f);
                }
                if let Some(l) = &m.activation {
                    call(l, &mut f);
                }
            }
            Step::Conv(c) => {
                [c.x, c.w, c.out].into_iter().for_each(&mut f);
                if let Some(Addend::Channel(b)) = c.post.as_ref().and_then(|p| p.addend.as_ref()) {
                    f(*b);
                }
            }
            Step::Library(l) => call(l, &mut f),
            Step::Interp(c) => c.args.iter().chain(&c.results).for_each(|&b| f(b)),
        }
    }
}

impl Instr {
    /// The register this instruction defines, if any.
    pub fn dst(&self) -> Option<Reg> {
        match self {
            Instr::Load { dst, .. }
            | Instr::LoadAt { dst, .. }
            | Instr::Const { dst, .. }
            | Instr::LoopVar { dst, .. }
            | Instr::Unary { dst, .. }
            | Instr::Binary { dst, .. }
            | Instr::Select { dst, .. }
            | Instr::Convert { dst, .. } => Some(*dst),
            Instr::Accumulate { .. } | Instr::Store { .. } => None,
        }
    }
}

/// A compiled kernel's entry point, the calling convention every backend that compiles
/// kernels to host code follows:
///
/// - `bufs[i]` is the base address of the program's buffer `i` (`BufferId::index`), or null
///   for buffers the kernel does not touch;
/// - `dims[j]` is the value of the kernel's `dim_table()[j]` for this run;
/// - the kernel runs the outermost outer loop for `begin..end` only (all other loops in
///   full), so a runtime can split it across threads. A kernel with no outer loops runs
///   once, for `begin = 0, end = 1`.
pub type KernelFn = unsafe extern "C" fn(bufs: *const *mut u8, dims: *const i64, begin: i64, end: i64);

impl Kernel {
    /// Every distinct non-constant size expression the kernel uses (outer and inner extents,
    /// index offsets and strides), in first-use order. Compiled code reads their run-time
    /// values from `dims` by position; constants are baked into the code.
    pub fn dim_table(&self) -> Vec<Dim> {
        let mut table: Vec<Dim> = Vec::new();
        let mut note = |d: &Dim| {
            if !d.is_static() && !table.contains(d) {
                table.push(d.clone());
            }
        };
        self.outer.iter().for_each(&mut note);
        for stage in &self.stages {
            stage.inner.iter().for_each(&mut note);
            for instr in &stage.body {
                if let Instr::Load { index, .. } | Instr::Store { index, .. } = instr {
                    note(&index.offset);
                    index.terms.iter().for_each(|(_, stride)| note(stride));
                }
            }
        }
        table
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Var::Outer(k) => write!(f, "o{k}"),
            Var::Inner(k) => write!(f, "i{k}"),
        }
    }
}

impl fmt::Display for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        if self.offset != Dim::new(0) || self.terms.is_empty() {
            write!(f, "{}", self.offset)?;
            first = false;
        }
        for (var, stride) in &self.terms {
            if !first {
                f.write_str(" + ")?;
            }
            first = false;
            if *stride == Dim::new(1) {
                write!(f, "{var}")?;
            } else if stride.is_static() || stride.as_symbol().is_some() {
                write!(f, "{stride}*{var}")?;
            } else {
                write!(f, "({stride})*{var}")?;
            }
        }
        Ok(())
    }
}
