use super::*;

/// The event's spans of the `"text"` string and the `"output_ids"` array.
fn spans(event: &str) -> Vec<Span> {
    let value_at = |key: &str| {
        let after = event.find(key)? + key.len();
        Some(after + event[after..].len() - event[after..].trim_start().len())
    };
    let (text, ids) = (value_at(r#""text":"#), value_at(r#""output_ids":"#));
    let mut spans = Vec::new();
    if let Some(open) = text {
        let close = open + 1 + string_end(&event.as_bytes()[open + 1..]).expect("a string");
        spans.push(Span { open, close });
    }
    if let Some(open) = ids {
        let close = open + event[open..].find(']').expect("an array");
        spans.push(Span { open, close });
    }
    spans
}

/// The cut of `now` after `last` was remembered with its text and ids.
fn cut(last: &str, now: &str) -> Option<String> {
    let mut s = Splice::default();
    s.remember(last.as_bytes(), &spans(last));
    let (bytes, cut) = s.cut(now.as_bytes())?;
    // The spans it reports are where the values now sit in the event.
    assert_eq!(cut.spans, spans(now).as_slice());
    Some(String::from_utf8(bytes.to_vec()).expect("UTF-8"))
}

#[test]
fn both_values_are_cut_to_what_they_add() {
    let last = r#"{"text":"Hel","output_ids":[1,2],"meta_info":{"completion_tokens":2}}"#;
    let now = r#"{"text":"Hello","output_ids":[1,2,3,4],"meta_info":{"completion_tokens":4}}"#;
    assert_eq!(
        cut(last, now).as_deref(),
        Some(r#"{"text":"lo","output_ids":[3,4],"meta_info":{"completion_tokens":4}}"#)
    );
    // Nothing new (a held-back character): empty values.
    assert_eq!(
        cut(last, last).as_deref(),
        Some(r#"{"text":"","output_ids":[],"meta_info":{"completion_tokens":2}}"#)
    );
}

#[test]
fn an_empty_list_is_cut_to_its_first_elements() {
    let last = r#"{"text":"a","output_ids":[],"meta_info":{}}"#;
    let now = r#"{"text":"ab","output_ids":[7,8],"meta_info":{}}"#;
    assert_eq!(
        cut(last, now).as_deref(),
        Some(r#"{"text":"b","output_ids":[7,8],"meta_info":{}}"#)
    );
    let python = r#"{"text": "a", "output_ids": [7], "meta_info": {}}"#;
    let after = r#"{"text": "a", "output_ids": [], "meta_info": {}}"#;
    assert_eq!(
        cut(after, python).as_deref(),
        Some(r#"{"text": "", "output_ids": [7], "meta_info": {}}"#)
    );
}

#[test]
fn python_spacing_and_escapes_are_cut_on_their_boundaries() {
    let last = r#"{"text": "a\\", "output_ids": [1, 2], "meta_info": {}}"#;
    // `\\` is one escape (a backslash): the `n` after it is a letter, not `\n`.
    let now = r#"{"text": "a\\n\"\u00e9", "output_ids": [1, 2, 30], "meta_info": {}}"#;
    assert_eq!(
        cut(last, now).as_deref(),
        Some(r#"{"text": "n\"\u00e9", "output_ids": [ 30], "meta_info": {}}"#)
    );
}

#[test]
fn an_event_that_does_not_repeat_the_last_is_read_whole() {
    let last = r#"{"text":"ab","output_ids":[1,2],"meta_info":{}}"#;
    // The last element must have ended where the remembered bytes end.
    assert_eq!(
        cut(last, r#"{"text":"ab","output_ids":[1,23],"meta_info":{}}"#),
        None
    );
    // Delta values, a changed text, a field missing.
    assert_eq!(
        cut(last, r#"{"text":"c","output_ids":[3],"meta_info":{}}"#),
        None
    );
    assert_eq!(
        cut(last, r#"{"text":"xab","output_ids":[1,2],"meta_info":{}}"#),
        None
    );
    assert_eq!(cut(last, r#"{"output_ids":[1,2,3],"meta_info":{}}"#), None);
    // Cut short inside a value.
    assert_eq!(cut(last, r#"{"text":"abc"#), None);
    assert_eq!(cut(last, r#"{"text":"ab","output_ids":[1,2,3"#), None);
}

#[test]
fn only_the_values_remembered_are_cut() {
    // Cumulative text with delta ids (SGLang 0.5.9 `--stream-output`): the text alone.
    let last = r#"{"text":"Hel","output_ids":[1],"meta_info":{}}"#;
    let mut s = Splice::default();
    s.remember(last.as_bytes(), &spans(last)[..1]);
    let now = r#"{"text":"Hello","output_ids":[2],"meta_info":{}}"#;
    let (bytes, cut) = s.cut(now.as_bytes()).expect("continues");
    assert_eq!(bytes, br#"{"text":"lo","output_ids":[2],"meta_info":{}}"#);
    // A value after the last cut one maps back to where it sits in the event.
    let ids_at = bytes.windows(3).position(|w| w == b"[2]").expect("ids");
    assert_eq!(
        cut.event_offset(ids_at),
        Some(now.find("[2]").expect("ids"))
    );
    assert_eq!(cut.event_offset(3), None);
}

#[test]
fn nothing_remembered_cuts_nothing() {
    let mut s = Splice::default();
    assert!(s.cut(br#"{"text":"a"}"#).is_none());
    // Spans that are not a string's or an array's ends are not remembered.
    let event = br#"{"text":"a","output_ids":[1]}"#;
    s.remember(event, &[Span { open: 0, close: 3 }]);
    assert!(s.cut(event).is_none());
    s.remember(event, &[Span { open: 8, close: 40 }]);
    assert!(s.cut(event).is_none());
    let [text, ids] = [
        Span { open: 8, close: 10 },
        Span {
            open: 25,
            close: 27,
        },
    ];
    s.remember(event, &[ids, text]);
    assert!(s.cut(event).is_none(), "spans out of order");
    s.remember(event, &[text, ids]);
    assert!(s.cut(event).is_some());
}
