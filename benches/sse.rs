//! Per-chunk cost of the streaming relay's pure part: parse the worker's SSE bytes, read what
//! SGLang's cumulative `/generate` chunk adds (text and ids, as the gateway does), and encode the
//! OpenAI chat chunk the client gets.
//! (The syscalls around it are measured by the load benchmark.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on a broken setup

#[path = "common/allocator.rs"]
mod allocator;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use switchboard::relay::format::{Formatter, Kind};
use switchboard::stream::sse::SseParser;
use switchboard::upstream::generate::ChunkReader;

/// A 64-token SGLang stream in its default cumulative form, as one byte buffer.
fn sglang_stream(tokens: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut text, mut ids) = (String::new(), Vec::new());
    for i in 0..tokens {
        text.push_str(" word");
        ids.push(1000 + i as u32);
        let finish = if i + 1 == tokens {
            r#"{"type":"length","length":64}"#
        } else {
            "null"
        };
        let chunk = format!(
            r#"{{"text":"{text}","output_ids":{ids:?},"meta_info":{{"id":"abc","finish_reason":{finish},"prompt_tokens":32,"weight_version":"default","completion_tokens":{},"cached_tokens":0}}}}"#,
            i + 1
        );
        out.extend_from_slice(format!("data: {chunk}\n\n").as_bytes());
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

fn relay(c: &mut Criterion) {
    let tokens = 64;
    let wire = sglang_stream(tokens);
    let format = Formatter::new(
        Kind::Chat,
        "0123456789abcdef",
        Arc::from("smollm2-135m-instruct"),
        false,
    );
    let mut g = c.benchmark_group("sse_relay");
    g.throughput(Throughput::Elements(tokens as u64));
    g.bench_function("parse_decode_encode_64_chunks", |b| {
        b.iter_batched(
            || (SseParser::new(1 << 20), ChunkReader::default()),
            |(mut parser, mut received)| {
                parser.push(&wire);
                let (mut out_bytes, mut out) = (0usize, Vec::with_capacity(512));
                while let Ok(Some(ev)) = parser.next_event() {
                    if ev.is_done() {
                        break;
                    }
                    let chunk = received.read(&ev.data).expect("chunk");
                    let delta = chunk.text.unwrap_or_default();
                    format.text_chunk(&mut out, &delta, None);
                    out_bytes += out.len();
                    out.clear();
                }
                out_bytes
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, relay);
criterion_main!(benches);
