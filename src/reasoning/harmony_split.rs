//! The `gpt-oss` reasoning parser: a Harmony text split into reasoning (the analysis channel)
//! and content (everything else SGLang's `GptOssDetector` passes on, tool-call blocks whole for
//! the tool-call parser), whole or streamed.
//!
//! Streamed, only what no later text can change goes out: the reasoning of the analysis blocks
//! so far (an open one up to what may become its end marker), and the content up to the first
//! piece SGLang's `commentary` filter might still drop; the rest at the end, from the whole
//! text. So the stream, joined, is the non-streamed answer, under any chunking — except for an
//! analysis block with no recipient (`to=`) that ends in `<|call|>`: it has gone out as
//! reasoning before its end said it was a call.

use super::harmony::{events, is_harmony, maybe_dropped, EventKind};
use super::Split;

pub fn split_harmony(text: &str) -> Split {
    if !is_harmony(text) {
        return Split {
            reasoning: String::new(),
            content: text.to_owned(),
        };
    }
    let mut out = Split::default();
    for e in events(text, false) {
        match e.kind {
            EventKind::Reasoning => out.reasoning.push_str(&e.text),
            EventKind::Normal | EventKind::ToolCall => out.content.push_str(&e.text),
        }
    }
    out
}

#[derive(Debug, Clone, Default)]
pub struct HarmonyStream {
    text: String,
    sent: Split,
    /// The text so far ends inside an analysis block, nothing held: text without markers
    /// (nor `|`, which could close an unknown one) is more of its reasoning.
    in_analysis: bool,
}

impl HarmonyStream {
    pub fn push(&mut self, chunk: &str) -> Split {
        self.text.push_str(chunk);
        if self.in_analysis && !chunk.contains(['<', '|']) {
            self.sent.reasoning.push_str(chunk);
            return Split {
                reasoning: chunk.to_owned(),
                content: String::new(),
            };
        }
        let mut sure = Split::default();
        let mut content_sure = true;
        self.in_analysis = false;
        for e in events(&self.text, true) {
            match e.kind {
                EventKind::Reasoning => {
                    sure.reasoning.push_str(&e.text);
                    self.in_analysis = e.open;
                }
                _ if !content_sure => {}
                _ if maybe_dropped(&e) => content_sure = false,
                _ => sure.content.push_str(&e.text),
            }
        }
        self.release(sure)
    }

    /// The end of the stream: the rest of the whole text's split.
    pub fn finish(&mut self) -> Split {
        let whole = split_harmony(&self.text);
        self.release(whole)
    }

    /// What of `sure` has not gone out yet (nothing, for a part that no longer extends what
    /// went out).
    fn release(&mut self, sure: Split) -> Split {
        let rest = |sent: &mut String, now: String| match now.strip_prefix(sent.as_str()) {
            Some(more) => {
                let more = more.to_owned();
                *sent = now;
                more
            }
            None => String::new(),
        };
        Split {
            reasoning: rest(&mut self.sent.reasoning, sure.reasoning),
            content: rest(&mut self.sent.content, sure.content),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "<|channel|>analysis<|message|>Think 🦙<|end|><|start|>assistant<|channel|>final<|message|>Answer é<|return|>";

    fn streamed(chunks: &[&str]) -> Split {
        let mut s = HarmonyStream::default();
        let mut all = Split::default();
        let mut pieces: Vec<Split> = chunks.iter().map(|c| s.push(c)).collect();
        pieces.push(s.finish());
        for piece in pieces {
            all.reasoning.push_str(&piece.reasoning);
            all.content.push_str(&piece.content);
        }
        all
    }

    #[test]
    fn any_two_piece_cut_gives_the_whole_split() {
        let whole = split_harmony(TEXT);
        assert_eq!(
            (whole.reasoning.as_str(), whole.content.as_str()),
            ("Think 🦙", "Answer é")
        );
        for cut in (1..TEXT.len()).filter(|&i| TEXT.is_char_boundary(i)) {
            assert_eq!(streamed(&[&TEXT[..cut], &TEXT[cut..]]), whole, "cut {cut}");
        }
    }

    #[test]
    fn reasoning_streams_before_its_block_ends() {
        let mut s = HarmonyStream::default();
        assert_eq!(s.push("<|channel|>analysis<|message|>a").reasoning, "a");
        assert_eq!(s.push("b").reasoning, "b");
        assert_eq!(s.push(" <|e").reasoning, " ");
        assert_eq!(s.push("nd|>").reasoning, "");
        assert_eq!(split_harmony("plain text").content, "plain text");
    }
}
