//! The routing units that may take a request, kept between changes.
//!
//! Every pick needs the healthy units whose breaker lets them through. Asking every unit on
//! every pick reads each one's memory: at 4,000 workers that was a fifth of a pick
//! (`benches/routing.rs`). Health and breakers change seldom, so the registry keeps the list
//! ([`Available`]) and builds it again only when the routing units change (the registry's
//! generation) or some worker's health or breaker does ([`epoch`]).
//!
//! A tripped breaker is the exception: its cool-down ends, and its one half-open probe comes and
//! goes, with the clock and with other requests, not with a change anyone announces. Units whose
//! breaker has tripped are therefore kept apart and asked on every pick; there are few of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Worker, WorkerId};

/// Counts changes of any worker's health, and breakers closing or tripping. Process-wide: a
/// change in one model's registry makes the others rebuild too, which costs a list, not a
/// wrong pick.
static EPOCH: AtomicU64 = AtomicU64::new(0);

pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// Called after the change is stored, so a list built for the new epoch sees it.
pub(super) fn changed() {
    EPOCH.fetch_add(1, Ordering::Release);
}

/// The healthy routing units at one (generation, epoch), in routing order.
#[derive(Debug, Default)]
pub struct Available {
    generation: u64,
    epoch: u64,
    /// Breaker closed: available until the next change.
    closed: Vec<Arc<Worker>>,
    /// Breaker open or half-open: asked on every pick.
    tripped: Vec<Arc<Worker>>,
}

impl Available {
    /// `units` as of `generation`, with health and breakers as of `epoch` or later.
    pub(super) fn build(generation: u64, epoch: u64, units: &[Arc<Worker>]) -> Available {
        let (mut closed, mut tripped) = (Vec::with_capacity(units.len()), Vec::new());
        for unit in units.iter().filter(|u| u.is_healthy()) {
            if unit.breaker().is_closed() {
                closed.push(Arc::clone(unit));
            } else {
                tripped.push(Arc::clone(unit));
            }
        }
        Available {
            generation,
            epoch,
            closed,
            tripped,
        }
    }

    pub(super) fn is_current(&self, generation: u64, epoch: u64) -> bool {
        (self.generation, self.epoch) == (generation, epoch)
    }

    /// The units that may take a request now, except those in `exclude`. With nothing
    /// excluded, the closed ones are taken without reading them.
    pub fn candidates(&self, exclude: &[WorkerId]) -> Vec<&Arc<Worker>> {
        let mut out = Vec::with_capacity(self.closed.len() + self.tripped.len());
        if exclude.is_empty() {
            out.extend(self.closed.iter());
        } else {
            out.extend(self.closed.iter().filter(|u| !exclude.contains(&u.id)));
        }
        out.extend(
            self.tripped
                .iter()
                .filter(|u| u.breaker().allows() && !exclude.contains(&u.id)),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::breaker::FAILURES_TO_OPEN;
    use crate::workers::Registry;

    fn ids(available: &Available, exclude: &[WorkerId]) -> Vec<u32> {
        available
            .candidates(exclude)
            .iter()
            .map(|u| u.id.0)
            .collect()
    }

    fn registry(n: usize) -> Registry {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 1 + i))
            .collect();
        Registry::new(&urls).unwrap()
    }

    #[test]
    fn health_changes_reach_the_kept_list() {
        let r = registry(3);
        assert!(
            ids(&r.available(), &[]).is_empty(),
            "unhealthy until checked"
        );
        for w in r.snapshot().iter() {
            w.set_healthy(true);
        }
        assert_eq!(ids(&r.available(), &[]), [0, 1, 2]);
        r.snapshot()[1].set_healthy(false);
        assert_eq!(ids(&r.available(), &[]), [0, 2]);
        assert_eq!(ids(&r.available(), &[WorkerId(0)]), [2]);
    }

    #[test]
    fn the_list_is_kept_until_something_changes() {
        let r = registry(2);
        r.snapshot()[0].set_healthy(true);
        let (a, b) = (r.available(), r.available());
        // Another test's change may bump the process-wide epoch in between: then a rebuild
        // is right, and the check below cannot tell.
        if a.epoch == b.epoch {
            assert!(Arc::ptr_eq(&a, &b), "rebuilt with nothing changed");
        }
        r.add("http://127.0.0.1:9").unwrap();
        assert!(!Arc::ptr_eq(&a, &r.available()), "new units, a new list");
    }

    #[test]
    fn a_tripped_breaker_is_asked_on_every_pick() {
        let r = registry(2);
        let ws = r.snapshot();
        for w in ws.iter() {
            w.set_healthy(true);
        }
        assert_eq!(ids(&r.available(), &[]), [0, 1]);
        for _ in 0..FAILURES_TO_OPEN {
            ws[1].breaker().record_failure();
        }
        assert_eq!(ids(&r.available(), &[]), [0], "open: no traffic");
        // The cool-down ends with the clock: no change is announced, the list still sees it.
        ws[1].breaker().half_open_now();
        let available = r.available();
        assert_eq!(ids(&available, &[]), [0, 1], "half-open: one probe may go");
        assert!(ws[1].breaker().admit().admitted());
        assert_eq!(ids(&available, &[]), [0], "the probe is out");
        ws[1].breaker().record_success();
        assert_eq!(ids(&r.available(), &[]), [0, 1]);
    }
}
