//! `cargo bench --bench tokenize`: chat templating + encoding at three prompt sizes on
//! Qwen2.5 (from the tokenizer's piece cache and from a fresh one), a multi-turn follow-up, and
//! the per-token cost of streaming detokenization.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on a broken setup

#[path = "common/allocator.rs"]
mod allocator;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use serde_json::json;
use std::hint::black_box;
use std::path::Path;
use switchboard::tokenize::{ChatTemplateInput, Tokenizer};

const PARAGRAPH: &str = "The gateway forwards OpenAI-compatible requests to SGLang workers, \
    renders the chat template, counts prompt tokens and streams the answer back. \
    Ünïcödé, 中文字符 and emoji 🦙 are mixed in to keep the byte-level path honest. ";

fn qwen() -> Tokenizer {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/assets/tokenizers/qwen2.5-0.5b-instruct"
    ));
    Tokenizer::from_dir(dir).expect("load qwen2.5")
}

/// A user message whose rendered prompt is about `target` tokens.
fn text_of_tokens(tok: &Tokenizer, target: usize) -> String {
    let per = tok.encode(PARAGRAPH, false).expect("encode").len();
    PARAGRAPH.repeat(target.div_ceil(per).max(1))
}

fn chat(c: &mut Criterion) {
    let tok = qwen();
    let mut g = c.benchmark_group("chat_template+encode");
    for target in [100usize, 1_000, 8_000] {
        let messages = vec![
            json!({"role": "system", "content": "You are a helpful assistant."}),
            json!({"role": "user", "content": text_of_tokens(&tok, target)}),
        ];
        let input = ChatTemplateInput::new(&messages);
        let n = tok.render_and_encode(&input).expect("render").len();
        g.throughput(Throughput::Elements(n as u64));
        // Warm: every piece of the prompt is in the tokenizer's cache (a repeated prompt).
        g.bench_with_input(BenchmarkId::new("warm", n), &input, |b, input| {
            b.iter(|| tok.render_and_encode(black_box(input)).expect("render"))
        });
        // Cold: a freshly loaded tokenizer whose cache holds only its start-up self-check.
        g.bench_with_input(BenchmarkId::new("cold", n), &input, |b, input| {
            b.iter_batched(
                qwen,
                // The tokenizer is returned so that dropping it is not timed.
                |fresh| {
                    let ids = fresh.render_and_encode(black_box(input)).expect("render");
                    (fresh, ids)
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// A question of about 100 tokens for the follow-up: ordinary words, few of them in `PARAGRAPH`.
const QUESTION: &str = "Thanks. Now compare that with how a reverse proxy such as nginx would \
    handle the same traffic: which of the steps above would still be needed, what would you \
    measure first if latency doubled overnight, and how should retries behave when a worker \
    restarts in the middle of a long answer? Please keep it short, list the three most important \
    differences, and give one concrete example for each of them, ticket";

/// Multi-turn follow-ups: the 8k-token conversation so far is cached (it was the previous
/// request) and a new user message is appended. `typical`: a ~100-token question whose words
/// were seen before except its ticket number (new every time, though Qwen's digits are cached one
/// by one); `novel`: 50 made-up words of letters only, all new to the cache (the worst case).
fn follow_up(c: &mut Criterion) {
    let tok = qwen();
    let mut history = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    for turn in 0..8 {
        let role = if turn % 2 == 0 { "user" } else { "assistant" };
        history.push(json!({"role": role, "content": text_of_tokens(&tok, 1_000)}));
    }
    let with = |content: String| {
        let mut msgs = history.clone();
        msgs.push(json!({"role": "user", "content": content}));
        msgs
    };
    tok.render_and_encode(&ChatTemplateInput::new(&with(format!("{QUESTION} 0"))))
        .expect("render");
    let mut g = c.benchmark_group("chat_template+encode/follow_up_8k");
    let mut serial = 0u64;
    let mut new_text = |novel: bool| {
        serial += 1;
        if novel {
            (0..50).map(|i| made_up_word(serial * 64 + i)).collect()
        } else {
            format!("{QUESTION} {serial}")
        }
    };
    for (label, novel) in [("typical", false), ("novel", true)] {
        let sample = new_text(novel);
        let new_tokens = tok.encode(&sample, false).expect("encode").len();
        g.bench_function(BenchmarkId::new(label, format!("+{new_tokens}")), |b| {
            b.iter_batched(
                || with(new_text(novel)),
                |msgs| {
                    tok.render_and_encode(&ChatTemplateInput::new(black_box(&msgs)))
                        .expect("render")
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// " " and seven letters, distinct for each `n` (splitmix64): no digits, which the cache would
/// hold one by one.
fn made_up_word(n: u64) -> String {
    let mut x = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let mut word = String::from(" ");
    for _ in 0..7 {
        word.push(char::from(b'a' + (x % 26) as u8));
        x /= 26;
    }
    word
}

fn detok(c: &mut Criterion) {
    let tok = qwen();
    let ids = tok
        .encode(&text_of_tokens(&tok, 1_000), false)
        .expect("encode");
    let mut g = c.benchmark_group("incremental_decode");
    g.throughput(Throughput::Elements(ids.len() as u64));
    for (label, stops) in [
        ("no_stop", vec![]),
        (
            "2_stops",
            vec!["<|endoftext|>".to_string(), "\n\nUser:".to_string()],
        ),
    ] {
        g.bench_function(label, |b| {
            b.iter(|| {
                let mut dec = tok.incremental_decoder(true, stops.clone());
                let mut n = 0usize;
                for id in &ids {
                    n += dec.push(std::slice::from_ref(id)).expect("push").text.len();
                }
                n + dec.finish().expect("finish").text.len()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, chat, follow_up, detok);
criterion_main!(benches);
