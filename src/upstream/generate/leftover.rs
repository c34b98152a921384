//! A stream whose client left: what the worker still generates until our abort lands is
//! counted, and its body read to the end so its connection goes back to the pool.

use http_body_util::BodyExt;

use super::GenerateStream;
use crate::protocol::sglang::GenerateChunk;
use crate::stream::sse::SseParser;
use crate::upstream::LEFTOVER_WAIT;

impl GenerateStream {
    /// The client left: keeps reading what the worker still sends until our abort lands (at
    /// most `LEFTOVER_WAIT`), adding the tokens it generated for nobody to `counter`. Reading
    /// the body to its end also lets the connection go back to the pool.
    pub fn count_leftover(&mut self, counter: prometheus::IntCounter) {
        if self.finished {
            return;
        }
        let Some(mut body) = self.body.take() else {
            return;
        };
        let mut parser = std::mem::replace(&mut self.parser, SseParser::new(0));
        let received = self.completion_tokens;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut last = received;
            let read = async {
                loop {
                    while let Ok(Some(ev)) = parser.next_event() {
                        if ev.is_done() {
                            return;
                        }
                        if let Ok(chunk) = serde_json::from_slice::<GenerateChunk>(&ev.data) {
                            last = last.max(chunk.meta_info.completion_tokens);
                        }
                    }
                    match body.frame().await {
                        Some(Ok(frame)) => {
                            if let Ok(data) = frame.into_data() {
                                parser.push(&data);
                            }
                        }
                        _ => return,
                    }
                }
            };
            let _ = tokio::time::timeout(LEFTOVER_WAIT, read).await;
            counter.inc_by(u64::from(last.saturating_sub(received)));
        });
    }
}
