//! Reading a cumulative value from where the last one ended. SGLang's default streaming mode
//! sends the whole text and the whole id list so far in every chunk; parsing them whole is O(n)
//! per chunk and O(n²) per answer (at 64 tokens, about a third of the gateway's CPU per chunk).
//! A JSON array or string that starts with the bytes of the last one, up to its closing byte,
//! holds the same elements or characters and then more: JSON is read left to right, and the last
//! value's bytes end on a token boundary (a whole element, a whole escape). So the bytes after
//! them, reopened, are the JSON of just what was added.

/// The JSON of the last value read whole, without its closing `]` or `"`.
#[derive(Debug, Default)]
pub struct Continued {
    last: Vec<u8>,
    /// The reopened rest of the current value (reused, so reading it allocates nothing).
    rest: Vec<u8>,
}

impl Continued {
    /// `raw` (an array or a string, as sent) is the value now known in full.
    pub fn remember(&mut self, raw: &str) {
        let raw = raw.trim_end().as_bytes();
        self.last.clear();
        if let Some((_close, open)) = raw.split_last() {
            self.last.extend_from_slice(open);
        }
    }

    /// The value remembered is no longer all that was received: nothing continues it.
    pub fn forget(&mut self) {
        self.last.clear();
    }

    /// When `raw` continues the value remembered: the JSON of what it adds, as a value of its
    /// own (`[…]` or `"…"`). `None` when it does not (or nothing is remembered).
    pub fn rest(&mut self, raw: &str) -> Option<&[u8]> {
        let open = *self.last.first()?;
        let after = raw.as_bytes().strip_prefix(self.last.as_slice())?;
        let after = match open {
            // The last element must have ended where the remembered bytes end: `[1,2` does not
            // continue into `[1,23]`.
            b'[' => match after.trim_ascii_start() {
                [b',', more @ ..] => more,
                rest @ [b']', ..] => rest,
                _ => return None,
            },
            b'"' => after,
            _ => return None,
        };
        self.rest.clear();
        self.rest.push(open);
        self.rest.extend_from_slice(after);
        Some(&self.rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rest(last: &str, now: &str) -> Option<String> {
        let mut c = Continued::default();
        c.remember(last);
        c.rest(now).map(|r| String::from_utf8_lossy(r).into_owned())
    }

    #[test]
    fn an_array_continues_only_after_a_whole_element() {
        assert_eq!(rest("[1,2]", "[1,2,3,4]").as_deref(), Some("[3,4]"));
        assert_eq!(rest("[1, 2]", "[1, 2, 3]").as_deref(), Some("[ 3]"));
        assert_eq!(rest("[1,2]", "[1,2]").as_deref(), Some("[]"));
        assert_eq!(rest("[1,2]", "[1,23]"), None);
        assert_eq!(rest("[1,2]", "[1,3,2]"), None);
        assert_eq!(rest("[1,2]", "[7]"), None);
    }

    #[test]
    fn a_string_continues_after_its_last_escape() {
        assert_eq!(rest(r#""ab""#, r#""abcd""#).as_deref(), Some(r#""cd""#));
        // `\\` is one escape (a backslash): an `n` after it is a letter, not `\n`.
        let added = rest(r#""a\\""#, r#""a\\n""#).expect("continues");
        let added: String = serde_json::from_str(&added).expect("a JSON string");
        assert_eq!(added, "n");
        assert_eq!(rest(r#""ab""#, r#""xab""#), None);
    }

    #[test]
    fn nothing_remembered_or_forgotten_continues_nothing() {
        let mut c = Continued::default();
        assert_eq!(c.rest("[1]"), None);
        c.remember("[1]");
        c.forget();
        assert_eq!(c.rest("[1,2]"), None);
    }
}
