//! `cargo bench --bench tokenize`: chat templating + encoding at three prompt
//! sizes on Qwen2.5, and the per-token cost of streaming detokenization.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
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
        g.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
            b.iter(|| tok.render_and_encode(black_box(input)).expect("render"))
        });
    }
    g.finish();
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

criterion_group!(benches, chat, detok);
criterion_main!(benches);
