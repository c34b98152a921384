//! A finished text split at once, exactly as SGLang's `detect_and_parse` does for a
//! non-streamed answer: with the reasoning on, every start tag is dropped and the text is
//! stripped; the reasoning runs to the first end tag, and the content after it is stripped.

use super::{Format, Split};

pub fn split_whole(format: Format, text: &str) -> Split {
    if format.harmony {
        return super::harmony_split::split_harmony(text);
    }
    if !format.starts_in_reasoning && !text.contains(format.start) {
        return Split {
            reasoning: String::new(),
            content: text.to_owned(),
        };
    }
    let processed = text.replace(format.start, "");
    let processed = python_strip(&processed);
    match processed.split_once(format.end) {
        Some((reasoning, content)) => Split {
            reasoning: reasoning.to_owned(),
            content: python_strip(content).to_owned(),
        },
        // The reasoning was cut off before its end tag.
        None => Split {
            reasoning: processed.to_owned(),
            content: String::new(),
        },
    }
}

/// Python's `str.strip()`: its whitespace is Unicode's plus the separators U+001C..U+001F.
pub fn python_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reasoning::ParserKind;

    fn split(kind: ParserKind, text: &str) -> (String, String) {
        let s = split_whole(kind.format(None), text);
        (s.reasoning, s.content)
    }

    #[test]
    fn splits_like_sglang_detect_and_parse() {
        let r = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            split(ParserKind::Qwen3, "<think>\nhm\n</think>\n\nAnswer \n"),
            r("hm\n", "Answer")
        );
        // Forced: untagged text is reasoning until the end tag, or all of it.
        assert_eq!(split(ParserKind::DeepseekR1, "a</think>b"), r("a", "b"));
        assert_eq!(split(ParserKind::DeepseekR1, " cut off "), r("cut off", ""));
        // Not forced: no start tag, all content; a start tag anywhere makes it reasoning.
        assert_eq!(
            split(ParserKind::Kimi, "plain</think>"),
            r("", "plain</think>")
        );
        assert_eq!(
            split(ParserKind::Kimi, "pre ◁think▷x◁/think▷ y"),
            r("pre x", "y")
        );
        assert_eq!(
            split(ParserKind::Qwen3, "\u{1f}a</think>b\u{1c}"),
            r("a", "b")
        );
    }
}
