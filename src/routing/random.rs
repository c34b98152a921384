//! A uniformly random worker.

use std::sync::Arc;

use rand::Rng;

use super::{Pick, Policy, RouteRequest};
use crate::workers::Worker;

#[derive(Debug)]
pub struct Random;

impl Policy for Random {
    fn pick(&self, _req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick> {
        (!workers.is_empty()).then(|| Pick::at(rand::rng().random_range(0..workers.len())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_every_worker_eventually() {
        let ws = crate::routing::test_workers(4);
        let refs: Vec<_> = ws.iter().collect();
        let mut seen = [false; 4];
        for _ in 0..400 {
            seen[Random.pick(&RouteRequest::default(), &refs).unwrap().index] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
