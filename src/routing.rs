//! Choosing a worker. Each policy is a pure, synchronous pick over a snapshot of the workers.

pub mod power_of_two;
pub mod random;
pub mod round_robin;

use std::sync::Arc;

use crate::config::PolicyKind;
use crate::workers::Worker;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RouteError {
    #[error("no healthy worker is available")]
    NoHealthyWorker,
}

/// What a policy may look at about the request.
#[derive(Debug, Clone, Copy)]
pub struct RouteRequest<'a> {
    pub prompt_ids: &'a [u32],
}

pub trait Policy: Send + Sync {
    /// An index into `workers` (all of which are healthy candidates), or `None` when empty.
    fn pick(&self, req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<usize>;
}

pub fn build(kind: PolicyKind) -> Box<dyn Policy> {
    match kind {
        PolicyKind::RoundRobin => Box::new(round_robin::RoundRobin::default()),
        PolicyKind::Random => Box::new(random::Random),
        PolicyKind::PowerOfTwo => Box::new(power_of_two::PowerOfTwo),
    }
}

/// Healthy workers first; a policy never sees an excluded one.
pub fn select(
    policy: &dyn Policy,
    req: &RouteRequest<'_>,
    workers: &[Arc<Worker>],
) -> Result<Arc<Worker>, RouteError> {
    let healthy: Vec<&Arc<Worker>> = workers.iter().filter(|w| w.is_healthy()).collect();
    let i = policy
        .pick(req, &healthy)
        .ok_or(RouteError::NoHealthyWorker)?;
    healthy
        .get(i)
        .map(|w| Arc::clone(w))
        .ok_or(RouteError::NoHealthyWorker)
}

#[cfg(test)]
pub(crate) fn test_workers(n: usize) -> Vec<Arc<Worker>> {
    (0..n)
        .map(|i| {
            Arc::new(
                Worker::new(
                    crate::workers::WorkerId(i as u32),
                    &format!("http://127.0.0.1:{}", 1000 + i),
                )
                .unwrap(),
            )
        })
        .collect()
}
