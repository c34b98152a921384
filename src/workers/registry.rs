//! The set of workers and their live state. Requests read it lock-free through an `Arc` snapshot.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use axum::http::Uri;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(pub u32);

#[derive(Debug)]
pub struct Worker {
    pub id: WorkerId,
    /// Base URL without a trailing slash.
    pub url: String,
    /// Parsed once so building a request URI is a concatenation.
    pub authority: String,
    pub scheme: &'static str,
    healthy: AtomicBool,
    in_flight: AtomicUsize,
    /// Prefill tokens of requests that have not produced their first token yet.
    pending_prefill: AtomicU64,
    /// The engine's own figures from its last `/v1/loads` answer.
    engine_running: AtomicU64,
    engine_waiting: AtomicU64,
    engine_waiting_uncached: AtomicU64,
}

/// What the worker's engine last reported about itself (zeros until it first answers, and for
/// engines without `/v1/loads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineLoad {
    pub running_requests: u64,
    pub waiting_requests: u64,
    /// Prompt tokens queued for prefill that its cache does not already hold.
    pub waiting_uncached_tokens: u64,
}

impl Worker {
    pub fn new(id: WorkerId, url: &str) -> Result<Worker, String> {
        super::validate_url(url)?;
        let url = url.trim_end_matches('/').to_owned();
        let uri: Uri = url.parse().map_err(|e| format!("{e}"))?;
        let scheme = if uri.scheme_str() == Some("https") {
            "https"
        } else {
            "http"
        };
        let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        Ok(Worker {
            id,
            url,
            authority,
            scheme,
            // Unknown until the first health check answers.
            healthy: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            pending_prefill: AtomicU64::new(0),
            engine_running: AtomicU64::new(0),
            engine_waiting: AtomicU64::new(0),
            engine_waiting_uncached: AtomicU64::new(0),
        })
    }

    pub fn uri(&self, path: &str) -> Result<Uri, axum::http::Error> {
        Uri::builder()
            .scheme(self.scheme)
            .authority(self.authority.as_str())
            .path_and_query(path)
            .build()
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Relaxed);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn pending_prefill(&self) -> u64 {
        self.pending_prefill.load(Ordering::Relaxed)
    }

    pub fn engine_load(&self) -> EngineLoad {
        EngineLoad {
            running_requests: self.engine_running.load(Ordering::Relaxed),
            waiting_requests: self.engine_waiting.load(Ordering::Relaxed),
            waiting_uncached_tokens: self.engine_waiting_uncached.load(Ordering::Relaxed),
        }
    }

    pub fn set_engine_load(&self, load: EngineLoad) {
        self.engine_running
            .store(load.running_requests, Ordering::Relaxed);
        self.engine_waiting
            .store(load.waiting_requests, Ordering::Relaxed);
        self.engine_waiting_uncached
            .store(load.waiting_uncached_tokens, Ordering::Relaxed);
    }

    pub(super) fn book(&self, prefill_tokens: u64) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.pending_prefill
            .fetch_add(prefill_tokens, Ordering::Relaxed);
    }

    pub(super) fn release_prefill(&self, prefill_tokens: u64) {
        self.pending_prefill
            .fetch_sub(prefill_tokens, Ordering::Relaxed);
    }

    pub(super) fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// All workers; membership changes swap in a new list.
#[derive(Debug, Default)]
pub struct Registry {
    workers: RwLock<Arc<[Arc<Worker>]>>,
    next_id: AtomicU64,
}

impl Registry {
    pub fn new(urls: &[String]) -> Result<Registry, String> {
        let registry = Registry::default();
        for url in urls {
            registry.add(url)?;
        }
        Ok(registry)
    }

    pub fn add(&self, url: &str) -> Result<Arc<Worker>, String> {
        let id = WorkerId(self.next_id.fetch_add(1, Ordering::Relaxed) as u32);
        let worker = Arc::new(Worker::new(id, url)?);
        let mut guard = self.workers.write().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<Arc<Worker>> = guard.iter().cloned().collect();
        list.push(Arc::clone(&worker));
        *guard = list.into();
        Ok(worker)
    }

    pub fn snapshot(&self) -> Arc<[Arc<Worker>]> {
        Arc::clone(&self.workers.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn any_healthy(&self) -> bool {
        self.snapshot().iter().any(|w| w.is_healthy())
    }
}
