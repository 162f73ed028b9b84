//! Which storage buffer binding each program buffer of a kernel reads and writes.
//!
//! Normally one binding per buffer. A kernel reading more buffers than a shader may bind
//! (lavapipe: 32) is often reading many small constants (a fused graph of folded masks and
//! index tables): with `pool` set, the constants share one binding per storage element type
//! (a 32-bit word for f32, i32, bool and the 8- and 16-bit types, i64 for i64 and u64, f64),
//! each at its own element offset ([`Pool`]), which the host fills once when the plan is made.

use crate::ir::DType;
use crate::kernel::{BufferId, BufferKind, Program};

/// Where a binding's storage comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    /// The program buffer itself.
    Buffer(BufferId),
    /// [`crate::backend::vulkan::spirv::Shader::pools`]`[i]`.
    Pool(usize),
}

/// Constant buffers packed into one binding.
#[derive(Clone, Debug, Default)]
pub struct Pool {
    /// Each constant and its byte offset in the pool (a multiple of the element stride).
    pub members: Vec<(BufferId, u64)>,
    /// The pool's size in bytes.
    pub bytes: u64,
}

/// The bindings for `used` (the kernel's buffers in first-use order), the pools, and for each
/// used buffer its binding index and element offset there. `storage(dt)`: the storage element
/// of a dtype's buffers (a type key and its stride in bytes).
pub(super) fn plan(
    used: &[BufferId],
    program: &Program,
    pool: bool,
    storage: impl Fn(DType) -> (u32, u32),
) -> (Vec<Binding>, Vec<Pool>, Vec<(usize, u64)>) {
    // Each used buffer's binding (its own, or pool k) and element offset there.
    enum Slot {
        Own(usize),
        Pooled(usize),
    }
    let mut bindings = Vec::new();
    let mut pools: Vec<(u32, Pool)> = Vec::new();
    let mut slots = Vec::with_capacity(used.len());
    for &id in used {
        let buf = &program.buffers[id];
        let elems = buf.shape.dims().iter().map(|d| d.as_const()).product::<Option<u64>>();
        let bytes = elems.map(|n| n.saturating_mul(buf.dtype.size_bytes() as u64));
        let (Some(bytes), true) = (bytes, pool && matches!(buf.kind, BufferKind::Const(_))) else {
            slots.push((Slot::Own(bindings.len()), 0));
            bindings.push(Binding::Buffer(id));
            continue;
        };
        let (key, stride) = storage(buf.dtype);
        let k = pools.iter().position(|(k, _)| *k == key).unwrap_or_else(|| {
            pools.push((key, Pool::default()));
            pools.len() - 1
        });
        let p = &mut pools[k].1;
        let offset = p.bytes.next_multiple_of(u64::from(stride));
        p.members.push((id, offset));
        p.bytes = offset.saturating_add(bytes.max(1));
        slots.push((Slot::Pooled(k), offset / u64::from(stride)));
    }
    let first_pool = bindings.len();
    bindings.extend((0..pools.len()).map(Binding::Pool));
    let at = slots
        .into_iter()
        .map(|(slot, base)| match slot {
            Slot::Own(b) => (b, base),
            Slot::Pooled(k) => (first_pool + k, base),
        })
        .collect();
    (bindings, pools.into_iter().map(|(_, p)| p).collect(), at)
}
