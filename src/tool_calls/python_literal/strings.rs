//! String literals in every quoting Python reads: prefixes, triple quotes, escapes, and
//! adjacent literals joined.

use super::Cursor;

impl Cursor<'_> {
    /// One or more adjacent string literals, joined: `None` where there is no string here,
    /// `Some(None)` for one Python refuses or that is not text (bytes, f-strings).
    pub(super) fn strings(&mut self) -> Option<Option<String>> {
        let mut out: Option<String> = None;
        loop {
            self.skip();
            let save = self.at;
            let r = self.rest();
            let plen = r.find(['\'', '"']).filter(|&p| p <= 2);
            let Some(plen) = plen.filter(|&p| r[..p].chars().all(|c| c.is_ascii_alphabetic()))
            else {
                self.at = save;
                return out.map(Some);
            };
            let prefix = r[..plen].to_ascii_lowercase();
            let raw = match prefix.as_str() {
                "" | "u" => false,
                "r" => true,
                "b" | "f" | "rb" | "br" | "fr" | "rf" => return Some(None),
                _ => {
                    self.at = save;
                    return out.map(Some);
                }
            };
            self.at += plen;
            let Some(s) = self.string_body(raw) else {
                return Some(None);
            };
            out.get_or_insert_with(String::new).push_str(&s);
        }
    }

    fn string_body(&mut self, raw: bool) -> Option<String> {
        let r = self.rest();
        let q = r.chars().next()?;
        let triple: String = std::iter::repeat_n(q, 3).collect();
        let (close, long) = if r.starts_with(&triple) {
            (triple.as_str(), true)
        } else {
            (&r[..1], false)
        };
        let mut out = String::new();
        let mut chars = r[close.len()..].char_indices();
        while let Some((i, ch)) = chars.next() {
            let here = &r[close.len() + i..];
            if here.starts_with(close) {
                self.at += close.len() * 2 + i;
                return Some(out);
            }
            match ch {
                '\n' if !long => return None,
                '\\' => {
                    let (_, e) = chars.next()?;
                    if raw {
                        out.push('\\');
                        out.push(e);
                        continue;
                    }
                    match e {
                        '\n' => {}
                        '\\' | '\'' | '"' => out.push(e),
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'a' => out.push('\x07'),
                        'b' => out.push('\x08'),
                        'f' => out.push('\x0c'),
                        'v' => out.push('\x0b'),
                        '0'..='7' => {
                            let mut n = e.to_digit(8)?;
                            for _ in 0..2 {
                                let rest = chars.as_str();
                                match rest.chars().next().and_then(|c| c.to_digit(8)) {
                                    Some(d) => {
                                        n = n * 8 + d;
                                        chars.next();
                                    }
                                    None => break,
                                }
                            }
                            out.push(char::from_u32(n)?);
                        }
                        'x' | 'u' | 'U' => {
                            let len = match e {
                                'x' => 2,
                                'u' => 4,
                                _ => 8,
                            };
                            let hex = chars.as_str().get(..len)?;
                            let n = u32::from_str_radix(hex, 16).ok()?;
                            for _ in 0..len {
                                chars.next();
                            }
                            // A lone surrogate is a Python str but no Rust one.
                            out.push(char::from_u32(n)?);
                        }
                        // `\N{…}` names are not known here.
                        'N' => return None,
                        other => {
                            out.push('\\');
                            out.push(other);
                        }
                    }
                }
                other => out.push(other),
            }
        }
        None
    }
}
