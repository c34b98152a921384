//! Runs the pure engine model in real time: one task steps the engine, sleeps for the step's
//! modelled duration (scaled), then hands each request its new tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

mod locked;

use super::engine::{DecodeStats, Engine, Event, LoadSnapshot, NewRequest, Rejection, RequestId};
use super::gauges::{GaugeCadence, Reported};
use super::kv_events::publisher::EventSink;
use locked::{Core, Subscriber};

/// What a waiting handler hears about its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Started {
        cached_tokens: usize,
    },
    Tokens {
        produced: usize,
        finished: bool,
    },
    Aborted,
    /// Ended by the scheduler with an HTTP status (a failed KV transfer, in PD).
    Failed {
        message: String,
        status: u16,
    },
}

/// What a second live request with the same rid does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameRid {
    /// Refused (0.5.23: `Duplicate request ID detected`).
    Refuse,
    /// Takes the rid over; the first request's client hears nothing more (0.5.9 overwrites
    /// `rid_to_state[rid]`).
    Orphan,
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Engine(#[from] Rejection),
    #[error("Duplicate request ID detected: {0}")]
    DuplicateRid(String),
}

pub struct Driver {
    core: Mutex<Core>,
    wake: Notify,
    time_scale: f64,
}

/// A submitted request. Dropping it before the request finished aborts it in the engine, which
/// frees its slot, as a client disconnect does in SGLang.
pub struct Ticket {
    driver: Arc<Driver>,
    id: RequestId,
    pub events: mpsc::UnboundedReceiver<Progress>,
}

impl Ticket {
    pub fn id(&self) -> RequestId {
        self.id
    }

    pub fn driver(&self) -> &Arc<Driver> {
        &self.driver
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut core = self.driver.lock();
        if core.subscribers.remove(&self.id).is_some() {
            core.engine.abort(self.id);
        }
        // An orphan's client leaving makes 0.5.9's front end call `abort_request(rid)`: the rid
        // is live (its new owner's), so the scheduler aborts every request under it, the new
        // owner too (`tokenizer_manager.py::create_abort_task`, `_wait_one_response`).
        if let Some(orphan) = core.orphans.remove(&self.id) {
            core.engine.abort(self.id);
            core.abort_by_rid(&orphan.rid, false);
        }
    }
}

impl Driver {
    /// Starts the stepping task on the current runtime.
    pub fn start(engine: Engine, time_scale: f64) -> Arc<Driver> {
        let core = Core {
            engine,
            subscribers: HashMap::new(),
            orphans: HashMap::new(),
            next_id: 0,
            kv_events: None,
            gauges: None,
        };
        let driver = Arc::new(Driver {
            core: Mutex::new(core),
            wake: Notify::new(),
            time_scale,
        });
        tokio::spawn(Arc::clone(&driver).run());
        driver
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn submit(
        self: &Arc<Self>,
        rid: &str,
        prompt: Vec<u32>,
        output: Vec<u32>,
        same_rid: SameRid,
    ) -> Result<Ticket, SubmitError> {
        self.register(rid, same_rid, |engine, id| {
            engine.submit(NewRequest { id, prompt, output })
        })
    }

    /// Registers a request whose prompt KV is still to arrive from a prefill worker (PD decode
    /// role): checked now, but the engine sees it only at [`Driver::admit_transferred`].
    pub fn submit_awaiting_kv(
        self: &Arc<Self>,
        rid: &str,
        prompt: &[u32],
        output: &[u32],
        same_rid: SameRid,
    ) -> Result<Ticket, SubmitError> {
        self.register(rid, same_rid, |engine, id| {
            engine.check_transferred(&NewRequest {
                id,
                prompt: prompt.to_vec(),
                output: output.to_vec(),
            })
        })
    }

    /// The KV of a registered request arrived: it joins the engine's transferred queue. False
    /// if its client is gone (or the engine refused it).
    pub fn admit_transferred(
        &self,
        ticket_id: RequestId,
        prompt: Vec<u32>,
        output: Vec<u32>,
        cached_tokens: usize,
    ) -> bool {
        let admitted = {
            let mut core = self.lock();
            if !core.subscribers.contains_key(&ticket_id) {
                return false;
            }
            let req = NewRequest {
                id: ticket_id,
                prompt,
                output,
            };
            core.engine.submit_transferred(req, cached_tokens).is_ok()
        };
        self.wake.notify_one();
        admitted
    }

    /// Ends a registered request with an HTTP status before it reached the engine's batch.
    pub fn fail(&self, ticket_id: RequestId, message: String, status: u16) {
        let mut core = self.lock();
        core.engine.abort(ticket_id);
        if let Some(sub) = core.subscribers.remove(&ticket_id) {
            let _ = sub.tx.send(Progress::Failed { message, status });
        }
    }

    fn register(
        self: &Arc<Self>,
        rid: &str,
        same_rid: SameRid,
        enter: impl FnOnce(&mut Engine, RequestId) -> Result<(), Rejection>,
    ) -> Result<Ticket, SubmitError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = {
            let mut core = self.lock();
            let live = core
                .subscribers
                .iter()
                .find(|(_, s)| s.rid == rid)
                .map(|(id, _)| *id);
            if let Some(first) = live {
                if same_rid == SameRid::Refuse {
                    return Err(SubmitError::DuplicateRid(rid.to_owned()));
                }
                if let Some(sub) = core.subscribers.remove(&first) {
                    core.orphans.insert(first, sub);
                }
            }
            let id = RequestId(core.next_id);
            core.next_id += 1;
            enter(&mut core.engine, id)?;
            core.subscribers.insert(
                id,
                Subscriber {
                    rid: rid.to_owned(),
                    tx,
                },
            );
            id
        };
        tracing::debug!(id = id.0, "request admitted");
        self.wake.notify_one();
        Ok(Ticket {
            driver: Arc::clone(self),
            id,
            events: rx,
        })
    }

    /// SGLang's front end passes an abort on only when that exact rid is live
    /// (`TokenizerManager.abort_request`); the scheduler then matches by prefix
    /// (`Scheduler.abort_request`), which also ends `n > 1` sub-requests and 0.5.9's orphans.
    pub fn abort_by_rid(&self, rid_prefix: &str, all: bool) -> usize {
        self.lock().abort_by_rid(rid_prefix, all)
    }

    pub fn loads(&self) -> LoadSnapshot {
        self.lock().engine.loads()
    }

    /// The engine's decode figures, its throughput in wall-clock tokens per second.
    pub fn decode_stats(&self) -> DecodeStats {
        let mut stats = self.lock().engine.decode_stats();
        if self.time_scale > 0.0 {
            stats.recent_tokens_per_s /= self.time_scale;
        }
        stats
    }

    pub fn flush_cache(&self) -> bool {
        let mut core = self.lock();
        let flushed = core.engine.flush_cache();
        core.publish_kv_events();
        flushed
    }

    /// Follows SGLang's stats logging from now on (`--enable-metrics`): the load gauges change
    /// only when the scheduler would report them (`sim::gauges`).
    pub fn report_gauges(&self, version: super::version::SglangVersion) {
        self.lock().gauges = Some(GaugeCadence::new(version, std::time::Instant::now()));
    }

    /// The load gauges as last reported (the idle check runs first); `None` unless
    /// [`Driver::report_gauges`] was called.
    pub fn reported_gauges(&self) -> Option<Reported> {
        let mut core = self.lock();
        let core = &mut *core;
        let gauges = core.gauges.as_mut()?;
        if core.engine.is_idle() {
            gauges.idle(&core.engine.loads(), std::time::Instant::now());
        }
        Some(gauges.reported())
    }

    /// Records the cache's KV events from now on and hands them to `sink` after each step.
    pub fn publish_kv_events(&self, sink: EventSink) {
        let mut core = self.lock();
        core.engine.record_kv_events();
        core.kv_events = Some(sink);
    }

    async fn run(self: Arc<Self>) {
        let mut clock = Instant::now();
        let mut since_yield = 0u32;
        loop {
            let step = {
                let mut core = self.lock();
                let step = core.engine.step();
                core.publish_kv_events();
                if let Some(step) = &step {
                    core.report_gauges(step);
                }
                step
            };
            if let Some(step) = &step {
                log_step(step);
            }
            let Some(step) = step else {
                self.wake.notified().await;
                clock = Instant::now();
                continue;
            };
            let nanos = step.duration_us * 1000.0 * self.time_scale;
            if nanos >= 1.0 {
                // Sleep to a running deadline so sub-millisecond steps keep their average rate
                // despite the timer's granularity.
                clock += Duration::from_nanos(nanos as u64);
                let now = Instant::now();
                if clock > now {
                    tokio::time::sleep_until(clock).await;
                } else if now - clock > Duration::from_millis(50) {
                    clock = now; // fell far behind (overloaded machine): don't burst to catch up
                }
            }
            self.deliver(step.events);
            since_yield += 1;
            if since_yield >= 8 {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
        }
    }

    fn deliver(&self, events: Vec<Event>) {
        let mut core = self.lock();
        for ev in events {
            let (id, progress) = match ev {
                Event::Started { id, cached_tokens } => (id, Progress::Started { cached_tokens }),
                Event::Token {
                    id,
                    produced,
                    finished,
                } => (id, Progress::Tokens { produced, finished }),
            };
            let finished = matches!(progress, Progress::Tokens { finished: true, .. });
            if let Some(sub) = core.subscribers.get(&id) {
                let _ = sub.tx.send(progress);
            }
            if finished {
                core.subscribers.remove(&id);
            }
        }
    }
}

/// With `--log-level switchboard::sim::driver=debug`: what each step does. With each request's
/// admission, how a load's arrivals fall into prefill batches (how the closed-loop benchmarks'
/// cohorts split was read from these).
fn log_step(step: &super::engine::Step) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let (mut started, mut finished) = (0, 0);
    for event in &step.events {
        match event {
            Event::Started { .. } => started += 1,
            Event::Token { finished: true, .. } => finished += 1,
            Event::Token { .. } => {}
        }
    }
    tracing::debug!(kind = ?step.kind, started, finished, duration_us = step.duration_us, "step");
}
