//! Structured control flow: loops (a header, a test, the body, a continue block, the merge)
//! and the conditional store of a run-time error code.

use rspirv::spirv::{self, Word};

use super::{failed, Cx, Status};
use crate::backend::Declined;

/// The blocks of a structured loop (`Cx::open_loop`).
#[derive(Clone, Copy)]
pub(super) struct Loop {
    header: Word,
    body: Word,
    cont: Word,
    merge: Word,
}

impl Cx<'_> {
    /// Starts a structured loop: its header, then the block that tests whether to go on,
    /// where the caller emits the test ([`Cx::loop_body`] takes its result).
    pub(super) fn open_loop(&mut self) -> Result<Loop, Declined> {
        let l = Loop { header: self.b.id(), body: self.b.id(), cont: self.b.id(), merge: self.b.id() };
        let check = self.b.id();
        self.b.branch(l.header).map_err(failed)?;
        self.b.begin_block(Some(l.header)).map_err(failed)?;
        self.b.loop_merge(l.merge, l.cont, spirv::LoopControl::NONE, []).map_err(failed)?;
        self.b.branch(check).map_err(failed)?;
        self.b.begin_block(Some(check)).map_err(failed).map(|_| l)
    }

    /// The loop's body, entered while `more` holds (else the loop ends).
    pub(super) fn loop_body(&mut self, l: Loop, more: Word) -> Result<(), Declined> {
        self.b.branch_conditional(more, l.body, l.merge, []).map_err(failed)?;
        self.b.begin_block(Some(l.body)).map_err(failed).map(|_| ())
    }

    /// From the body to the continue block (where a counter steps).
    pub(super) fn loop_continue(&mut self, l: Loop) -> Result<(), Declined> {
        self.b.branch(l.cont).map_err(failed)?;
        self.b.begin_block(Some(l.cont)).map_err(failed).map(|_| ())
    }

    /// Back to the header, and on after the loop.
    pub(super) fn close_loop(&mut self, l: Loop) -> Result<(), Declined> {
        self.b.branch(l.header).map_err(failed)?;
        self.b.begin_block(Some(l.merge)).map_err(failed).map(|_| ())
    }

    /// Sets the status word to `code` (when `cond` holds).
    pub(super) fn flag(&mut self, cond: Word, code: Status) -> Result<(), Declined> {
        let (set, done) = (self.b.id(), self.b.id());
        self.b.selection_merge(done, spirv::SelectionControl::NONE).map_err(failed)?;
        self.b.branch_conditional(cond, set, done, []).map_err(failed)?;
        self.b.begin_block(Some(set)).map_err(failed)?;
        let zero = self.u32c(0);
        let p = self.b.access_chain(self.status_elem_ptr, None, self.status_var, [zero, zero]).map_err(failed)?;
        let c = self.u32c(code as u32);
        self.b.store(p, c, None, []).map_err(failed)?;
        self.b.branch(done).map_err(failed)?;
        self.b.begin_block(Some(done)).map_err(failed)?;
        Ok(())
    }
}
