use proptest::prelude::*;

use super::*;

/// How a worker writes its events.
#[derive(Debug, Clone, Copy)]
struct Style {
    /// Python's `json.dumps`: `", "` and `": "`, non-ASCII as `\u` escapes.
    python: bool,
    cumulative_text: bool,
    cumulative_ids: bool,
    /// `--skip-tokenizer-init`: no `text` field.
    text_field: bool,
}

fn json_string(s: &str, python: bool) -> String {
    if !python {
        return serde_json::to_string(s).expect("a string");
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// One event: `text` and `ids` as this style sends them after `sent` steps.
fn event(style: Style, text: &str, ids: &[u32], count: usize) -> String {
    let (comma, colon) = if style.python {
        (", ", ": ")
    } else {
        (",", ":")
    };
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    let mut out = String::from("{");
    if style.text_field {
        out.push_str(&format!(
            r#""text"{colon}{}{comma}"#,
            json_string(text, style.python)
        ));
    }
    out.push_str(&format!(
        r#""output_ids"{colon}[{}]{comma}"meta_info"{colon}{{"id"{colon}"x"{comma}"completion_tokens"{colon}{count}}}}}"#,
        ids.join(comma)
    ));
    out
}

/// A stream's events: steps of (text piece, ids), each event after one or more steps, the text
/// held back now and then (as SGLang does for a partial character or a stop-string prefix).
fn events(style: Style, steps: &[(String, Vec<u32>, bool)]) -> Vec<String> {
    let (mut text, mut ids, mut count) = (String::new(), Vec::new(), 0);
    let (mut shown, mut sent_ids) = (0, 0);
    let mut out = Vec::new();
    for (piece, step_ids, hold) in steps {
        text.push_str(piece);
        ids.extend_from_slice(step_ids);
        count += step_ids.len();
        if *hold {
            continue;
        }
        let t = if style.cumulative_text {
            &text[..]
        } else {
            &text[shown..]
        };
        let i = if style.cumulative_ids {
            &ids[..]
        } else {
            &ids[sent_ids..]
        };
        out.push(event(style, t, i, count));
        (shown, sent_ids) = (text.len(), ids.len());
    }
    out
}

/// Per event: its new text, how many ids it added, and all ids so far.
type Read = Vec<(Option<String>, usize, Vec<u32>)>;

/// What reading every event whole gives (the reading before the splice): new text and ids
/// added per event.
fn read_whole(events: &[String]) -> Read {
    let mut r = Received::default();
    events
        .iter()
        .map(|e| {
            let chunk: GenerateChunk = serde_json::from_str(e).expect("an event");
            let count = chunk.meta_info.completion_tokens;
            let (text, added) = r
                .take(
                    chunk.text.map(Sent::Whole),
                    chunk.output_ids.map(Sent::Whole),
                    count,
                )
                .expect("values");
            (text, added, r.ids().to_vec())
        })
        .collect()
}

/// The same read as the gateway reads it, and how many events were cut.
fn read_cut(events: &[String]) -> (Read, usize) {
    let mut r = ChunkReader::default();
    let mut cuts = 0;
    let read = events
        .iter()
        .map(|e| {
            cuts += usize::from(r.splice.cut(e.as_bytes()).is_some());
            let chunk = r.read(e.as_bytes()).expect("an event");
            (chunk.text, chunk.added, r.ids().to_vec())
        })
        .collect();
    (read, cuts)
}

#[test]
fn cumulative_events_are_read_from_where_the_last_ended() {
    let style = Style {
        python: true,
        cumulative_text: true,
        cumulative_ids: true,
        text_field: true,
    };
    let steps: Vec<(String, Vec<u32>, bool)> = [
        ("a\\", 1, false),
        ("n é", 2, false),
        ("😀\"", 3, true),
        ("!", 4, false),
    ]
    .into_iter()
    .map(|(t, id, hold)| (t.to_owned(), vec![id], hold))
    .collect();
    let events = events(style, &steps);
    let (read, cuts) = read_cut(&events);
    assert_eq!(cuts, 2, "every event after the first is cut");
    let text: String = read.iter().filter_map(|r| r.0.clone()).collect();
    assert_eq!(text, "a\\n é😀\"!");
    assert_eq!(read.last().map(|r| r.2.clone()), Some(vec![1, 2, 3, 4]));
    assert_eq!(read, read_whole(&events));
}

#[test]
fn a_worker_without_text_has_its_ids_cut() {
    let style = Style {
        python: false,
        cumulative_text: true,
        cumulative_ids: true,
        text_field: false,
    };
    let steps: Vec<_> = (1..=5).map(|id| (String::new(), vec![id], false)).collect();
    let events = events(style, &steps);
    let (read, cuts) = read_cut(&events);
    assert_eq!(cuts, 4);
    assert_eq!(read, read_whole(&events));
}

#[test]
fn an_event_that_is_not_utf8_is_an_error_cut_or_whole() {
    let mut r = ChunkReader::default();
    let first = br#"{"text":"a","output_ids":[1],"meta_info":{"completion_tokens":1}}"#;
    r.read(first).expect("an event");
    let mut bad = br#"{"text":"a"#.to_vec();
    bad.extend_from_slice(&[0xff, 0xfe]);
    bad.extend_from_slice(br#"","output_ids":[1,2],"meta_info":{"completion_tokens":2}}"#);
    assert!(
        r.splice.cut(&bad).is_some(),
        "the bad bytes are in what the event adds"
    );
    assert!(r.read(&bad).is_err());
    assert!(ChunkReader::default().read(&bad).is_err());
}

fn piece() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "",
        " word",
        "a",
        "\"",
        "\\",
        "\\n",
        "\n",
        "é",
        "😀",
        "\u{1}",
        "1, 2",
        "]",
        "\"text\":\"",
    ])
    .prop_map(str::to_owned)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every streaming mode and spelling reads, event by event, what reading each event whole
    /// reads.
    #[test]
    fn reads_what_reading_every_event_whole_reads(
        python in any::<bool>(),
        cumulative_text in any::<bool>(),
        cumulative_ids in any::<bool>(),
        text_field in any::<bool>(),
        steps in prop::collection::vec(
            (piece(), prop::collection::vec(0u32..200_000, 0..3), prop::bool::weighted(0.2)),
            1..24,
        ),
    ) {
        let style = Style { python, cumulative_text, cumulative_ids, text_field };
        let events = events(style, &steps);
        let (read, cuts) = read_cut(&events);
        prop_assert_eq!(read, read_whole(&events));
        if cumulative_ids && (cumulative_text || !text_field) && events.len() > 2 {
            prop_assert!(cuts > 0, "a cumulative stream is cut");
        }
    }
}
