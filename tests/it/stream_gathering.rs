//! A stream whose worker is ahead of the gateway (several of its chunks in one read) reaches the
//! client in fewer writes than tokens: the chunks that are ready together go out together
//! (`relay::pump`), and the client's text is the same.

use std::sync::Arc;

use axum::body::Bytes;
use serde_json::{json, Value};

use crate::support::{self, scripted, MODEL};

#[tokio::test]
async fn tokens_already_read_from_the_worker_go_to_the_client_together() {
    gathered(&[]).await;
}

/// The same on a gateway whose tasks all run on one thread (`--worker-threads 1`).
#[tokio::test]
async fn tokens_already_read_go_together_on_one_thread() {
    gathered(&["--worker-threads", "1"]).await;
}

async fn gathered(flags: &[&str]) {
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    let answer = "one two three four five six seven eight nine ten eleven twelve thirteen \
                  fourteen fifteen sixteen seventeen eighteen nineteen twenty";
    let ids = tok.encode(answer, false).expect("encode");
    let chunks = scripted::cumulative(&tok, &ids, "NEVER", true);
    let events = chunks.len();
    // The whole stream in one write: the gateway reads every chunk at once (written one by
    // one, they would reach a gateway that keeps up one by one).
    let mut whole: Vec<u8> = chunks.iter().flat_map(scripted::event).collect();
    whole.extend_from_slice(b"data: [DONE]\n\n");
    let whole = Bytes::from(whole);
    let reply: scripted::Reply = Arc::new(move |_: &Value| {
        Box::pin(futures_util::stream::once(std::future::ready(Ok(
            whole.clone()
        ))))
    });
    let (worker, _) = scripted::worker(reply).await;
    let mut args = vec!["--worker-urls", worker.as_str()];
    args.extend_from_slice(flags);
    let gw = support::gateway(&[], &args).await;
    support::ready(&gw).await;
    let body = json!({"model": MODEL, "max_tokens": ids.len(), "stream": true,
                      "messages": [{"role": "user", "content": "count"}]});
    let mut r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    // Each piece the client reads is one chunk of the gateway's chunked response.
    let (mut writes, mut text) = (0, String::new());
    while let Some(piece) = r.chunk().await.expect("body") {
        writes += 1;
        text.push_str(&String::from_utf8_lossy(&piece));
    }
    let (content, done) = support::chat_stream_content(&text);
    assert_eq!((content.as_str(), done), (answer, true));
    assert!(
        writes * 2 <= events,
        "{events} worker chunks reached the client in {writes} writes"
    );
}
