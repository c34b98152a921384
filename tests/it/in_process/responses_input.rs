//! Bad and hostile input on `/v1/responses`: each refused with its exact status in OpenAI's
//! error shape, the unsupported-state fields named in `param`; never a 5xx.

use serde_json::{json, Value};

use super::front_doors::{bytes, nested, run, JSON, RESPONSES};
use super::{gateway, post, send};
use crate::hostile_input::cases::check_answer;
use crate::support::MODEL;

#[tokio::test]
async fn bad_responses_get_openai_errors_never_a_5xx() {
    let app = gateway(&["--context-length", "4096"]);
    let with = |extra: Value| {
        let mut v = json!({"model": MODEL, "input": "hi"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        bytes(v)
    };
    let cases = vec![
        ("missing input", bytes(json!({"model": MODEL})), 400),
        ("input a number", with(json!({"input": 3})), 400),
        ("input empty", with(json!({"input": []})), 400),
        (
            "an item with a bad role",
            with(json!({"input": [{"role": "wizard", "content": "x"}]})),
            400,
        ),
        (
            "a message without content",
            with(json!({"input": [{"role": "user"}]})),
            400,
        ),
        (
            "an item_reference",
            with(json!({"input": [{"type": "item_reference", "id": "msg_1"}]})),
            400,
        ),
        (
            "a function_call without call_id",
            with(json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})),
            400,
        ),
        (
            "a function_call_output without output",
            with(json!({"input": [{"type": "function_call_output", "call_id": "c"}]})),
            400,
        ),
        (
            "an input_image part",
            with(
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            ),
            400,
        ),
        (
            "arguments an object",
            with(
                json!({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}),
            ),
            400,
        ),
        (
            "text.format unknown",
            with(json!({"text": {"format": {"type": "yaml"}}})),
            400,
        ),
        (
            "json_schema without schema",
            with(json!({"text": {"format": {"type": "json_schema", "name": "x"}}})),
            400,
        ),
        (
            "max_output_tokens zero",
            with(json!({"max_output_tokens": 0})),
            400,
        ),
        (
            "max_output_tokens a string",
            with(json!({"max_output_tokens": "9"})),
            400,
        ),
        (
            "max_output_tokens over the context",
            with(json!({"max_output_tokens": 1u64 << 40})),
            400,
        ),
        ("temperature 3", with(json!({"temperature": 3})), 400),
        (
            "tool_choice unknown",
            with(json!({"tool_choice": "sometimes"})),
            400,
        ),
        (
            "tool_choice required",
            with(json!({"tool_choice": "required"})),
            400,
        ),
        (
            "a built-in tool",
            with(json!({"tools": [{"type": "web_search"}]})),
            400,
        ),
        (
            "a function tool without a name",
            with(json!({"tools": [{"type": "function"}]})),
            400,
        ),
        (
            "function tools without a parser",
            with(json!({"tools": [{"type": "function", "name": "f"}]})),
            400,
        ),
        (
            "previous_response_id",
            with(json!({"previous_response_id": "resp_1"})),
            400,
        ),
        ("store", with(json!({"store": true})), 400),
        ("background", with(json!({"background": true})), 400),
        ("conversation", with(json!({"conversation": "conv_1"})), 400),
        ("truncation auto", with(json!({"truncation": "auto"})), 400),
        ("top_logprobs", with(json!({"top_logprobs": 5})), 400),
        (
            "reasoning a string",
            with(json!({"reasoning": "high"})),
            400,
        ),
        ("an unknown field", with(json!({"frobnicate": 1})), 400),
        (
            "unknown model",
            with(json!({"model": "no-such-model"})),
            404,
        ),
        ("not JSON", b"{\"input\": ".to_vec(), 400),
        (
            "deeply nested",
            format!(r#"{{"model":"{MODEL}","input":{}}}"#, nested(5000)).into_bytes(),
            400,
        ),
    ];
    let problems = run(&app, RESPONSES, cases).await;
    assert!(problems.is_empty(), "{problems:#?}");
    // The unsupported-state fields are named in `param`.
    for field in ["previous_response_id", "store", "background"] {
        let v =
            json!({field: if field == "previous_response_id" { json!("r") } else { json!(true) }});
        let answer = send(&app, post(RESPONSES, Some(JSON), with(v))).await;
        assert_eq!(answer.json()["error"]["param"], field);
    }
    let answer = send(
        &app,
        post(RESPONSES, Some(JSON), with(json!({"store": false}))),
    )
    .await;
    assert_eq!(answer.status, 503, "a valid request reaches routing");
    super::assert_still_serving(&app).await;
}

#[tokio::test]
async fn oversized_responses_bodies_get_openai_413s() {
    let app = gateway(&["--max-body-bytes", "2000"]);
    let big = bytes(json!({"model": MODEL, "input": "a ".repeat(2000)}));
    let cases = vec![("an oversized body", big, 413)];
    let problems = run(&app, RESPONSES, cases).await;
    assert!(problems.is_empty(), "{problems:#?}");
    // More JSON values than any prompt can use, under the byte limit of the default.
    let app = gateway(&["--context-length", "16"]);
    let items = format!(
        r#"{{"model":"{MODEL}","input":[{}]}}"#,
        vec!["{}"; 70_000].join(",")
    );
    let answer = send(&app, post(RESPONSES, Some(JSON), items)).await;
    assert_eq!(check_answer(413, answer.status, &answer.body), None);
}
