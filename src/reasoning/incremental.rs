//! A streamed text split as it arrives, under any chunking: a tag cut across chunks is held
//! (only the part that may still become a tag) until it is known, and whatever is held is
//! released by [`StreamSplitter::finish`], so no text is lost at the end of a stream.
//!
//! The result is SGLang's streaming parser fed one token at a time with each tag a token of its
//! own (as its server sees a model whose tags are added tokens): the first start tag is
//! dropped and opens the reasoning, an end tag inside the reasoning closes it, every other
//! character goes out as it is. SGLang's own parser, fed arbitrary chunks, misses a tag that
//! arrives behind other text in a chunk and drops a held tag prefix at the end; this one does
//! neither.

use super::harmony_split::HarmonyStream;
use super::{Format, Split};

#[derive(Debug, Clone)]
pub struct StreamSplitter {
    format: Format,
    in_reasoning: bool,
    /// Only the first start tag opens the reasoning (later ones are text, as in SGLang).
    start_seen: bool,
    /// The end of the text so far that is the beginning of a tag being looked for.
    held: String,
    /// gpt-oss's channels, split their own way.
    harmony: Option<HarmonyStream>,
}

impl StreamSplitter {
    pub fn new(format: Format) -> StreamSplitter {
        StreamSplitter {
            format,
            in_reasoning: format.starts_in_reasoning,
            start_seen: false,
            held: String::new(),
            harmony: format.harmony.then(HarmonyStream::default),
        }
    }

    /// The reasoning and content that `text` (the next piece of the stream) makes certain.
    pub fn push(&mut self, text: &str) -> Split {
        if let Some(h) = self.harmony.as_mut() {
            return h.push(text);
        }
        let mut out = Split::default();
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(text);
        let mut rest = buf.as_str();
        loop {
            let start = (!self.start_seen).then_some(self.format.start);
            let end = self.in_reasoning.then_some(self.format.end);
            let found = [start, end]
                .into_iter()
                .flatten()
                .filter_map(|tag| rest.find(tag).map(|at| (at, tag)))
                .min_by_key(|&(at, _)| at);
            let Some((at, tag)) = found else {
                let keep = [start, end]
                    .into_iter()
                    .flatten()
                    .map(|tag| held_prefix_len(rest, tag))
                    .max()
                    .unwrap_or(0);
                let (sure, unsure) = rest.split_at(rest.len() - keep);
                self.emit(&mut out, sure);
                self.held = unsure.to_owned();
                return out;
            };
            self.emit(&mut out, &rest[..at]);
            if Some(tag) == start {
                self.start_seen = true;
                self.in_reasoning = true;
            } else {
                self.in_reasoning = false;
            }
            rest = &rest[at + tag.len()..];
        }
    }

    /// The end of the stream: what was held is text after all.
    pub fn finish(&mut self) -> Split {
        if let Some(h) = self.harmony.as_mut() {
            return h.finish();
        }
        let mut out = Split::default();
        let held = std::mem::take(&mut self.held);
        self.emit(&mut out, &held);
        out
    }

    fn emit(&self, out: &mut Split, text: &str) {
        if self.in_reasoning {
            out.reasoning.push_str(text);
        } else {
            out.content.push_str(text);
        }
    }
}

/// The length of the longest end of `text` that is a proper beginning of `tag`: what a
/// streaming parser holds back in case the next chunk completes the tag. Such an end starts
/// where `tag` does, at a character boundary.
pub fn held_prefix_len(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&k| text.as_bytes().ends_with(&tag.as_bytes()[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reasoning::ParserKind;

    fn run(kind: ParserKind, chunks: &[&str]) -> Split {
        let mut s = StreamSplitter::new(kind.format(None));
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
    fn a_tag_split_anywhere_is_found() {
        let text = "pre<think>why</think>so";
        for cut in 1..text.len() {
            let got = run(ParserKind::Kimi, &[&text[..cut], &text[cut..]]);
            assert_eq!(got.content, text, "kimi's tags are not these");
            let got = run(ParserKind::Qwen3, &[&text[..cut], &text[cut..]]);
            assert_eq!(
                (got.reasoning.as_str(), got.content.as_str()),
                ("prewhy", "so")
            );
        }
    }

    #[test]
    fn a_held_tag_prefix_is_released_at_the_end() {
        let got = run(ParserKind::Qwen3, &["abc</thi"]);
        assert_eq!(got.reasoning, "abc</thi");
        let mut s = StreamSplitter::new(ParserKind::Qwen3.format(None));
        assert_eq!(s.push("x</th").reasoning, "x");
        assert_eq!(s.finish().reasoning, "</th");
    }

    #[test]
    fn multibyte_tags_and_text() {
        let text = "ü◁think▷🦙◁/think▷é";
        let cuts: Vec<usize> = (1..text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for cut in cuts {
            let got = run(ParserKind::Kimi, &[&text[..cut], &text[cut..]]);
            assert_eq!((got.reasoning.as_str(), got.content.as_str()), ("🦙", "üé"));
        }
    }
}
