//! Two random workers, the less loaded wins (in-flight requests, then queued prefill tokens).

use std::sync::Arc;

use rand::Rng;

use super::{Pick, Policy, RouteRequest};
use crate::workers::Worker;

#[derive(Debug)]
pub struct PowerOfTwo;

impl Policy for PowerOfTwo {
    fn pick(&self, _req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick> {
        match workers.len() {
            0 => None,
            1 => Some(Pick::at(0)),
            n => {
                let mut rng = rand::rng();
                let a = rng.random_range(0..n);
                let b = (a + rng.random_range(1..n)) % n;
                let load = |i: usize| (workers[i].in_flight(), workers[i].pending_prefill());
                Some(Pick::at(if load(b) < load(a) { b } else { a }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::LoadGuard;

    #[test]
    fn avoids_the_loaded_worker() {
        let ws = crate::routing::test_workers(2);
        let _busy = LoadGuard::book(Arc::clone(&ws[0]), 0);
        let refs: Vec<_> = ws.iter().collect();
        for _ in 0..50 {
            assert_eq!(
                PowerOfTwo.pick(&RouteRequest::default(), &refs),
                Some(Pick::at(1))
            );
        }
    }
}
