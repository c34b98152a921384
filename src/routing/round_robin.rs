//! Each worker in turn.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{Pick, Policy, RouteRequest};
use crate::workers::Worker;

#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Policy for RoundRobin {
    fn pick(&self, _req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick> {
        if workers.is_empty() {
            return None;
        }
        Some(Pick::at(
            self.next.fetch_add(1, Ordering::Relaxed) % workers.len(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_through_workers() {
        let ws = crate::routing::test_workers(3);
        let refs: Vec<_> = ws.iter().collect();
        let p = RoundRobin::default();
        let req = RouteRequest::default();
        let picks: Vec<_> = (0..6).map(|_| p.pick(&req, &refs).unwrap().index).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(p.pick(&req, &[]), None);
    }
}
