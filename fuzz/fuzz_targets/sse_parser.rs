//! The SSE parser against arbitrary bytes cut at arbitrary points: it must never panic, and
//! (within its size limit) chunking must not change which events come out.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard::stream::sse::{SseEvent, SseParser};

/// Feeds `wire` in the given chunks; `None` once the parser reports an oversized event.
fn run(limit: usize, wire: &[u8], cuts: &[usize]) -> Option<Vec<SseEvent>> {
    let mut p = SseParser::new(limit);
    let mut out = Vec::new();
    let mut last = 0;
    for &c in cuts.iter().chain([&wire.len()]) {
        p.push(&wire[last..c]);
        last = c;
        loop {
            match p.next_event() {
                Ok(Some(ev)) => out.push(ev),
                Ok(None) => break,
                Err(_) => return None,
            }
        }
    }
    out.extend(p.finish());
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    // First byte: how many cut points; then that many bytes pick them; the rest is the stream.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 16).min(rest.len());
    let (cut_bytes, wire) = rest.split_at(n);
    let mut cuts: Vec<usize> = cut_bytes
        .iter()
        .map(|&b| usize::from(b) * wire.len() / 255)
        .collect();
    cuts.sort_unstable();

    // A limit larger than any input: the error path is never taken, so results must agree.
    let whole = run(1 << 20, wire, &[]);
    let chunked = run(1 << 20, wire, &cuts);
    // (No check on `\r` inside data: the parser takes `\n` and `\r\n` as line ends, not a
    // lone `\r`, which no LLM server sends; so `data: a\r\r\n` legitimately keeps one `\r`.)
    assert_eq!(whole, chunked, "chunking changed the events");
    // A tiny limit: oversized events must be reported, never panic or grow without bound.
    let _ = run(8, wire, &cuts);
});
