//! The gateway reads every streaming mode of SGLang's `/generate` (cumulative or delta `text`,
//! cumulative or delta `output_ids`, decided separately), so the client's text is the
//! completion once, whatever the worker's build.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::support::{self, scripted, MODEL};

fn chunk(text: &str, ids: &[u32], completion_tokens: u32, finish: bool) -> Value {
    let finish = finish.then(|| json!({"type": "length", "length": completion_tokens}));
    json!({"text": text, "output_ids": ids,
           "meta_info": {"prompt_tokens": 3, "completion_tokens": completion_tokens,
                         "cached_tokens": 0, "finish_reason": finish}})
}

/// The four scripts, picked by the request's `max_new_tokens` (1 to 4); each spells "Hello world".
fn script(mode: u64) -> Vec<Value> {
    match mode {
        // SGLang's default (0.5.9 and 0.5.23): both cumulative; text held back on one step.
        1 => vec![
            chunk("Hel", &[1], 1, false),
            chunk("Hel", &[1, 2], 2, false),
            chunk("Hello", &[1, 2, 3], 3, false),
            chunk("Hello world", &[1, 2, 3, 4], 4, true),
        ],
        // 0.5.23 `--incremental-streaming-output`: both deltas.
        2 => vec![
            chunk("Hel", &[1], 1, false),
            chunk("", &[2], 2, false),
            chunk("lo", &[3], 3, false),
            chunk(" world", &[4], 4, true),
        ],
        // 0.5.9 `--stream-output`: cumulative text, delta ids.
        3 => vec![
            chunk("Hel", &[1], 1, false),
            chunk("Hello", &[2], 2, false),
            chunk("Hello", &[3], 3, false),
            chunk("Hello world", &[4], 4, true),
        ],
        // Deltas whose id count matches `completion_tokens` (the first chunk carried none): the
        // old rule took that for cumulative output and cut the text so far off the next delta.
        _ => vec![
            chunk("Hel", &[], 1, false),
            chunk("lo", &[1, 2], 2, false),
            chunk(" world", &[3, 4], 4, true),
        ],
    }
}

#[tokio::test]
async fn every_sglang_streaming_mode_gives_the_text_once() {
    let reply: scripted::Reply = Arc::new(|req: &Value| {
        let mode = req["sampling_params"]["max_new_tokens"]
            .as_u64()
            .unwrap_or(0);
        scripted::body(script(mode), scripted::End::Done)
    });
    let (worker, _) = scripted::worker(reply).await;
    let gw = support::gateway(
        &[],
        &["--worker-urls", &worker, "--load-poll-interval-ms", "0"],
    )
    .await;
    support::ready(&gw).await;
    let mut got = Vec::new();
    for mode in 1..=4 {
        let body = json!({"model": MODEL, "max_tokens": mode, "stream": true,
                          "messages": [{"role": "user", "content": "hi"}]});
        let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200, "mode {mode}");
        let (content, done) = support::chat_stream_content(&r.text().await.expect("body"));
        got.push((mode, content, done));
    }
    let want: Vec<_> = (1..=4)
        .map(|m| (m, "Hello world".to_owned(), true))
        .collect();
    assert_eq!(got, want, "(mode, client's text, [DONE])");
}
