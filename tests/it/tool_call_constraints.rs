//! `tool_choice: "required"`, a named function and `strict` tools through the gateway
//! (`tool_calls_gateway`'s sim and gateway): the request reaches the worker's `/generate` with
//! the constraint SGLang's own chat route sends (its code is the oracle), and the forced JSON
//! list is read into calls, whole and streamed.

use serde_json::{json, Value};

use crate::support;
use crate::tool_calls_gateway::{chat, start, tools, MODEL};

#[tokio::test]
async fn forced_choices_reach_the_worker_with_the_constraint_sglang_sends() {
    let (sim, gw) = start(&["--tool-call-parser", "qwen25"]).await;
    let forced = "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}]";
    let rule = json!({"match": "weather in paris", "output": forced});
    support::post(format!("{}/sim/script", sim.url), &rule).await;
    let two = json!([tools()[0], {"type": "function", "function": {"name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}]);
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    let strict = json!([{"type": "function", "function": {"name": "get_weather", "strict": true,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let cases = [
        json!({"tools": two, "tool_choice": "required"}),
        json!({"tools": two, "tool_choice": named}),
        json!({"tools": strict}),
    ];
    let mut constraints = Vec::new();
    for (i, extra) in cases.iter().enumerate() {
        for stream in [false, true] {
            let a = chat(&gw.url, stream, extra.clone()).await;
            let params =
                support::sent_to_generate(&sim.url, &a.rid).await["sampling_params"].clone();
            if i < 2 {
                // The forced output is the JSON list: read into calls, whole and streamed.
                assert_eq!(
                    a.calls,
                    vec![("get_weather".to_owned(), json!({"city": "Paris"}))]
                );
                assert_eq!(
                    (a.content.as_deref(), a.finish.as_str()),
                    (None, "tool_calls")
                );
            }
            constraints.push(json!({"json_schema": params["json_schema"],
                "structural_tag": params["structural_tag"], "regex": null, "ebnf": null}));
        }
    }
    let forced_schema: Value =
        serde_json::from_str(constraints[2]["json_schema"].as_str().unwrap()).unwrap();
    assert_eq!(
        forced_schema["maxItems"], 1,
        "a named choice allows one call"
    );
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let bodies: Vec<Value> = cases
        .iter()
        .map(|extra| {
            let mut body = json!({"model": MODEL, "messages": [{"role": "user", "content": "x"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        })
        .collect();
    let oracle = support::python::run(
        &py,
        "tests/python/constraint_oracle.py",
        vec!["qwen25".into(), Value::from(bodies).to_string()],
    )
    .await;
    for (i, want) in oracle["results"].as_array().unwrap().iter().enumerate() {
        for stream in 0..2 {
            assert_eq!(&constraints[2 * i + stream], want, "case {i}");
        }
    }
}
