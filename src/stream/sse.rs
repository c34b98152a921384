//! Incremental SSE parsing and encoding (the subset LLM servers use: `data:` lines, optional
//! `event:`, comments, `\n` or `\r\n` line ends).

use bytes::{Buf, Bytes, BytesMut};
use memchr::memchr;
use serde::Serialize;

/// One dispatched event. `data` is the joined `data:` lines without the final newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: Bytes,
}

impl SseEvent {
    pub fn is_done(&self) -> bool {
        self.data.as_ref() == b"[DONE]"
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("SSE event larger than {limit} bytes")]
pub struct SseTooLarge {
    pub limit: usize,
}

/// Feed bytes with [`SseParser::push`], then drain events with [`SseParser::next_event`].
#[derive(Debug)]
pub struct SseParser {
    buf: BytesMut,
    /// How far `buf` has been searched for a newline, so a partial line is not rescanned.
    scanned: usize,
    data: Option<Bytes>,
    extra_data: Option<Vec<u8>>,
    event: Option<String>,
    limit: usize,
}

impl SseParser {
    pub fn new(limit: usize) -> SseParser {
        SseParser {
            buf: BytesMut::new(),
            scanned: 0,
            data: None,
            extra_data: None,
            event: None,
            limit,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event, if the buffered bytes hold one.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseTooLarge> {
        loop {
            let Some(nl) = memchr(b'\n', &self.buf[self.scanned..]) else {
                self.scanned = self.buf.len();
                if self.buf.len() > self.limit {
                    return Err(SseTooLarge { limit: self.limit });
                }
                return Ok(None);
            };
            let mut line = self.buf.split_to(self.scanned + nl + 1).freeze();
            self.scanned = 0;
            line.truncate(line.len() - 1);
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            if line.is_empty() {
                if let Some(ev) = self.take_event() {
                    return Ok(Some(ev));
                }
                continue;
            }
            self.field(line)?;
        }
    }

    /// At end of input: an event whose blank line never came (some servers omit it on the last one).
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.buf.is_empty() {
            let mut line = std::mem::take(&mut self.buf).freeze();
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            // A dangling partial line is only worth anything as a data field.
            let _ = self.field(line);
        }
        self.take_event()
    }

    fn field(&mut self, mut line: Bytes) -> Result<(), SseTooLarge> {
        if line.first() == Some(&b':') {
            return Ok(()); // comment / keep-alive
        }
        let colon = memchr(b':', &line).unwrap_or(line.len());
        let name = line.slice(..colon);
        line.advance((colon + 1).min(line.len()));
        if line.first() == Some(&b' ') {
            line.advance(1);
        }
        match name.as_ref() {
            b"data" => self.add_data(line),
            b"event" => {
                self.event = Some(String::from_utf8_lossy(&line).into_owned());
                Ok(())
            }
            _ => Ok(()), // id, retry and unknown fields carry nothing we use
        }
    }

    fn add_data(&mut self, line: Bytes) -> Result<(), SseTooLarge> {
        match (&self.data, &mut self.extra_data) {
            (None, _) => self.data = Some(line),
            (Some(first), extra) => {
                let joined = extra.get_or_insert_with(|| first.to_vec());
                joined.push(b'\n');
                joined.extend_from_slice(&line);
                if joined.len() > self.limit {
                    return Err(SseTooLarge { limit: self.limit });
                }
            }
        }
        Ok(())
    }

    fn take_event(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let data = match self.extra_data.take() {
            Some(joined) => {
                self.data = None;
                Bytes::from(joined)
            }
            None => self.data.take()?,
        };
        Some(SseEvent { event, data })
    }
}

/// Appends `data: <json>\n\n` to `out`.
pub fn write_json_event<T: Serialize>(out: &mut Vec<u8>, value: &T) {
    let start = out.len();
    out.extend_from_slice(b"data: ");
    // Serialising our own types into a Vec cannot fail; if it did, send an empty object.
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(start + 6);
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
}

/// Appends `event: <name>\ndata: <json>\n\n` to `out` (the named events of Anthropic's and
/// the Responses API's streams).
pub fn write_named_event<T: Serialize>(out: &mut Vec<u8>, name: &str, value: &T) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    write_json_event(out, value);
}

/// `data: <json>\n\n` as its own buffer.
pub fn json_event<T: Serialize>(value: &T) -> Bytes {
    let mut out = Vec::with_capacity(256);
    write_json_event(&mut out, value);
    Bytes::from(out)
}

pub const DONE: &[u8] = b"data: [DONE]\n\n";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(p: &mut SseParser) -> Vec<SseEvent> {
        let mut out = vec![];
        while let Some(e) = p.next_event().unwrap() {
            out.push(e);
        }
        out
    }

    #[test]
    fn parses_data_events_and_done() {
        let mut p = SseParser::new(1 << 20);
        p.push(b"data: {\"a\":1}\n\n: keep-alive\n\ndata: [DONE]\n\n");
        let ev = all(&mut p);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].data.as_ref(), b"{\"a\":1}");
        assert!(ev[1].is_done());
    }

    #[test]
    fn handles_crlf_multiline_and_event_names() {
        let mut p = SseParser::new(1 << 20);
        p.push(b"event: error\r\ndata: a\r\ndata:b\r\n\r\n");
        let ev = all(&mut p);
        assert_eq!(
            ev,
            vec![SseEvent {
                event: Some("error".into()),
                data: Bytes::from_static(b"a\nb")
            }]
        );
    }

    #[test]
    fn finish_flushes_an_unterminated_event() {
        let mut p = SseParser::new(1 << 20);
        p.push(b"data: x");
        assert!(all(&mut p).is_empty());
        assert_eq!(p.finish().map(|e| e.data), Some(Bytes::from_static(b"x")));
    }

    #[test]
    fn rejects_oversized_lines() {
        let mut p = SseParser::new(8);
        p.push(b"data: 0123456789");
        assert_eq!(p.next_event(), Err(SseTooLarge { limit: 8 }));
    }

    proptest! {
        /// However the byte stream is cut, the same events come out.
        #[test]
        fn split_points_do_not_matter(payloads in proptest::collection::vec("[a-z{}\":, ]{0,40}", 1..8), cuts in proptest::collection::vec(0usize..400, 0..10)) {
            let mut wire = Vec::new();
            for p in &payloads { wire.extend_from_slice(format!("data: {p}\n\n").as_bytes()); }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.sort_unstable();
            let mut p = SseParser::new(1 << 20);
            let mut got = Vec::new();
            let mut last = 0;
            for c in cuts.into_iter().chain([wire.len()]) {
                p.push(&wire[last..c]);
                last = c;
                got.extend(all(&mut p));
            }
            let got: Vec<String> = got.into_iter().map(|e| String::from_utf8(e.data.to_vec()).unwrap()).collect();
            prop_assert_eq!(got, payloads);
        }
    }
}
