//! The decode role of prefill/decode disaggregation: a request whose prompt KV was computed by a
//! prefill worker and transferred here joins the running batch without a prefill step, holding
//! its first token (the prefill side's); from then on it decodes like any other request.

use super::{Engine, Event, NewRequest, Rejection, Request, Running, Step, StepKind};

impl Engine {
    /// Queues a request whose prompt KV (and first output token) arrived from a prefill worker.
    /// `cached_tokens` is what the prefill side found cached; the decode side reports it, as
    /// SGLang's decode does from the transferred metadata.
    pub fn submit_transferred(
        &mut self,
        req: NewRequest,
        cached_tokens: usize,
    ) -> Result<(), Rejection> {
        self.check_transferred(&req)?;
        let prompt_len = req.prompt.len();
        let mut tokens = req.prompt;
        tokens.extend_from_slice(&req.output);
        self.live.insert(req.id);
        self.transferred.push_back((
            Request {
                id: req.id,
                seed: self.spec_seed(&tokens),
                tokens,
                prompt_len,
            },
            cached_tokens,
        ));
        Ok(())
    }

    /// [`Engine::check`] for the decode role, which holds the prefill side's first token and so
    /// cannot take a prefill-only request.
    pub fn check_transferred(&self, req: &NewRequest) -> Result<(), Rejection> {
        if req.output.is_empty() {
            return Err(Rejection::EmptyOutput);
        }
        self.check(req)
    }

    /// Moves transferred requests into the running batch while slots and KV allow (FCFS, head
    /// of line): no compute, so a zero-length step that only carries their first tokens.
    pub(super) fn admit_transferred(&mut self) -> Option<Step> {
        let mut events = Vec::new();
        while self.running.len() < self.cfg.max_running_requests {
            let Some((front, _)) = self.transferred.front() else {
                break;
            };
            let need = front.tokens.len();
            if !self.make_room(need) {
                break;
            }
            let Some((req, cached_tokens)) = self.transferred.pop_front() else {
                break;
            };
            // The KV is private to the request (nothing shared with this worker's tree).
            let (_, root) = self.radix.match_prefix(&[]);
            let held = req.prompt_len + 1;
            self.private_tokens += held;
            self.reserved_tokens += need - held;
            self.stats.prompt_tokens += req.prompt_len as u64;
            self.stats.cached_tokens += cached_tokens as u64;
            self.stats.generated += 1;
            let id = req.id;
            let output_len = req.tokens.len() - req.prompt_len;
            events.push(Event::Started { id, cached_tokens });
            events.push(Event::Token {
                id,
                produced: 1,
                finished: output_len == 1,
            });
            self.running.push(Running {
                req,
                produced: 1,
                kv_len: held,
                shared: 0,
                handle: root,
            });
            if output_len == 1 {
                self.release_finished();
            }
        }
        if events.is_empty() {
            return None;
        }
        Some(Step {
            kind: StepKind::Decode,
            duration_us: 0.0,
            prefill_tokens: 0,
            events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EngineConfig, RequestId};
    use super::*;

    fn req(id: u64, prompt: usize, output: usize) -> NewRequest {
        NewRequest {
            id: RequestId(id),
            prompt: (0..prompt as u32).collect(),
            output: vec![7; output],
        }
    }

    /// A transferred prompt joins the batch without a prefill step: the decodes running
    /// beside it never wait behind its prompt (PD's point).
    #[test]
    fn a_transferred_request_joins_without_a_prefill_step() {
        let mut e = Engine::new(EngineConfig::default());
        e.submit_transferred(req(1, 4000, 3), 1000).unwrap();
        let admit = e.step().unwrap();
        assert_eq!(admit.duration_us, 0.0);
        assert_eq!(
            admit.events,
            vec![
                Event::Started {
                    id: RequestId(1),
                    cached_tokens: 1000
                },
                Event::Token {
                    id: RequestId(1),
                    produced: 1,
                    finished: false
                }
            ]
        );
        e.submit_transferred(req(2, 8000, 2), 0).unwrap();
        let mut kinds = Vec::new();
        while let Some(step) = e.step() {
            kinds.push(step.kind);
        }
        assert!(kinds.iter().all(|k| *k == StepKind::Decode), "{kinds:?}");
        assert!(e.is_idle());
        assert_eq!(e.loads().num_used_tokens, 0, "all KV released");
    }

    #[test]
    fn a_transferred_request_waits_for_kv() {
        let cfg = EngineConfig {
            kv_capacity_tokens: 100,
            ..EngineConfig::default()
        };
        let mut e = Engine::new(cfg);
        e.submit_transferred(req(1, 60, 10), 0).unwrap();
        e.submit_transferred(req(2, 60, 10), 0).unwrap();
        assert_eq!(e.step().unwrap().events.len(), 2, "only the first fits");
        assert_eq!(e.loads().num_waiting_reqs, 1);
        assert!(e.abort(RequestId(2)));
        assert_eq!(e.loads().num_waiting_reqs, 0);
    }
}
