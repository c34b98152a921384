//! Building prefill and decode steps.

use super::{Engine, Event, Running, Step, StepKind, TimingModel};

/// A full cache evicts 1/`EVICTION_BATCH` of its capacity beyond the shortfall ([`Engine::make_room`]).
const EVICTION_BATCH: usize = 64;

impl Engine {
    /// KV tokens neither occupied (tree + private) nor reserved.
    pub(super) fn free_tokens(&self) -> usize {
        self.cfg
            .kv_capacity_tokens
            .saturating_sub(self.radix.cached_tokens() + self.private_tokens + self.reserved_tokens)
    }

    /// Room for `need` tokens, evicting least recently used leaves when the free room is short;
    /// false when even evicting every unlocked leaf would not make it. It evicts a batch
    /// beyond the shortfall (1/`EVICTION_BATCH` of the capacity) because every eviction scans
    /// the whole tree for its leaves, as SGLang's does: evicting only the shortfall ran that scan
    /// once per admitted request as soon as the cache was full (73 % of a sim's CPU under unique
    /// prompts, which capped every non-streaming benchmark at the sims' rate).
    pub(super) fn make_room(&mut self, need: usize) -> bool {
        let free = self.free_tokens();
        if need <= free {
            return true;
        }
        if need > free + self.radix.evictable_tokens() {
            return false;
        }
        let batch = self.cfg.kv_capacity_tokens / EVICTION_BATCH;
        self.radix.evict(need - free + batch);
        true
    }

    /// A prefill batch: the chunked request first, then waiting requests FCFS
    /// while slots, the token budget and KV allow.
    pub(super) fn prefill_step(&mut self) -> Option<Step> {
        let can_admit =
            !self.waiting.is_empty() && self.running.len() < self.cfg.max_running_requests;
        if !self.chunked && !can_admit {
            return None;
        }
        let mut budget = self
            .cfg
            .max_prefill_tokens
            .min(self.cfg.chunked_prefill_size);
        let mut events = Vec::new();
        let mut new_tokens = 0usize;
        let mut attn = 0.0f64;
        let mut completed = 0usize;

        if self.chunked {
            if let Some(r) = self
                .running
                .iter_mut()
                .find(|r| r.kv_len < r.req.prompt_len)
            {
                let t = budget.min(r.req.prompt_len - r.kv_len);
                attn += TimingModel::attn_pairs(r.kv_len, t);
                r.kv_len += t;
                new_tokens += t;
                budget -= t;
                self.chunked = r.kv_len < r.req.prompt_len;
                completed += usize::from(!self.chunked);
            } else {
                self.chunked = false;
            }
            self.private_tokens += new_tokens;
            self.reserved_tokens -= new_tokens;
        }

        while budget > 0 && self.running.len() < self.cfg.max_running_requests {
            let Some(front) = self.waiting.front() else {
                break;
            };
            let prompt_len = front.prompt_len;
            let (cached, handle) = self.radix.match_prefix(&front.tokens[..prompt_len - 1]);
            self.radix.lock(handle);
            let need = front.tokens.len() - cached;
            if !self.make_room(need) {
                self.radix.unlock(handle);
                break;
            }
            let Some(req) = self.waiting.pop_front() else {
                break;
            };
            let t = budget.min(prompt_len - cached);
            attn += TimingModel::attn_pairs(cached, t);
            new_tokens += t;
            budget -= t;
            self.private_tokens += t;
            self.reserved_tokens += need - t;
            self.chunked = cached + t < prompt_len;
            completed += usize::from(!self.chunked);
            self.stats.prompt_tokens += prompt_len as u64;
            self.stats.cached_tokens += cached as u64;
            events.push(Event::Started {
                id: req.id,
                cached_tokens: cached,
            });
            self.running.push(Running {
                req,
                produced: 0,
                kv_len: cached + t,
                shared: cached,
                handle,
            });
        }

        if new_tokens == 0 {
            return None;
        }
        if completed > 0 {
            self.complete_prefills(&mut events);
        }
        let duration_us = self.cfg.timing.prefill_us(new_tokens, attn);
        self.stats.prefill_uncached += new_tokens as u64;
        self.stats.prefill_busy_us += duration_us;
        Some(Step {
            kind: StepKind::Prefill,
            duration_us,
            prefill_tokens: new_tokens,
            events,
        })
    }

    /// Requests whose prompt is now fully computed: cache the prompt, re-lock
    /// the deeper path, emit the first token (a prefill-only request ends here,
    /// with none).
    fn complete_prefills(&mut self, events: &mut Vec<Event>) {
        let mut finished_any = false;
        for r in &mut self.running {
            if r.produced > 0 || !r.prefilled() {
                continue;
            }
            let prompt = &r.req.tokens[..r.req.prompt_len];
            self.radix.insert(prompt);
            let (m, h) = self.radix.match_prefix(prompt);
            self.radix.lock(h);
            self.radix.unlock(r.handle);
            r.handle = h;
            self.private_tokens -= m - r.shared;
            r.shared = m;
            if r.output_len() == 0 {
                finished_any = true;
                events.push(Event::Token {
                    id: r.req.id,
                    produced: 0,
                    finished: true,
                });
                continue;
            }
            // The first output token.
            r.produced = 1;
            r.kv_len += 1;
            self.private_tokens += 1;
            self.reserved_tokens -= 1;
            self.stats.generated += 1;
            let finished = r.output_len() == 1;
            finished_any |= finished;
            events.push(Event::Token {
                id: r.req.id,
                produced: 1,
                finished,
            });
        }
        if finished_any {
            self.release_finished();
        }
    }

    /// Every running request produces one token, or with speculation a round's accepted
    /// tokens (at most what it has left).
    pub(super) fn decode_step(&mut self) -> Option<Step> {
        let (batch, context) = self
            .running
            .iter()
            .filter(|r| r.produced > 0)
            .fold((0usize, 0usize), |(b, c), r| (b + 1, c + r.kv_len));
        if batch == 0 {
            return None;
        }
        let spec = self.cfg.speculative;
        let factor = spec.map_or(1.0, |s| s.step_factor());
        let duration_us = self.cfg.timing.decode_us(batch, context) * factor;
        let mut events = Vec::with_capacity(batch);
        let mut finished_any = false;
        let mut tokens = 0usize;
        for r in self.running.iter_mut().filter(|r| r.produced > 0) {
            let left = r.output_len() - r.produced;
            let k = spec.map_or(1, |s| s.accepted(r.req.seed, r.produced).min(left));
            r.produced += k;
            r.kv_len += k;
            tokens += k;
            let finished = r.produced == r.output_len();
            finished_any |= finished;
            events.push(Event::Token {
                id: r.req.id,
                produced: r.produced,
                finished,
            });
        }
        self.private_tokens += tokens;
        self.reserved_tokens -= tokens;
        self.stats.generated += tokens as u64;
        self.stats.decode_busy_us += duration_us;
        self.stats
            .decode_log
            .record(tokens as u64, batch as u64, duration_us);
        if finished_any {
            self.release_finished();
        }
        Some(Step {
            kind: StepKind::Decode,
            duration_us,
            prefill_tokens: 0,
            events,
        })
    }

    /// Finished requests: cache prompt + output, then unlock and free.
    pub(super) fn release_finished(&mut self) {
        let done: Vec<Running> = self
            .running
            .extract_if(.., |r| r.prefilled() && r.produced == r.output_len())
            .collect();
        for r in done {
            self.radix.insert(&r.req.tokens);
            self.radix.unlock(r.handle);
            self.private_tokens -= r.kv_len - r.shared;
            self.reserved_tokens -= r.remaining();
            self.live.remove(&r.req.id);
        }
    }
}
