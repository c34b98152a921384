//! The prefill side's rooms: a prefilled request's KV, held until a decode worker takes it.
//! Either side may come first (the decode's request often reaches its worker before the
//! prefill is done), so a room is created by whoever asks first.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::{oneshot, watch};

/// What a decode worker learns with the KV: the prompt it covers and how much of it the
/// prefill worker had cached (SGLang transfers `cached_tokens` in the metadata buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KvInfo {
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    /// The DP rank that ran the prefill and holds the KV.
    pub dp_rank: usize,
}

struct Slot {
    ready: watch::Sender<Option<KvInfo>>,
    /// Told when a decode took the KV (the prefill's response may then go out).
    taken: Option<oneshot::Sender<()>>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            ready: watch::Sender::new(None),
            taken: None,
        }
    }
}

#[derive(Default)]
pub struct Rooms {
    slots: Mutex<HashMap<u64, Slot>>,
}

impl Rooms {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prefill side: the room's KV exists. Resolves once a decode took it.
    pub fn publish(&self, room: u64, info: KvInfo) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut slots = self.slots();
        let slot = slots.entry(room).or_insert_with(Slot::new);
        slot.taken = Some(tx);
        slot.ready.send_replace(Some(info));
        rx
    }

    /// Prefill side: the room is given up (its request failed or was aborted).
    pub fn forget(&self, room: u64) {
        self.slots().remove(&room);
    }

    /// Bootstrap server: waits on the room's KV.
    pub fn watch(&self, room: u64) -> watch::Receiver<Option<KvInfo>> {
        self.slots()
            .entry(room)
            .or_insert_with(Slot::new)
            .ready
            .subscribe()
    }

    /// Bootstrap server: the transfer is done; false if the prefill gave the room up meanwhile.
    pub fn hand_over(&self, room: u64) -> bool {
        let Some(slot) = self.slots().remove(&room) else {
            return false;
        };
        slot.taken.is_some_and(|t| t.send(()).is_ok())
    }

    /// Bootstrap server: its decode stopped waiting; a room nobody prefilled is dropped.
    pub fn abandon(&self, room: u64) {
        let mut slots = self.slots();
        if slots.get(&room).is_some_and(|s| s.ready.borrow().is_none()) {
            slots.remove(&room);
        }
    }

    /// No room is held or awaited.
    pub fn is_empty(&self) -> bool {
        self.slots().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: KvInfo = KvInfo {
        prompt_tokens: 10,
        cached_tokens: 4,
        dp_rank: 0,
    };

    #[tokio::test]
    async fn either_side_may_come_first() {
        let rooms = Rooms::default();
        let mut early = rooms.watch(1);
        let taken = rooms.publish(1, INFO);
        assert_eq!(*early.wait_for(|v| v.is_some()).await.unwrap(), Some(INFO));
        assert!(rooms.hand_over(1));
        taken.await.unwrap();
        assert!(rooms.is_empty());

        let _taken = rooms.publish(2, INFO);
        assert_eq!(*rooms.watch(2).borrow(), Some(INFO));
    }

    #[test]
    fn a_given_up_room_is_not_handed_over() {
        let rooms = Rooms::default();
        let _taken = rooms.publish(3, INFO);
        rooms.forget(3);
        assert!(!rooms.hand_over(3));
        let _rx = rooms.watch(4);
        rooms.abandon(4);
        assert!(rooms.is_empty());
    }
}
