//! `--tool-call-parser qwen25` through the gateway in front of a sim with Qwen2.5's tokenizer,
//! made to answer with calls (`POST /sim/script`; `<tool_call>` is one added token there, the
//! JSON many). A chat request with `tools` is served on the token-id path — the sim's log shows
//! our rid and the ids of the template rendered with the tools — and its answer carries OpenAI
//! `tool_calls` and `finish_reason: "tool_calls"`, whole and streamed, read by the official
//! OpenAI SDK too. `tool_choice: "none"` is all content; `"required"` and a named function are
//! constrained as SGLang's own route constrains them (`tool_call_constraints`). The parser is
//! detected from the template when not given; the other families are in `tool_call_families`.

use serde_json::{json, Value};

use crate::support;

pub(crate) const MODEL: &str = "qwen2.5-0.5b-instruct";
const ANSWER: &str = "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"°C\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": [1, 2]}}\n</tool_call>";

pub(crate) fn tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
            // Typed for the parsers that read values by their schema (qwen3_coder).
            "days": {"type": "array"}}}}}])
}

/// What one chat answer says: content (null when empty), calls as (name, arguments as JSON),
/// finish reason; and the request id the worker got. A stream's deltas are joined by index.
pub(crate) struct Answer {
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub calls: Vec<(String, Value)>,
    pub finish: String,
    pub rid: String,
}

pub(crate) async fn chat(url: &str, stream: bool, extra: Value) -> Answer {
    let mut body = json!({"model": MODEL, "stream": stream, "max_tokens": 128, "tools": tools(),
                          "messages": [{"role": "user", "content": "weather in paris and zurich?"}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let r = support::post(format!("{url}/v1/chat/completions"), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let rid = r
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .expect("x-request-id")
        .to_owned();
    let text = r.text().await.unwrap();
    let args = |a: &Value| serde_json::from_str::<Value>(a.as_str().expect("arguments")).unwrap();
    if !stream {
        let v: Value = serde_json::from_str(&text).unwrap();
        let choice = &v["choices"][0];
        assert!(
            choice.get("matched_stop").is_none(),
            "the sim's own answer: {v}"
        );
        let calls = choice["message"]["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for c in &calls {
            assert_eq!(c["type"], "function");
            assert!(
                c["id"].as_str().is_some_and(|id| id.starts_with("call_")),
                "{c}"
            );
        }
        return Answer {
            content: choice["message"]["content"].as_str().map(str::to_owned),
            reasoning: choice["message"]["reasoning_content"]
                .as_str()
                .map(str::to_owned),
            calls: calls
                .iter()
                .map(|c| {
                    (
                        c["function"]["name"].as_str().unwrap().to_owned(),
                        args(&c["function"]["arguments"]),
                    )
                })
                .collect(),
            finish: choice["finish_reason"].as_str().unwrap().to_owned(),
            rid,
        };
    }
    let data = support::sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{text}");
    let (mut content, mut reasoning, mut calls, mut finish) = (
        String::new(),
        String::new(),
        Vec::<(String, String)>::new(),
        None,
    );
    for d in data.iter().filter(|d| *d != "[DONE]") {
        let v: Value = serde_json::from_str(d).unwrap();
        let choice = &v["choices"][0];
        assert!(
            choice.get("matched_stop").is_none(),
            "the sim's own stream: {d}"
        );
        content.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
        reasoning.push_str(
            choice["delta"]["reasoning_content"]
                .as_str()
                .unwrap_or_default(),
        );
        for tc in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().expect("index") as usize;
            if let Some(name) = tc["function"]["name"].as_str() {
                assert!(!name.is_empty(), "an empty tool name: {d}");
                assert_eq!(i, calls.len(), "a call's first delta opens it: {d}");
                assert_eq!(tc["type"], "function");
                assert!(tc["id"].as_str().is_some(), "{d}");
                calls.push((name.to_owned(), String::new()));
            }
            calls[i]
                .1
                .push_str(tc["function"]["arguments"].as_str().unwrap_or_default());
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_owned());
        }
    }
    Answer {
        content: Some(content).filter(|c| !c.is_empty()),
        reasoning: Some(reasoning).filter(|r| !r.is_empty()),
        calls: calls
            .into_iter()
            .map(|(n, a)| (n, serde_json::from_str(&a).unwrap()))
            .collect(),
        finish: finish.expect("a finish chunk"),
        rid,
    }
}

/// A sim with Qwen2.5's tokenizer.
pub(crate) async fn qwen_sim() -> support::Proc {
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    support::sim(&[
        "--tokenizer-path",
        &dir,
        "--time-scale",
        "0.01",
        "--model-name",
        MODEL,
    ])
    .await
}

/// The sim, made to answer [`ANSWER`], and a gateway in front of it with the `parser` flags.
pub(crate) async fn start(parser: &[&str]) -> (support::Proc, support::Proc) {
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    let sim = qwen_sim().await;
    let mut args = vec!["--model-path", dir.as_str()];
    args.extend_from_slice(parser);
    let gw = support::gateway(&[&sim], &args).await;
    let rule = json!({"match": "weather in paris", "output": ANSWER});
    let r = support::post(format!("{}/sim/script", sim.url), &rule).await;
    assert_eq!(r.status().as_u16(), 200);
    (sim, gw)
}

#[tokio::test]
async fn chat_with_tools_gets_tool_calls_on_the_native_path() {
    let (sim, gw) = start(&["--tool-call-parser", "qwen25"]).await;
    let want = vec![
        (
            "get_weather".to_owned(),
            json!({"city": "Paris", "unit": "°C"}),
        ),
        (
            "get_weather".to_owned(),
            json!({"city": "Zürich", "days": [1, 2]}),
        ),
    ];
    let log: Vec<Value> = support::sim_request_log(&sim.url).await;
    assert!(log.is_empty());
    for stream in [false, true] {
        let a = chat(&gw.url, stream, json!({})).await;
        assert_eq!(
            a.content.as_deref(),
            Some("Let me check both."),
            "stream={stream}"
        );
        assert_eq!(a.calls, want, "stream={stream}");
        assert_eq!(a.finish, "tool_calls", "stream={stream}");
        let log: Vec<Value> = support::sim_request_log(&sim.url).await;
        let seen = log
            .iter()
            .find(|s| s["rid"] == a.rid.as_str())
            .expect("the worker saw our rid");
        // The prompt the worker got is the gateway's: the template rendered with the tools.
        let ids: Vec<u32> = seen["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert!(
            ids.len() > 100,
            "the tools are in the prompt: {} ids",
            ids.len()
        );
    }
    // `tool_choice: "none"`: no tools in the prompt, the text is the answer.
    let rule = json!({"match": "weather in paris", "output": ANSWER});
    support::post(format!("{}/sim/script", sim.url), &rule).await;
    for stream in [false, true] {
        let a = chat(&gw.url, stream, json!({"tool_choice": "none"})).await;
        assert_eq!(
            (a.content.as_deref(), a.calls.len(), a.finish.as_str()),
            (Some(ANSWER), 0, "stop")
        );
    }

    sdk_reads(
        &gw.url,
        "weather in paris and zurich?",
        "Let me check both.",
        &want,
    )
    .await;
}

/// The official OpenAI SDK reads the answer to `prompt`, whole and streamed, as `content` and
/// the calls `want`.
pub(crate) async fn sdk_reads(url: &str, prompt: &str, content: &str, want: &[(String, Value)]) {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let r = support::python::run(
        &py,
        "tests/python/openai_sdk_tool_calls.py",
        vec![
            url.to_owned(),
            MODEL.into(),
            prompt.into(),
            tools().to_string(),
        ],
    )
    .await;
    for how in ["whole", "stream"] {
        let got = &r[how];
        // `content` "" is an answer with none (`null`).
        assert_eq!(
            got["content"].as_str().unwrap_or_default(),
            content,
            "{how}: {r}"
        );
        assert_eq!(got["finish"], "tool_calls", "{how}: {r}");
        let calls = got["calls"].as_array().expect("calls");
        assert_eq!(calls.len(), want.len(), "{how}: {r}");
        for (c, (name, args)) in calls.iter().zip(want) {
            assert!(c[0].as_str().is_some_and(|id| !id.is_empty()), "{how}: {r}");
            assert_eq!(c[1], name.as_str());
            assert_eq!(
                &serde_json::from_str::<Value>(c[2].as_str().unwrap()).unwrap(),
                args
            );
        }
    }
}

#[tokio::test]
async fn tools_without_a_parser_are_rendered_and_answered_as_content_on_the_native_path() {
    // A model nothing picks a parser for (SmolLM2's name), with a template that renders tools
    // but teaches no call syntax.
    let template =
        std::env::temp_dir().join(format!("tools-no-syntax-{}.jinja", std::process::id()));
    std::fs::write(
        &template,
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         {% if tools %}Tools: {% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}<|im_start|>assistant\n",
    )
    .unwrap();
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &["--chat-template", template.to_str().unwrap()]).await;
    let rule = json!({"match": "weather in Paris", "output": "It is sunny."});
    support::post(format!("{}/sim/script", sim.url), &rule).await;
    for stream in [false, true] {
        let body = json!({"model": support::MODEL, "max_tokens": 64, "stream": stream, "tools": tools(),
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}]});
        let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let text = r.text().await.unwrap();
        // As SGLang's own route without a parser: the tools are in the prompt, the text is
        // the answer, and it went to `/generate` with the gateway's ids.
        assert!(!text.contains("tool_calls\":["), "{text}");
        let (content, _) = if stream {
            support::chat_stream_content(&text)
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            (
                v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                true,
            )
        };
        assert_eq!(content, "It is sunny.", "{text}");
    }
    let log = support::sim_request_log(&sim.url).await;
    assert_eq!(log.len(), 2);
    for seen in &log {
        assert_eq!(seen["route"], "/generate", "{seen}");
        assert!(seen["input_ids"].as_array().unwrap().len() > 40, "{seen}");
    }
    let _ = std::fs::remove_file(template);
}

/// Without `--tool-call-parser`, Qwen2.5's template (it writes `<tool_call>` around calls)
/// gets `qwen25`: the request is served natively and its calls read.
#[tokio::test]
async fn the_parser_is_detected_from_the_chat_template() {
    let (_sim, gw) = start(&[]).await;
    let a = chat(&gw.url, false, json!({})).await;
    assert_eq!(a.content.as_deref(), Some("Let me check both."));
    assert_eq!(a.calls.len(), 2);
    assert_eq!(a.finish, "tool_calls");
}
