//! A chat chunk that carries only content (nearly every chunk of a chat stream), written from a
//! frame rendered once per stream: its id, model and the rest are the same in every chunk, so
//! only the content needs escaping each time. The frame is cut from a chunk serialised the
//! ordinary way, around its empty content, so the bytes are the same as that way's.

/// An SSE chat chunk event without its content string.
pub struct ContentFrame {
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl ContentFrame {
    /// From the event the ordinary way writes for an empty content. The last `"content":""` is
    /// the delta's: in the id or the model name a quote would be escaped.
    pub fn cut(event: &[u8]) -> Option<ContentFrame> {
        const EMPTY: &[u8] = br#""content":"""#;
        let at = memchr::memmem::rfind(event, EMPTY)? + EMPTY.len() - 2;
        Some(ContentFrame {
            head: event.get(..at)?.to_vec(),
            tail: event.get(at + 2..)?.to_vec(),
        })
    }

    pub fn write(&self, out: &mut Vec<u8>, content: &str) {
        out.extend_from_slice(&self.head);
        // A string into a Vec cannot fail to serialise.
        let _ = serde_json::to_writer(&mut *out, content);
        out.extend_from_slice(&self.tail);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{content_delta, Formatter, Kind};

    #[test]
    fn content_chunks_are_the_bytes_the_ordinary_way_writes() {
        let texts = [
            "",
            "a",
            " two words",
            "\"q\" \\ \n\t\u{1}",
            "é😀",
            "\"content\":\"\"",
        ];
        for model in ["smollm2", "a \"quoted\" \"content\":\"\" model"] {
            for index in [0, 3] {
                let f = Formatter::new(Kind::Chat, "rid", Arc::from(model), false)
                    .for_choice(index, None);
                for text in texts {
                    let (mut fast, mut ordinary) = (Vec::new(), Vec::new());
                    f.text_chunk(&mut fast, text, None);
                    f.chat_chunk(&mut ordinary, content_delta(text), None);
                    assert_eq!(
                        String::from_utf8_lossy(&fast),
                        String::from_utf8_lossy(&ordinary)
                    );
                }
            }
        }
    }
}
