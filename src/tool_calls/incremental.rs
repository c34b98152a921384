//! A streamed text read for tool calls under any chunking. The content before the first call
//! goes out as it arrives, less what may still turn out to be the start tag or the whitespace
//! SGLang strips before a call; once a call has started, the rest is held, and
//! [`StreamParser::finish`] reads the whole text as a non-streamed answer is read, so the
//! calls, and whether a broken call makes everything content, are decided on the whole text.
//! What the stream shows, joined, is then the non-streamed answer (except that whitespace at
//! the very start of the text, already sent, stays).

use super::{
    deepseek, gpt_oss, kimi_k2, llama3, mistral, parse_whole, pythonic, tagged, Parsed, ParserKind,
    Reading, Start,
};
use crate::reasoning::python_strip;

#[derive(Debug, Clone)]
pub struct StreamParser {
    reading: Reading,
    /// Everything so far.
    text: String,
    /// The content already given out: always a prefix of `text`.
    sent: usize,
    /// A start tag has been seen: nothing more goes out before the end.
    in_calls: bool,
}

impl StreamParser {
    pub fn new(reading: Reading) -> StreamParser {
        StreamParser {
            reading,
            text: String::new(),
            sent: 0,
            in_calls: false,
        }
    }

    /// The content that `text` (the next piece of the stream) makes certain.
    pub fn push(&mut self, text: &str) -> String {
        self.text.push_str(text);
        if self.in_calls {
            return String::new();
        }
        let sure = match start(self.reading.kind, &self.text) {
            Start::At(at) => {
                self.in_calls = true;
                at
            }
            Start::Clear(upto) => upto,
        };
        // Whitespace right before a call is stripped: it waits for what follows.
        let sure = end_without_trailing_space(&self.text[..sure]);
        if sure <= self.sent {
            return String::new();
        }
        let out = self.text[self.sent..sure].to_owned();
        self.sent = sure;
        out
    }

    /// The end of the stream: the content not yet given out, and the calls.
    pub fn finish(&mut self) -> Parsed {
        let whole = parse_whole(&self.reading, &self.text);
        let sent = &self.text[..self.sent];
        let rest = whole
            .content
            .strip_prefix(sent)
            .or_else(|| whole.content.strip_prefix(python_strip(sent)))
            .unwrap_or_default()
            .to_owned();
        self.sent = self.text.len();
        Parsed {
            content: rest,
            calls: whole.calls,
        }
    }
}

/// Where the family's calls start in the text so far.
fn start(kind: ParserKind, text: &str) -> Start {
    match kind {
        // Qwen3-Coder's and GLM-4.5's calls open with the same `<tool_call>`.
        ParserKind::Qwen25 | ParserKind::Hermes | ParserKind::Qwen3Coder | ParserKind::Glm45 => {
            tagged::start(kind, text)
        }
        ParserKind::Llama3 => llama3::start(text),
        ParserKind::Mistral => mistral::start(text),
        ParserKind::Pythonic => pythonic::start(text),
        ParserKind::DeepseekV3 | ParserKind::DeepseekV31 => deepseek::start(text),
        ParserKind::KimiK2 => kimi_k2::start(text),
        ParserKind::GptOss => gpt_oss::start(text),
        // All of a forced output is the calls.
        ParserKind::Forced => Start::At(0),
    }
}

/// Where `text` ends once Python's `rstrip()` has run on it.
fn end_without_trailing_space(text: &str) -> usize {
    let stripped = python_strip(text);
    if stripped.is_empty() {
        0
    } else {
        stripped.as_ptr() as usize - text.as_ptr() as usize + stripped.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_calls::{ParserKind, ToolCall};

    fn run(kind: ParserKind, chunks: &[&str]) -> Parsed {
        let mut p = StreamParser::new(Reading {
            kind,
            tool_names: vec!["f".into()],
            parameters: vec![],
        });
        let mut content: String = chunks.iter().map(|c| p.push(c)).collect();
        let end = p.finish();
        content.push_str(&end.content);
        Parsed {
            content,
            calls: end.calls,
        }
    }

    #[test]
    fn any_two_piece_cut_gives_the_whole_answer() {
        let text =
            "Sure 🦙 \n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"é\"}}\n</tool_call>";
        let want = Parsed {
            content: "Sure 🦙".into(),
            calls: vec![ToolCall {
                name: "f".into(),
                arguments: "{\"q\": \"é\"}".into(),
            }],
        };
        for cut in (1..text.len()).filter(|&i| text.is_char_boundary(i)) {
            assert_eq!(run(ParserKind::Qwen25, &[&text[..cut], &text[cut..]]), want);
        }
    }

    #[test]
    fn a_forced_stream_holds_everything_for_the_calls() {
        let got = run(
            ParserKind::Forced,
            &["[{\"name\": \"f\", ", "\"parameters\": {}}]"],
        );
        assert_eq!(got.content, "");
        assert_eq!(got.calls.len(), 1);
    }

    #[test]
    fn held_text_is_released_at_the_end() {
        let got = run(ParserKind::Hermes, &["a <tool_c"]);
        assert_eq!(got.content, "a <tool_c");
        let mut p = StreamParser::new(Reading {
            kind: ParserKind::Qwen25,
            tool_names: vec![],
            parameters: vec![],
        });
        assert_eq!(p.push("x  "), "x");
        assert_eq!(p.push("y"), "  y");
        assert_eq!(p.finish().content, "");
    }
}
