//! The concurrency slot of one response, shared by its body and, for streams, the task that
//! watches it: a stream's watch frees the slot when the stream ends (finished, or ended by a
//! deadline) even if a client that stopped reading never lets the body reach its end.

use std::sync::{Arc, Mutex};

use tokio::sync::OwnedSemaphorePermit;

/// Put in a response's extensions by a handler whose body is watched by a task of its own;
/// the admission layer hands the response's slot to it.
#[derive(Clone, Default)]
pub struct SlotRelease(Arc<Mutex<Slot>>);

#[derive(Default)]
struct Slot {
    /// Held for its drop, which frees the slot.
    permit: Option<OwnedSemaphorePermit>,
    released: bool,
}

impl SlotRelease {
    /// The work behind the response is over: its slot is free now. A slot handed over later
    /// is freed at once.
    pub fn release(&self) {
        if let Ok(mut slot) = self.0.lock() {
            slot.released = true;
            slot.permit = None;
        }
    }

    pub(super) fn hold(&self, permit: OwnedSemaphorePermit) {
        if let Ok(mut slot) = self.0.lock() {
            if !slot.released {
                slot.permit = Some(permit);
            }
        }
    }
}
