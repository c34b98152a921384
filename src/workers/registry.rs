//! The set of workers. Requests read it through an `Arc` snapshot; membership changes (static
//! list at start, `POST/DELETE /workers`) swap in a new list. A removed worker's in-flight
//! requests keep their `Arc<Worker>` and finish normally.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

use super::{Worker, WorkerId};

#[derive(Debug, Default)]
pub struct Registry {
    workers: RwLock<Arc<[Arc<Worker>]>>,
    /// Shared by the registries of one gateway's models, so a worker id names one worker.
    next_id: Arc<AtomicU32>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    #[error("{0}")]
    InvalidUrl(String),
    #[error("worker {0} is already registered")]
    Duplicate(String),
}

impl Registry {
    pub fn new(urls: &[String]) -> Result<Registry, RegistryError> {
        let registry = Registry::default();
        for url in urls {
            registry.add(url)?;
        }
        Ok(registry)
    }

    /// A registry whose ids come from `ids`, shared with other registries.
    pub fn sharing_ids(urls: &[String], ids: Arc<AtomicU32>) -> Result<Registry, RegistryError> {
        let registry = Registry {
            next_id: ids,
            ..Registry::default()
        };
        for url in urls {
            registry.add(url)?;
        }
        Ok(registry)
    }

    pub fn add(&self, url: &str) -> Result<Arc<Worker>, RegistryError> {
        let id = WorkerId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let worker = Arc::new(Worker::new(id, url).map_err(RegistryError::InvalidUrl)?);
        let mut guard = self.workers.write().unwrap_or_else(|e| e.into_inner());
        if guard.iter().any(|w| w.url() == worker.url()) {
            return Err(RegistryError::Duplicate(worker.url().to_owned()));
        }
        let mut list: Vec<Arc<Worker>> = guard.iter().cloned().collect();
        list.push(Arc::clone(&worker));
        *guard = list.into();
        Ok(worker)
    }

    pub fn remove(&self, id: WorkerId) -> Option<Arc<Worker>> {
        let mut guard = self.workers.write().unwrap_or_else(|e| e.into_inner());
        let removed = guard.iter().find(|w| w.id == id).cloned()?;
        *guard = guard
            .iter()
            .filter(|w| w.id != id)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        Some(removed)
    }

    pub fn snapshot(&self) -> Arc<[Arc<Worker>]> {
        Arc::clone(&self.workers.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn ids(&self) -> Vec<WorkerId> {
        self.snapshot().iter().map(|w| w.id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_remove_and_duplicates() {
        let r = Registry::new(&["http://127.0.0.1:1".into()]).unwrap();
        let w = r.add("http://127.0.0.1:2/").unwrap();
        assert_eq!(w.url(), "http://127.0.0.1:2");
        assert!(matches!(
            r.add("http://127.0.0.1:2"),
            Err(RegistryError::Duplicate(_))
        ));
        assert!(matches!(
            r.add("ftp://x"),
            Err(RegistryError::InvalidUrl(_))
        ));
        assert_eq!(r.snapshot().len(), 2);
        assert!(r.remove(w.id).is_some());
        assert!(r.remove(w.id).is_none());
        assert_eq!(r.ids(), vec![WorkerId(0)]);
    }
}
