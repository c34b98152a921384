//! The models behind the gateway, looked up by a request's `model`. Each is served on its own:
//! its tokenizer and limits ([`Model`]), and its own relay — workers, policy, prefix index, load,
//! and metrics under its `model` label. Without `[[models]]` there is exactly one.

use std::sync::Arc;

use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::relay::Relay;
use crate::routing::Router;
use crate::workers::{Worker, WorkerId};

/// One model and the workers that serve it.
pub struct Served {
    pub model: Model,
    /// Its exchange with its own workers (router, tokenizer, metrics).
    pub relay: Arc<Relay>,
}

impl Served {
    pub fn router(&self) -> &Arc<Router> {
        &self.relay.router
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.relay.metrics
    }
}

/// Every model, in the order configured (the first is the default where a request names none).
pub struct Models {
    list: Vec<Arc<Served>>,
}

impl Models {
    pub fn new(first: Served, others: Vec<Served>) -> Models {
        let list = std::iter::once(first).chain(others).map(Arc::new).collect();
        Models { list }
    }

    /// The model a request names (a name, an alias, or an id learned from a worker); a name
    /// no model answers to is a 404 `model_not_found`. A few models: a scan is the fastest.
    pub fn find(&self, name: &str) -> Result<&Arc<Served>, GatewayError> {
        self.list
            .iter()
            .find(|s| s.model.serves(name))
            .ok_or_else(|| GatewayError::ModelNotFound(name.to_owned()))
    }

    /// Where a request that names no model goes (`/generate` without `model`), and what
    /// `/model_info` describes: the first model.
    pub fn default_model(&self) -> &Arc<Served> {
        // `new` takes a first model: the list is never empty.
        &self.list[0]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Served>> {
        self.list.iter()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The model a worker that reports these model ids serves: one whose name or alias it
    /// reports, else the one its ids match after dropping paths and case; `None` when no model,
    /// or more than one, matches loosely.
    pub fn for_worker(&self, ids: &[String]) -> Option<&Arc<Served>> {
        let exact = self
            .list
            .iter()
            .find(|s| ids.iter().any(|id| s.model.serves(id)));
        if exact.is_some() {
            return exact;
        }
        let mut loose = self
            .list
            .iter()
            .filter(|s| ids.iter().any(|id| s.model.answers_to(id)));
        match (loose.next(), loose.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }

    /// A worker by id, whichever model it serves (ids are unique across models).
    pub fn worker(&self, id: WorkerId) -> Option<(&Arc<Served>, Arc<Worker>)> {
        self.list.iter().find_map(|s| {
            let worker = s
                .router()
                .registry()
                .snapshot()
                .iter()
                .find(|w| w.id == id)
                .cloned()?;
            Some((s, worker))
        })
    }
}
