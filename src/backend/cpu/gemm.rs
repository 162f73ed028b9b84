//! The CPU backend's matrix multiply: the library kernel behind `kernel::Step::Matmul`, and
//! the GEMM under [`super::conv`].
//!
//! [`matmul`] computes the `matmul` op (`crate::ops::linalg`) over dense row-major buffers:
//! operands of rank >= 2, optional transposes of the last two dims, NumPy batch
//! broadcasting, output `[batch..., m, n]`. f32 and f64 go through the `gemm` crate (built
//! with its `x86-v4` feature: AVX-512 kernels, about twice its AVX2 speed on this machine);
//! i32 and i64 through a plain wrapping loop. An f32 product whose right operand was packed
//! ahead of time ([`super::packed::PackedB`]: a plan packs its constant weights once) goes
//! through ladder's own AVX-512 kernel instead, tiled for the caches and the threads alone
//! (`packed_tile_shape`), since nothing is re-packed per tile. Products with at most [`SMALL_WORK`]
//! multiply-adds use a plain loop in the interpreter's order and rounding (bitwise equal to
//! it), which also keeps tiny products free of the crate's per-call setup and allocation.
//!
//! An [`Epilogue`] is applied per output tile right after the GEMM writes the tile, while it
//! is still in cache, not as passes over the whole output: per column `bias` (as `linear`;
//! per output channel for conv), then the `activation`, then a same-shape `residual` added,
//! then an optional `hook` given the finished tile (a runtime can run a compiled pointwise
//! kernel there). Each step rounds like the op it stands for (a bias add is one f32 add,
//! equal to `linear`'s f64 add rounded once).
//!
//! Tiling: without an epilogue each matrix of the batch is one GEMM call. With one, a large
//! output is cut into tiles of about [`TILE_ELEMS`] elements so a tile stays in L2 between
//! the GEMM and the epilogue, but only into as many tiles as pay for the operand re-packing
//! the `gemm` crate does per call (see `tile_shape`); a small output is one tile.
//! `threads <= 1` runs on the calling thread only. With more, independent tiles
//! (or batch matrices) run in parallel, each GEMM single-threaded, when there are enough of
//! them to share evenly; otherwise tiles run in order and each GEMM uses
//! `gemm::Parallelism::Rayon(threads)`. Parallel work runs on the current rayon pool (call
//! inside `ThreadPool::install` to pick one).
//!
//! Numerics: the crate blocks `k` and uses FMA, so results differ from the interpreter's
//! sequential accumulation by reassociation only (`tests/all/cpu_gemm.rs` bounds it by
//! `k`-scaled relative error); NaN and ±inf propagate as in IEEE arithmetic (`0 * inf` is
//! NaN), `k = 0` gives zeros (then the epilogue).
//!
//! Allocation: the `gemm` crate allocates its packing buffers on every call; everything in
//! this file allocates nothing for operands of rank <= 8.

use std::marker::PhantomData;

use gemm::Parallelism;
use rayon::prelude::*;
use smallvec::SmallVec;

use super::activation::{apply_f32, apply_f64, Activation};
use super::packed::{PackedB, NR};

/// Products with at most this many multiply-adds (`m * n * k` per matrix) use the plain loop.
pub const SMALL_WORK: usize = 256;

/// Calls with fewer multiply-adds than this (all problems together, about 5 µs on one core)
/// stay on the calling thread: a fork-join costs microseconds, and the `gemm` crate's own
/// parallel driver more (an LSTM's `[128, 16] x [16, 96]` input projection took 13 µs on two
/// threads and 2 µs on one).
pub const PAR_GEMM_WORK: usize = 1 << 20;

/// Target size of an epilogue tile, in elements (1 MiB of f32, this machine's L2).
pub const TILE_ELEMS: usize = 256 * 1024;

/// Why a library kernel refused its arguments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("{0}")]
    Shape(String),
    #[error("buffer `{name}` has {got} elements, expected {want}")]
    Len { name: &'static str, got: usize, want: usize },
    #[error("{0}")]
    Unsupported(String),
}

impl KernelError {
    /// `Ok` when buffer `name` has the `want` elements its shape says, else [`KernelError::Len`].
    pub(crate) fn check_len(name: &'static str, got: usize, want: usize) -> Result<(), KernelError> {
        if got == want {
            Ok(())
        } else {
            Err(KernelError::Len { name, got, want })
        }
    }
}

type Dims = SmallVec<[usize; 8]>;

/// An element type the library kernels handle.
pub trait Element: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    const NAME: &'static str;
    fn zero() -> Self;
    /// `self + other` (wrapping for integers).
    fn add(self, other: Self) -> Self;
    /// One step of the interpreter's matmul accumulation: `acc + a * b` rounded as it does.
    fn dot_step(acc: Self, a: Self, b: Self) -> Self;
    /// `acc + a * b` in this type (two roundings for floats, wrapping for integers).
    fn madd(acc: Self, a: Self, b: Self) -> Self;
    /// False for infinities and NaN (always true for integers).
    fn is_finite(self) -> bool;
    /// Applies `act` in place.
    fn activate(act: &Activation, xs: &mut [Self]) -> Result<(), KernelError>;
    /// `c[i, j] = Σ_p a[i, p] b[p, j]` over strided operands, `c` row-major with row stride
    /// `ldc`; `m, n, k > 0`.
    ///
    /// # Safety
    /// Every element addressed through the pointers and strides must be in bounds; `c` must
    /// not overlap `a` or `b`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(g: &Gemm2d, a: *const Self, b: *const Self, c: *mut Self, par: Parallelism);
    /// Whether [`Element::gemm_packed`] runs (f32 only).
    const PACKED: bool = false;
    /// `C = A B[:, col0..col0 + g.n]` through the packed right operand `b` (see
    /// [`PackedB::tile`]); `g`'s `b` strides are unused.
    ///
    /// # Safety
    /// As [`PackedB::tile`]; only called when [`Element::PACKED`].
    unsafe fn gemm_packed(g: &Gemm2d, a: *const Self, b: &PackedB, col0: usize, c: *mut Self) {
        let _ = (g, a, b, col0, c);
        unreachable!("{} has no packed GEMM", Self::NAME)
    }
    /// [`Element::gemm`] through ladder's own kernel where the `gemm` crate has only scalar
    /// code (f32 on the x86-64 baseline level, `super::packed::baseline_gemm`); `false`,
    /// having done nothing, elsewhere.
    ///
    /// # Safety
    /// As [`Element::gemm`].
    unsafe fn baseline_gemm(g: &Gemm2d, a: *const Self, b: *const Self, c: *mut Self, par: Parallelism) -> bool {
        let _ = (g, a, b, c, par);
        false
    }
    /// The channel-blocked direct convolution (`super::conv_blocked`, f32 only) where it
    /// applies, with `scratch` for the packed weights (allocated here when shorter than
    /// `conv_blocked::packed_len`); `false`, having done nothing, where it does not. The
    /// caller checked the lengths against `geom`.
    #[allow(clippy::too_many_arguments)]
    fn conv_blocked(
        geom: &super::conv::ConvGeom,
        x: &[Self],
        w: &[Self],
        out: &mut [Self],
        scratch: Option<&mut [Self]>,
        threads: usize,
        epi: &Epilogue<'_, Self>,
    ) -> bool {
        let _ = (geom, x, w, out, scratch, threads, epi);
        false
    }
}

/// The shape and strides of one 2-D product `C[m, n] = A[m, k] B[k, n]` (element strides;
/// `C` has unit column stride and row stride `ldc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gemm2d {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a_rs: usize,
    pub a_cs: usize,
    pub b_rs: usize,
    pub b_cs: usize,
    pub ldc: usize,
}

macro_rules! float_element {
    ($t:ty, $name:literal, $wide:ty, $apply:ident $(, packed: $packed:ident)?) => {
        impl Element for $t {
            const NAME: &'static str = $name;
            $(
                const PACKED: bool = true;
                unsafe fn gemm_packed(g: &Gemm2d, a: *const Self, b: &PackedB, col0: usize, c: *mut Self) {
                    $packed(g, a, b, col0, c)
                }
                unsafe fn baseline_gemm(g: &Gemm2d, a: *const Self, b: *const Self, c: *mut Self, par: Parallelism) -> bool {
                    // f32 on the x86-64 baseline level: ladder's own kernel (`packed.rs`).
                    let threads = match par {
                        Parallelism::None => 1,
                        Parallelism::Rayon(0) => rayon::current_num_threads(),
                        Parallelism::Rayon(n) => n,
                    };
                    super::packed::baseline_gemm(g, a, b, c, 1.0, false, threads)
                }
                fn conv_blocked(
                    geom: &super::conv::ConvGeom,
                    x: &[Self],
                    w: &[Self],
                    out: &mut [Self],
                    scratch: Option<&mut [Self]>,
                    threads: usize,
                    epi: &Epilogue<'_, Self>,
                ) -> bool {
                    use super::conv_blocked as cb;
                    if epi.hook.is_some() || !cb::applies(geom, w) {
                        return false;
                    }
                    let need = cb::packed_len(geom);
                    let mut owned = Vec::new();
                    let wp = match scratch {
                        Some(s) if s.len() >= need => &mut s[..need],
                        _ => {
                            owned.resize(need, 0.0);
                            &mut owned[..]
                        }
                    };
                    cb::pack(geom, w, wp);
                    cb::conv_blocked(geom, x, wp, out, threads, epi);
                    true
                }
            )?
            fn zero() -> Self {
                0.0
            }
            #[inline(always)]
            fn add(self, other: Self) -> Self {
                self + other
            }
            #[inline(always)]
            fn dot_step(acc: Self, a: Self, b: Self) -> Self {
                // f32: the product is exact in f64 and the sum rounds once, as the
                // interpreter computes it; f64: two roundings, as it computes it too.
                (acc as $wide + a as $wide * b as $wide) as $t
            }
            #[inline(always)]
            fn madd(acc: Self, a: Self, b: Self) -> Self {
                acc + a * b
            }
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            fn activate(act: &Activation, xs: &mut [Self]) -> Result<(), KernelError> {
                $apply(act, xs);
                Ok(())
            }
            unsafe fn gemm(g: &Gemm2d, a: *const Self, b: *const Self, c: *mut Self, par: Parallelism) {
                if Self::PACKED && Self::baseline_gemm(g, a, b, c, par) {
                    return;
                }
                gemm::gemm(
                    g.m,
                    g.n,
                    g.k,
                    c,
                    1,
                    g.ldc as isize,
                    false,
                    a,
                    g.a_cs as isize,
                    g.a_rs as isize,
                    b,
                    g.b_cs as isize,
                    g.b_rs as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    par,
                )
            }
        }
    };
}

float_element!(f32, "f32", f64, apply_f32, packed: packed_f32);

/// # Safety
/// As [`PackedB::tile`].
unsafe fn packed_f32(g: &Gemm2d, a: *const f32, b: &PackedB, col0: usize, c: *mut f32) {
    b.tile(g.m, g.n, col0, a, g.a_rs, g.a_cs, c, g.ldc)
}
float_element!(f64, "f64", f64, apply_f64);

macro_rules! int_element {
    ($t:ty, $name:literal) => {
        impl Element for $t {
            const NAME: &'static str = $name;
            fn zero() -> Self {
                0
            }
            #[inline(always)]
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            #[inline(always)]
            fn dot_step(acc: Self, a: Self, b: Self) -> Self {
                acc.wrapping_add(a.wrapping_mul(b))
            }
            #[inline(always)]
            fn madd(acc: Self, a: Self, b: Self) -> Self {
                acc.wrapping_add(a.wrapping_mul(b))
            }
            fn is_finite(self) -> bool {
                true
            }
            fn activate(act: &Activation, xs: &mut [Self]) -> Result<(), KernelError> {
                match act {
                    Activation::None => Ok(()),
                    Activation::Relu => {
                        for x in xs {
                            *x = (*x).max(0);
                        }
                        Ok(())
                    }
                    other => Err(KernelError::Unsupported(format!("activation {other:?} on {} data", $name))),
                }
            }
            unsafe fn gemm(g: &Gemm2d, a: *const Self, b: *const Self, c: *mut Self, _par: Parallelism) {
                // i-p-j order: the inner loop runs along a row of b and c (vectorizes when
                // b is row-major). Wrapping sums do not depend on the order.
                for i in 0..g.m {
                    let crow = std::slice::from_raw_parts_mut(c.add(i * g.ldc), g.n);
                    crow.fill(0);
                    for p in 0..g.k {
                        let av = *a.add(i * g.a_rs + p * g.a_cs);
                        let bp = b.add(p * g.b_rs);
                        for (j, cv) in crow.iter_mut().enumerate() {
                            *cv = cv.wrapping_add(av.wrapping_mul(*bp.add(j * g.b_cs)));
                        }
                    }
                }
            }
        }
    };
}

int_element!(i32, "i32");
int_element!(i64, "i64");

/// A finished output tile handed to an epilogue hook: rows `row0..row0 + rows` and columns
/// `col0..col0 + cols` of the output viewed as a matrix `[numel / last_dim, last_dim]`
/// (for matmul, rows run over all batch matrices; for conv, over `batch * out_channels`).
pub struct Tile<'a, T> {
    pub row0: usize,
    pub col0: usize,
    pub rows: usize,
    pub cols: usize,
    ld: usize,
    data: *mut T,
    _life: PhantomData<&'a mut T>,
}

impl<'a, T> Tile<'a, T> {
    /// A one-row tile: row `row0` of the output matrix view.
    pub(crate) fn from_row(row0: usize, data: &'a mut [T]) -> Tile<'a, T> {
        let cols = data.len();
        Tile { row0, col0: 0, rows: 1, cols, ld: cols, data: data.as_mut_ptr(), _life: PhantomData }
    }

    /// Row `i` of the tile (`i < rows`), `cols` long.
    pub fn row(&mut self, i: usize) -> &mut [T] {
        assert!(i < self.rows, "tile row {i} of {}", self.rows);
        // SAFETY: the tile covers `rows` rows of `cols` elements at stride `ld` of a buffer
        // it borrows exclusively for its lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.data.add(i * self.ld), self.cols) }
    }
}

/// A per-tile callback.
pub type TileHook<'h, T> = dyn Fn(Tile<'_, T>) + Sync + 'h;

/// What to do to each output tile after the product is written.
pub struct Epilogue<'a, T> {
    /// Matmul: one value per output column (`[n]`), as `linear`'s bias. Conv: one value
    /// per output channel (`[out_channels]`), as `conv2d`'s bias.
    pub bias: Option<&'a [T]>,
    pub activation: Activation,
    /// Added last; the output's shape (same length as `out`).
    pub residual: Option<&'a [T]>,
    /// Called on every finished tile, after the steps above.
    pub hook: Option<&'a TileHook<'a, T>>,
    /// Tiles span whole rows (the hook needs every column of a row at once).
    pub whole_rows: bool,
}

impl<T> Epilogue<'_, T> {
    pub fn none() -> Self {
        Epilogue { bias: None, activation: Activation::None, residual: None, hook: None, whole_rows: false }
    }

    pub fn is_empty(&self) -> bool {
        self.bias.is_none() && self.activation.is_none() && self.residual.is_none() && self.hook.is_none()
    }
}

impl<T> Default for Epilogue<'_, T> {
    fn default() -> Self {
        Epilogue::none()
    }
}

/// The geometry of one `matmul`: shapes checked, batch broadcasting resolved to strides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatmulGeom {
    out_shape: Dims,
    /// Output batch dims of the product as run (empty when the batch folds into `m`).
    batch: Dims,
    /// Element offset per unit of each batch dim, 0 where that operand broadcasts.
    a_batch: Dims,
    b_batch: Dims,
    g: Gemm2d,
    a_len: usize,
    b_len: usize,
}

impl MatmulGeom {
    pub fn new(
        a_shape: &[usize],
        b_shape: &[usize],
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<Self, KernelError> {
        let (ra, rb) = (a_shape.len(), b_shape.len());
        if ra < 2 || rb < 2 {
            return Err(KernelError::Shape(format!(
                "matmul operands must have rank >= 2, got {a_shape:?} and {b_shape:?}"
            )));
        }
        let (ar, ac) = (a_shape[ra - 2], a_shape[ra - 1]);
        let (br, bc) = (b_shape[rb - 2], b_shape[rb - 1]);
        let (m, k, a_rs, a_cs) = if transpose_a { (ac, ar, 1, ac) } else { (ar, ac, ac, 1) };
        let (kb, n, b_rs, b_cs) = if transpose_b { (bc, br, 1, bc) } else { (br, bc, bc, 1) };
        if k != kb {
            return Err(KernelError::Shape(format!("inner dims differ: {k} (columns of a) and {kb} (rows of b)")));
        }
        let (a_bd, b_bd) = (&a_shape[..ra - 2], &b_shape[..rb - 2]);
        let rank = a_bd.len().max(b_bd.len());
        let mut batch = Dims::new();
        let mut a_batch = Dims::new();
        let mut b_batch = Dims::new();
        let a_mat = ar.checked_mul(ac).ok_or_else(|| too_big(a_shape))?;
        let b_mat = br.checked_mul(bc).ok_or_else(|| too_big(b_shape))?;
        // Strides of each operand's own batch dims (row-major, matrices innermost).
        let (mut sa, mut sb) = (a_mat, b_mat);
        let mut a_str = Dims::from_elem(0, rank);
        let mut b_str = Dims::from_elem(0, rank);
        for d in (0..rank).rev() {
            let off = rank - d;
            if off <= a_bd.len() {
                let s = a_bd[a_bd.len() - off];
                a_str[d] = if s == 1 { 0 } else { sa };
                sa = sa.checked_mul(s).ok_or_else(|| too_big(a_shape))?;
            }
            if off <= b_bd.len() {
                let s = b_bd[b_bd.len() - off];
                b_str[d] = if s == 1 { 0 } else { sb };
                sb = sb.checked_mul(s).ok_or_else(|| too_big(b_shape))?;
            }
        }
        for d in 0..rank {
            let dim_of = |bd: &[usize]| {
                let off = rank - d;
                if off <= bd.len() {
                    bd[bd.len() - off]
                } else {
                    1
                }
            };
            let (da, db) = (dim_of(a_bd), dim_of(b_bd));
            let dim = match (da, db) {
                _ if da == db => da,
                (1, _) => db,
                (_, 1) => da,
                _ => {
                    return Err(KernelError::Shape(format!(
                        "batch dims {a_bd:?} and {b_bd:?} do not broadcast (a {a_shape:?}, b {b_shape:?})"
                    )))
                }
            };
            batch.push(dim);
            a_batch.push(a_str[d]);
            b_batch.push(b_str[d]);
        }
        let mut out_shape = batch.clone();
        out_shape.extend([m, n]);
        let nb: usize = batch.iter().product();
        let mut g = Gemm2d { m, n, k, a_rs, a_cs, b_rs, b_cs, ldc: n };
        // Fold the batch into the rows when b is shared and a's matrices are contiguous
        // rows of one tall matrix (x[B, S, D] @ w[D, N]): one large GEMM instead of many.
        let b_shared = b_batch.iter().all(|&s| s == 0);
        let a_dense = {
            let mut expect = a_mat;
            let mut ok = true;
            for d in (0..rank).rev() {
                if batch[d] != 1 && a_batch[d] != expect {
                    ok = false;
                }
                expect = expect.saturating_mul(batch[d]);
            }
            ok
        };
        if !transpose_a && b_shared && a_dense && nb > 1 {
            g.m = m.checked_mul(nb).ok_or_else(|| too_big(a_shape))?;
            batch.clear();
            a_batch.clear();
            b_batch.clear();
        }
        checked_product(&out_shape).ok_or_else(|| too_big(&out_shape))?;
        Ok(MatmulGeom { out_shape, batch, a_batch, b_batch, g, a_len: sa, b_len: sb })
    }

    pub fn out_shape(&self) -> &[usize] {
        &self.out_shape
    }

    pub fn out_len(&self) -> usize {
        self.out_shape.iter().product()
    }

    /// (m, n, k) of each product as run (m includes a folded batch).
    pub fn mnk(&self) -> (usize, usize, usize) {
        (self.g.m, self.g.n, self.g.k)
    }

    /// Number of independent matrix products.
    pub fn problems(&self) -> usize {
        self.batch.iter().product()
    }

    /// `2 m n k` over the whole batch.
    pub fn flops(&self) -> f64 {
        2.0 * self.problems() as f64 * self.g.m as f64 * self.g.n as f64 * self.g.k as f64
    }

    /// Element offsets of batch matrix `p` in a and b.
    fn offsets(&self, p: usize) -> (usize, usize) {
        let (mut rem, mut ao, mut bo) = (p, 0, 0);
        for d in (0..self.batch.len()).rev() {
            let i = rem % self.batch[d];
            rem /= self.batch[d];
            ao += i * self.a_batch[d];
            bo += i * self.b_batch[d];
        }
        (ao, bo)
    }
}

fn too_big(shape: &[usize]) -> KernelError {
    KernelError::Shape(format!("shape {shape:?} has too many elements"))
}

fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

fn check_len(name: &'static str, got: usize, want: usize) -> Result<(), KernelError> {
    if got == want {
        Ok(())
    } else {
        Err(KernelError::Len { name, got, want })
    }
}

/// `out = epilogue(a @ b)` with the `matmul` op's semantics (see the module docs).
#[allow(clippy::too_many_arguments)]
pub fn matmul<T: Element>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    transpose_a: bool,
    transpose_b: bool,
    out: &mut [T],
    threads: usize,
    epilogue: &Epilogue<'_, T>,
) -> Result<(), KernelError> {
    let geom = MatmulGeom::new(a_shape, b_shape, transpose_a, transpose_b)?;
    matmul_geom(&geom, a, b, out, threads, epilogue, None)
}

/// [`matmul`] on f32 buffers, with `b` also packed (`packed`, made from `b` once) when it
/// is a weight. The packed copy is used when it matches the product's `k x n` and `b` has no
/// batch of its own; otherwise `b` goes through the `gemm` crate as in [`matmul`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_f32(
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    transpose_a: bool,
    transpose_b: bool,
    out: &mut [f32],
    threads: usize,
    epilogue: &Epilogue<'_, f32>,
    packed: Option<&PackedB>,
) -> Result<(), KernelError> {
    let geom = MatmulGeom::new(a_shape, b_shape, transpose_a, transpose_b)?;
    matmul_geom(&geom, a, b, out, threads, epilogue, packed)
}

/// [`matmul`] with the geometry computed once (a plan can keep it), and `b`'s packed copy
/// if there is one (see [`matmul_f32`]).
pub fn matmul_geom<T: Element>(
    geom: &MatmulGeom,
    a: &[T],
    b: &[T],
    out: &mut [T],
    threads: usize,
    epilogue: &Epilogue<'_, T>,
    packed: Option<&PackedB>,
) -> Result<(), KernelError> {
    check_len("a", a.len(), geom.a_len)?;
    check_len("b", b.len(), geom.b_len)?;
    check_len("out", out.len(), geom.out_len())?;
    let g = geom.g;
    if let Some(bias) = epilogue.bias {
        check_len("bias", bias.len(), g.n)?;
    }
    if let Some(res) = epilogue.residual {
        check_len("residual", res.len(), out.len())?;
    }
    check_activation::<T>(&epilogue.activation)?;
    if out.is_empty() {
        return Ok(());
    }
    let (ap, bp, cp) = (SendPtr(a.as_ptr() as *mut T), SendPtr(b.as_ptr() as *mut T), SendPtr(out.as_mut_ptr()));
    let res = epilogue.residual.map(|r| SendPtr(r.as_ptr() as *mut T));
    let bias = epilogue.bias.map(|b| SendPtr(b.as_ptr() as *mut T));
    let operands = |p: usize| {
        let (ao, bo) = geom.offsets(p);
        let co = p * g.m * g.n;
        Operands {
            a: ap.get().wrapping_add(ao),
            b: bp.get().wrapping_add(bo),
            c: cp.get().wrapping_add(co),
            col_bias: bias.map(|b| b.get() as *const T),
            row_bias: None,
            res: res.map(|r| r.get().wrapping_add(co) as *const T),
            row_base: p * g.m,
        }
    };
    let packed =
        packed.filter(|pb| T::PACKED && (pb.k(), pb.n()) == (g.k, g.n) && geom.b_batch.iter().all(|&s| s == 0));
    // SAFETY: the lengths were checked against the geometry, so every tile's operands are
    // in bounds; `out` is borrowed exclusively and distinct tiles write disjoint elements.
    // A packed `b` has this product's `k x n` and serves every batch matrix (b is shared).
    unsafe {
        run_gemm(
            &g,
            geom.problems(),
            &operands,
            threads,
            &epilogue.activation,
            epilogue.hook,
            epilogue.whole_rows,
            packed,
        )
    };
    Ok(())
}

pub(crate) fn check_activation<T: Element>(act: &Activation) -> Result<(), KernelError> {
    T::activate(act, &mut [])
}

/// A raw pointer that may cross threads (the code using it guarantees disjoint writes).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);
// SAFETY: only used for buffers whose tiles are written by one thread each.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole `SendPtr`, not its field).
    pub fn get(self) -> *mut T {
        self.0
    }
}

/// Pointers of one matrix product and its epilogue operands.
pub(crate) struct Operands<T> {
    pub a: *const T,
    pub b: *const T,
    pub c: *mut T,
    /// `[n]`, added per column.
    pub col_bias: Option<*const T>,
    /// `[m]`, added per row.
    pub row_bias: Option<*const T>,
    /// Laid out like `c` (row stride `ldc`).
    pub res: Option<*const T>,
    /// Row index of `c`'s first row in the hook's matrix view.
    pub row_base: usize,
}

/// Tile sizes `(rows, cols)` for an `m x n x k` product.
///
/// The `gemm` crate packs its operands on every call, so each extra column block re-packs
/// `a` (`m x k`) and each extra row block re-packs `b` (`k x n`). Tiling pays when that costs
/// less than the pass over the output it saves (`m x n`, written and read once more), so an
/// output is cut into at most `n / k` column blocks and `m / k` row blocks, aiming at
/// [`TILE_ELEMS`] per tile; an output that small stays one tile (it is still in cache when
/// the epilogue runs).
fn tile_shape(m: usize, n: usize, k: usize, epilogue: bool, whole_rows: bool) -> (usize, usize) {
    if !epilogue || m * n <= TILE_ELEMS {
        return (m, n);
    }
    let k = k.max(1);
    let want = (m * n).div_ceil(TILE_ELEMS);
    let col_blocks = if whole_rows { 1 } else { want.min(n / k).max(1) };
    let row_blocks = want.div_ceil(col_blocks).min(m / k).max(1);
    let nb = n.div_ceil(col_blocks).next_multiple_of(16).min(n);
    let mb = m.div_ceil(row_blocks).next_multiple_of(8).min(m);
    (mb, nb)
}

/// Tile sizes `(rows, cols)` for an `m x n` product through a packed `b` (nothing is
/// re-packed per tile, so tiles are sized for the caches and the threads alone): whole rows
/// when the hook needs them or `n <= 1024`, else 512 columns (16 panels); at most 128 rows
/// (their `KC` columns of `a` stay in L2) and about [`TILE_ELEMS`] per tile, and with few
/// tiles, a row count that shares them evenly among `threads`. Row counts are multiples of
/// 8, not of the kernel's 12-row groups: 256 rows then split 128 + 128 (ten groups and an
/// 8-row tail each) rather than 132 + 124, which left one thread of two waiting.
fn packed_tile_shape(m: usize, n: usize, problems: usize, threads: usize, whole_rows: bool) -> (usize, usize) {
    let nb = if whole_rows || n <= 1024 { n } else { 16 * NR };
    let per = problems * n.div_ceil(nb);
    let cap = (TILE_ELEMS / nb).clamp(8, 128) / 8 * 8;
    let most = m.div_ceil(8);
    let mut rt = m.div_ceil(cap).min(most);
    if per * rt < 4 * threads {
        while !(per * rt).is_multiple_of(threads) && rt < most {
            rt += 1;
        }
    }
    (m.div_ceil(rt).next_multiple_of(8).min(m), nb)
}

/// Runs `problems` products of geometry `g` with operands from `operands`, tiled, with the
/// epilogue applied per tile. With `packed` (the shared `b` packed, of `g`'s `k x n`), tiles
/// go through ladder's packed kernel instead of the `gemm` crate.
///
/// # Safety
/// `operands(p)` must give in-bounds pointers for every `p < problems`, with all `c` (and
/// their tiles) disjoint; a `packed` is given only for `T::PACKED`, holds `g`'s `k x n` and
/// is every problem's `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run_gemm<T: Element>(
    g: &Gemm2d,
    problems: usize,
    operands: &(dyn Fn(usize) -> Operands<T> + Sync),
    threads: usize,
    act: &Activation,
    hook: Option<&TileHook<'_, T>>,
    whole_rows: bool,
    packed: Option<&PackedB>,
) {
    if g.m == 0 || g.n == 0 || problems == 0 {
        return;
    }
    let work = g.m.saturating_mul(g.n).saturating_mul(g.k).saturating_mul(problems);
    let threads = if work < PAR_GEMM_WORK { 1 } else { threads.max(1) };
    let probe = operands(0);
    let has_epilogue =
        !act.is_none() || probe.col_bias.is_some() || probe.row_bias.is_some() || probe.res.is_some() || hook.is_some();
    let small = g.m * g.n * g.k <= SMALL_WORK;
    // The caller checked that `packed` is this product's `b` (`matmul_geom`); tiny products
    // keep the plain loop, and `k = 0` the zeros.
    let packed = packed.filter(|_| !small && g.k > 0);
    let (mb, nb) = match packed {
        Some(_) => packed_tile_shape(g.m, g.n, problems, threads, whole_rows),
        None => tile_shape(g.m, g.n, g.k, has_epilogue, whole_rows),
    };
    let (rt, ct) = (g.m.div_ceil(mb), g.n.div_ceil(nb));
    let per_problem = rt * ct;
    let tiles = problems * per_problem;
    let run_tile = |t: usize, par: Parallelism, par_epilogue: bool| {
        let p = t / per_problem;
        let (r, c) = ((t % per_problem) / ct, t % ct);
        let (r0, c0) = (r * mb, c * nb);
        let (rows, cols) = (mb.min(g.m - r0), nb.min(g.n - c0));
        let ops = operands(p);
        let tg = Gemm2d { m: rows, n: cols, ..*g };
        let a = ops.a.wrapping_add(r0 * g.a_rs);
        let b = ops.b.wrapping_add(c0 * g.b_cs);
        let cptr = ops.c.wrapping_add(r0 * g.ldc + c0);
        if g.k == 0 {
            for i in 0..rows {
                std::slice::from_raw_parts_mut(cptr.add(i * g.ldc), cols).fill(T::zero());
            }
        } else if small {
            naive(&tg, a, b, cptr);
        } else if let Some(pb) = packed {
            // `c0` is a multiple of `nb`, itself `n` or a multiple of `NR`.
            T::gemm_packed(&tg, a, pb, c0, cptr);
        } else {
            T::gemm(&tg, a, b, cptr, par);
        }
        if has_epilogue {
            let tile = TileRef { ops: &ops, r0, c0, cols, ldc: g.ldc };
            if par_epilogue && rows > 1 && rows * cols >= 16 * 1024 {
                (0..rows).into_par_iter().for_each(|i| tile.apply_rows(i, i + 1, act));
            } else {
                tile.apply_rows(0, rows, act);
            }
            if let Some(h) = hook {
                let (cp, row_base, ld) = (SendPtr(cptr), ops.row_base + r0, g.ldc);
                // SAFETY (of the tiles built here): rows `i0..i1` of this finished tile, which
                // no one else touches until the tile's task ends.
                let sub = move |i0: usize, i1: usize| Tile {
                    row0: row_base + i0,
                    col0: c0,
                    rows: i1 - i0,
                    cols,
                    ld,
                    data: cp.get().wrapping_add(i0 * ld),
                    _life: PhantomData,
                };
                if par_epilogue && rows > 1 && rows * cols >= 16 * 1024 {
                    // The GEMM ran on every thread; so does the hook, over disjoint row blocks.
                    let per = rows.div_ceil(threads);
                    (0..rows.div_ceil(per))
                        .into_par_iter()
                        .with_max_len(1)
                        .for_each(|b| h(sub(b * per, ((b + 1) * per).min(rows))));
                } else {
                    h(sub(0, rows));
                }
            }
        }
    };
    let even = tiles >= threads && (tiles.is_multiple_of(threads) || tiles >= 4 * threads);
    if threads == 1 || small || tiles == 1 && packed.is_some() {
        for t in 0..tiles {
            run_tile(t, Parallelism::None, false);
        }
    } else if even || packed.is_some() {
        (0..tiles).into_par_iter().with_max_len(1).for_each(|t| run_tile(t, Parallelism::None, false));
    } else {
        for t in 0..tiles {
            run_tile(t, Parallelism::Rayon(threads), true);
        }
    }
}

/// One tile of one product, for the epilogue.
struct TileRef<'o, T> {
    ops: &'o Operands<T>,
    r0: usize,
    c0: usize,
    cols: usize,
    ldc: usize,
}

// SAFETY: a TileRef is shared across threads only to apply the epilogue to distinct rows.
unsafe impl<T> Sync for TileRef<'_, T> {}

impl<T: Element> TileRef<'_, T> {
    /// Bias, activation, residual on tile rows `i0..i1`.
    ///
    /// # Safety
    /// The tile must be in bounds and the rows not be touched by anyone else meanwhile.
    unsafe fn apply_rows(&self, i0: usize, i1: usize, act: &Activation) {
        for i in i0..i1 {
            let ri = self.r0 + i;
            let row = std::slice::from_raw_parts_mut(self.ops.c.add(ri * self.ldc + self.c0), self.cols);
            if let Some(cb) = self.ops.col_bias {
                let bias = std::slice::from_raw_parts(cb.add(self.c0), self.cols);
                for (x, &b) in row.iter_mut().zip(bias) {
                    *x = x.add(b);
                }
            }
            if let Some(rb) = self.ops.row_bias {
                let b = *rb.add(ri);
                for x in row.iter_mut() {
                    *x = x.add(b);
                }
            }
            // The activation was checked for this element type before any work began.
            let _ = T::activate(act, row);
            if let Some(res) = self.ops.res {
                let r = std::slice::from_raw_parts(res.add(ri * self.ldc + self.c0), self.cols);
                for (x, &v) in row.iter_mut().zip(r) {
                    *x = x.add(v);
                }
            }
        }
    }
}

/// The interpreter's loop: each output element accumulates over `k` in order from +0.
unsafe fn naive<T: Element>(g: &Gemm2d, a: *const T, b: *const T, c: *mut T) {
    for i in 0..g.m {
        for j in 0..g.n {
            let mut acc = T::zero();
            for p in 0..g.k {
                acc = T::dot_step(acc, *a.add(i * g.a_rs + p * g.a_cs), *b.add(p * g.b_rs + j * g.b_cs));
            }
            *c.add(i * g.ldc + j) = acc;
        }
    }
}
