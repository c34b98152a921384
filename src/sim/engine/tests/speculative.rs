//! Decode steps with speculation: several tokens per sequence per step, the round's cost, and
//! the acceptance figures.

use super::super::speculative::{SpecAlgorithm, Speculative};
use super::*;

fn spec_engine(steps: usize, topk: usize, draft: usize) -> Engine {
    Engine::new(EngineConfig {
        speculative: Some(Speculative::new(SpecAlgorithm::Eagle, steps, topk, draft)),
        ..cfg(TimingModel::default())
    })
}

#[test]
fn a_round_accepts_one_to_steps_plus_one_tokens_per_sequence() {
    let mut e = spec_engine(3, 1, 4);
    let outputs = [(0u64, 200usize), (1, 7), (2, 1)];
    for (id, out) in outputs {
        e.submit(req(id, toks(id as u32 * 100, 16), out))
            .expect("submit");
    }
    let mut produced: HashMap<RequestId, usize> = HashMap::new();
    let mut multi = false;
    let spec = e.config().speculative.expect("speculative");
    while let Some(step) = e.step() {
        check(&e);
        if step.kind == StepKind::Decode {
            let batch = step.events.len();
            let plain = e.config().timing.decode_us(batch, 0);
            assert!(step.duration_us >= plain * spec.step_factor());
        }
        for ev in step.events {
            if let Event::Token {
                id,
                produced: p,
                finished,
            } = ev
            {
                let before = produced.insert(id, p).unwrap_or(0);
                let k = p - before;
                assert!((1..=4).contains(&k), "{k} tokens in one round");
                multi |= k > 1;
                let want = outputs[id.0 as usize].1;
                assert!(p <= want);
                assert_eq!(finished, p == want);
            }
        }
    }
    assert!(multi, "some round accepted several tokens");
    for (id, out) in outputs {
        assert_eq!(
            produced[&RequestId(id)],
            out,
            "request {id} got all its tokens"
        );
    }
    let stats = e.decode_stats();
    let avg = stats.avg_accept_length.expect("an average");
    assert!(avg > 1.5 && avg <= 4.0, "{avg}");
    assert_eq!(e.loads().total_generated_tokens, 208);
}

#[test]
fn without_speculation_every_round_is_one_token_and_no_accept_length() {
    let mut e = Engine::new(cfg(TimingModel::default()));
    e.submit(req(0, toks(0, 8), 20)).expect("submit");
    while let Some(step) = e.step() {
        for ev in step.events {
            if let Event::Token { produced, .. } = ev {
                assert!(produced <= 20);
            }
        }
    }
    let stats = e.decode_stats();
    assert_eq!(stats.avg_accept_length, None);
    assert!(stats.recent_tokens_per_s > 0.0);
}

/// Same requests, same rounds, however they are batched (so two runs of a benchmark report the
/// same accept length).
#[test]
fn draws_do_not_depend_on_the_batch() {
    let rounds = |others: usize| {
        let mut e = spec_engine(5, 3, 8);
        e.submit(req(0, toks(0, 32), 300)).expect("submit");
        for i in 1..=others {
            e.submit(req(i as u64, toks(10_000 * i as u32, 32), 300))
                .expect("submit");
        }
        let mut seen = Vec::new();
        while let Some(step) = e.step() {
            for ev in step.events {
                if let Event::Token {
                    id: RequestId(0),
                    produced,
                    ..
                } = ev
                {
                    seen.push(produced);
                }
            }
        }
        seen
    };
    assert_eq!(rounds(0), rounds(5));
}
