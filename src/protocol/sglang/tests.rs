use super::*;

#[test]
fn parses_cumulative_chunk_and_finish_reasons() {
    let raw = br#"{"text":" Paris.","output_ids":[12095,13],"meta_info":{"id":"x","finish_reason":{"type":"stop","matched":128009},"prompt_tokens":7,"completion_tokens":2,"cached_tokens":3,"e2e_latency":0.04}}"#;
    let c: GenerateChunk = serde_json::from_slice(raw).unwrap();
    assert_eq!(c.text.map(|t| t.get()), Some(r#"" Paris.""#));
    assert_eq!(c.output_ids.map(|t| t.get()), Some("[12095,13]"));
    assert_eq!(c.meta_info.completion_tokens, 2);
    assert_eq!(
        c.meta_info.finish_reason,
        Some(FinishReason::Stop {
            matched: Some(128009.into())
        })
    );
    let raw = br#"{"meta_info":{"finish_reason":{"length":16,"type":"length","matched":null}}}"#;
    let c: GenerateChunk = serde_json::from_slice(raw).unwrap();
    assert_eq!(
        c.meta_info.finish_reason,
        Some(FinishReason::Length { length: Some(16) })
    );
    let unknown = br#"{"meta_info":{"finish_reason":{"type":"other"}}}"#;
    assert!(serde_json::from_slice::<GenerateChunk>(unknown).is_err());
    let raw = br#"{"text":"","output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"The request queue is full.","status_code":503}}}"#;
    let c: GenerateChunk = serde_json::from_slice(raw).unwrap();
    assert!(matches!(
        c.meta_info.finish_reason,
        Some(FinishReason::Abort {
            status_code: Some(503),
            ..
        })
    ));
}

#[test]
fn sampling_params_skip_unset_fields() {
    let p = SamplingParams {
        max_new_tokens: Some(4),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_string(&p).unwrap(),
        r#"{"max_new_tokens":4}"#
    );
}

#[test]
fn generate_body_is_one_object_with_the_ids_first() {
    let params = SamplingParams {
        max_new_tokens: Some(16),
        stop: vec!["\n".into()],
        ..Default::default()
    };
    let bootstrap = Bootstrap {
        bootstrap_host: "10.0.0.1".into(),
        bootstrap_port: Some(8998),
        bootstrap_room: 7,
    };
    let ids = [0, 9, 151_642, 12_345_678, u32::MAX];
    let request = GenerateRequest {
        input_ids: &ids,
        sampling_params: &params,
        stream: true,
        rid: "r1",
        return_logprob: true,
        top_logprobs_num: 2,
        bootstrap: Some(&bootstrap),
        ranks: LegRanks::alone(None),
    };
    let body = String::from_utf8(request.to_json().unwrap()).unwrap();
    assert!(body.starts_with(r#"{"input_ids":[0,9,151642,12345678,4294967295],"#));
    let parsed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        parsed,
        serde_json::json!({
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 16, "stop": ["\n"]},
            "stream": true,
            "rid": "r1",
            "return_logprob": true,
            "top_logprobs_num": 2,
            "bootstrap_host": "10.0.0.1",
            "bootstrap_port": 8998,
            "bootstrap_room": 7,
        })
    );
    let empty = GenerateRequest {
        input_ids: &[],
        bootstrap: None,
        ..request
    };
    let body = String::from_utf8(empty.to_json().unwrap()).unwrap();
    assert!(
        body.starts_with(r#"{"input_ids":[],"sampling_params":"#),
        "{body}"
    );
}

#[test]
fn error_message_reads_all_shapes() {
    assert_eq!(error_message(br#"{"error":"bad"}"#).as_deref(), Some("bad"));
    assert_eq!(
        error_message(br#"{"error":{"message":"bad"}}"#).as_deref(),
        Some("bad")
    );
    assert_eq!(
        error_message(br#"{"object":"error","message":"bad"}"#).as_deref(),
        Some("bad")
    );
    assert_eq!(error_message(b"not json"), None);
}
#[test]
fn error_events_carry_the_status_the_worker_meant() {
    let v23 = br#"{"error":{"message":"too long","type":"invalid_request_error","code":400,"retryable":false}}"#;
    assert_eq!(
        error_event(v23),
        Some(ErrorEvent {
            message: "too long".into(),
            status: 400
        })
    );
    // 0.5.9: message only, and only a ValueError (bad input) gets there.
    assert_eq!(
        error_event(br#"{"error":{"message":"bad"}}"#).map(|e| e.status),
        Some(400)
    );
    let oai = br#"{"error":{"object":"error","message":"The request queue is full.","type":"SERVICE_UNAVAILABLE","param":null,"code":503}}"#;
    assert_eq!(error_event(oai).map(|e| e.status), Some(503));
    assert_eq!(error_event(br#"{"text":"a","meta_info":{}}"#), None);
    let full = br#"{"text":"","output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"The request queue is full.","status_code":503}}}"#;
    assert_eq!(status_abort(full).map(|e| e.status), Some(503));
    let user = br#"{"text":"a","meta_info":{"finish_reason":{"type":"abort","message":"Abort in waiting queue","status_code":null}}}"#;
    assert_eq!(status_abort(user), None);
}
