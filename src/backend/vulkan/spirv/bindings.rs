//! Which storage buffer binding each program buffer of a kernel reads and writes.
//!
//! Normally one binding per buffer. A kernel reading more buffers than a shader may bind
//! (lavapipe: 32) is often reading many small constants (a fused graph of folded masks and
//! index tables): with [`Placement::pool`] set, the constants share one binding per storage
//! element type (a 32-bit word for f32, i32, bool and the 8- and 16-bit types, i64 for i64
//! and u64, f64), each at its own element offset ([`Pool`]), which the host fills once when
//! the plan is made. Where that is not enough, the program's other buffers that such a kernel
//! touches live in the run's arena ([`Placement::arena`]): one device buffer, bound once per
//! storage type, each member at an element offset the host computes from the run's sizes and
//! writes into the kernel's size table (after the buffers' lengths), so every kernel touching
//! a member reads its offset from there.

use cranelift_entity::EntityRef;

use crate::ir::DType;
use crate::kernel::{BufferId, BufferKind, Program};

/// Where a binding's storage comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    /// The program buffer itself.
    Buffer(BufferId),
    /// [`crate::backend::vulkan::spirv::Shader::pools`]`[i]`.
    Pool(usize),
    /// The run's arena (the same device buffer for every arena binding, one per storage type).
    Arena,
}

/// Where the buffers of the kernels of one program live (the same for every kernel, so that
/// a buffer is where every kernel touching it looks for it).
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Pack the constants each kernel reads into pools.
    pub pool: bool,
    /// By buffer index: whether the (non-constant) buffer lives in the run's arena.
    pub arena: Vec<bool>,
}

impl Placement {
    /// Whether buffer `b` lives in the run's arena.
    pub fn in_arena(&self, b: BufferId) -> bool {
        self.arena.get(b.index()).copied().unwrap_or(false)
    }
}

/// Constant buffers packed into one binding.
#[derive(Clone, Debug, Default)]
pub struct Pool {
    /// Each constant and its byte offset in the pool (a multiple of the element stride).
    pub members: Vec<(BufferId, u64)>,
    /// The pool's size in bytes.
    pub bytes: u64,
}

/// Where a used buffer's first element is in its binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Base {
    /// At this element (0 for a binding of its own).
    Fixed(u64),
    /// In the arena, at the element the size table holds for it.
    Table,
}

/// What [`plan`] decides for one kernel.
pub(super) struct Planned {
    /// The bindings, each with a representative dtype (for its storage element type).
    pub bindings: Vec<(Binding, DType)>,
    pub pools: Vec<Pool>,
    /// For each used buffer: its binding index and its base there.
    pub at: Vec<(usize, Base)>,
}

/// The bindings for `used` (the kernel's buffers in first-use order). `storage(dt)`: the
/// storage element of a dtype's buffers (a type key and its stride in bytes).
pub(super) fn plan(
    used: &[BufferId],
    program: &Program,
    place: &Placement,
    storage: impl Fn(DType) -> (u32, u32),
) -> Planned {
    // Each used buffer's binding (its own, pool k, or arena k) and base there.
    enum Slot {
        Own(usize),
        Pooled(usize),
        Arena(usize),
    }
    let mut bindings = Vec::new();
    let mut pools: Vec<(u32, DType, Pool)> = Vec::new();
    let mut arenas: Vec<(u32, DType)> = Vec::new();
    let mut slots = Vec::with_capacity(used.len());
    for &id in used {
        let buf = &program.buffers[id];
        let constant = matches!(buf.kind, BufferKind::Const(_));
        let (key, stride) = storage(buf.dtype);
        if !constant && place.in_arena(id) {
            let k = arenas.iter().position(|(k, _)| *k == key).unwrap_or_else(|| {
                arenas.push((key, buf.dtype));
                arenas.len() - 1
            });
            slots.push((Slot::Arena(k), Base::Table));
            continue;
        }
        let elems = buf.shape.dims().iter().map(|d| d.as_const()).product::<Option<u64>>();
        let bytes = elems.map(|n| n.saturating_mul(buf.dtype.size_bytes() as u64));
        let (Some(bytes), true) = (bytes, place.pool && constant) else {
            slots.push((Slot::Own(bindings.len()), Base::Fixed(0)));
            bindings.push((Binding::Buffer(id), buf.dtype));
            continue;
        };
        let k = pools.iter().position(|(k, ..)| *k == key).unwrap_or_else(|| {
            pools.push((key, buf.dtype, Pool::default()));
            pools.len() - 1
        });
        let p = &mut pools[k].2;
        let offset = p.bytes.next_multiple_of(u64::from(stride));
        p.members.push((id, offset));
        p.bytes = offset.saturating_add(bytes.max(1));
        slots.push((Slot::Pooled(k), Base::Fixed(offset / u64::from(stride))));
    }
    let first_pool = bindings.len();
    bindings.extend(pools.iter().enumerate().map(|(k, (_, dtype, _))| (Binding::Pool(k), *dtype)));
    let first_arena = bindings.len();
    bindings.extend(arenas.iter().map(|(_, dtype)| (Binding::Arena, *dtype)));
    let at = slots
        .into_iter()
        .map(|(slot, base)| match slot {
            Slot::Own(b) => (b, base),
            Slot::Pooled(k) => (first_pool + k, base),
            Slot::Arena(k) => (first_arena + k, base),
        })
        .collect();
    Planned { bindings, pools: pools.into_iter().map(|(.., p)| p).collect(), at }
}
