//! The hostile-input corpus: one entry per case, with the exact status the gateway must give.
//! 4xx answers must carry the OpenAI error shape; 200 is expected only where the input is
//! actually valid. The gateway's
//! own refusals are checked in process (`in_process::hostile_input`); whatever a worker answers
//! needs a real one (`hostile_input`).

use serde_json::Value;

pub const MODEL: &str = "smollm2-135m-instruct";
const CHAT: &str = "/v1/chat/completions";
const COMP: &str = "/v1/completions";
const GEN: &str = "/generate";
const JSON: Option<&str> = Some("application/json");

pub struct Case {
    pub name: &'static str,
    pub path: &'static str,
    pub content_type: Option<&'static str>,
    pub body: Vec<u8>,
    pub expect: u16,
    /// The request passes the gateway's checks and the answer is the worker's.
    pub worker_answers: bool,
}

fn raw(name: &'static str, path: &'static str, body: impl Into<Vec<u8>>, expect: u16) -> Case {
    Case {
        name,
        path,
        content_type: JSON,
        body: body.into(),
        expect,
        worker_answers: expect == 200,
    }
}

/// A refusal that comes from the worker: the gateway forwards the body as it is.
fn by_worker(mut case: Case) -> Case {
    case.worker_answers = true;
    case
}

/// A valid chat request (one user message) plus `extra` top-level fields (starting with `,`).
fn chat(name: &'static str, extra: &str, expect: u16) -> Case {
    let body =
        format!(r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#);
    raw(name, CHAT, body, expect)
}

/// A chat request with these `messages` (raw JSON) and a tiny token budget.
fn msgs(name: &'static str, messages: &str, expect: u16) -> Case {
    let body = format!(r#"{{"model":"{MODEL}","messages":{messages},"max_tokens":2}}"#);
    raw(name, CHAT, body, expect)
}

/// A completions request with a tiny token budget plus `extra` (the prompt, mostly).
fn comp(name: &'static str, extra: &str, expect: u16) -> Case {
    let body = format!(r#"{{"model":"{MODEL}","max_tokens":2{extra}}}"#);
    raw(name, COMP, body, expect)
}

/// A `/generate` request: `fields` (raw JSON, no braces) plus a tiny token budget.
fn generate(name: &'static str, fields: &str, expect: u16) -> Case {
    let body = format!(r#"{{"sampling_params":{{"max_new_tokens":2}},{fields}}}"#);
    raw(name, GEN, body, expect)
}

fn with_type(mut case: Case, content_type: Option<&'static str>) -> Case {
    case.content_type = content_type;
    case
}

fn with_bytes(name: &'static str, prefix: &str, bad: &[u8], suffix: &str) -> Case {
    let mut body = prefix.as_bytes().to_vec();
    body.extend_from_slice(bad);
    body.extend_from_slice(suffix.as_bytes());
    raw(name, CHAT, body, 400)
}

// One line per case reads as a table; rustfmt would spread each over five.
#[rustfmt::skip]
pub fn all() -> Vec<Case> {
    let ok = r#","max_tokens":2"#;
    let many_stops: Vec<String> = (0..1000).map(|i| format!("\"s{i}\"")).collect();
    let sixteen_stops: Vec<String> = (0..16).map(|i| format!("\"s{i}\"")).collect();
    let deep_kwargs = format!(
        r#","max_tokens":2,"chat_template_kwargs":{{"x":{}1{}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    let user = format!(r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"#);
    vec![
        // --- syntax, nesting, encoding ---
        // More JSON values than any prompt needs: refused before parsing (`server::limits`).
        raw("deep_array_nesting_100k", CHAT, "[".repeat(100_000), 413),
        raw("deep_object_nesting_100k", CHAT, "{\"a\":".repeat(100_000), 413),
        raw("deep_array_nesting_10k", CHAT, "[".repeat(10_000), 400),
        chat("deep_nesting_in_unknown_field", &format!(r#","max_tokens":2,"metadata":{}{}"#, "[".repeat(10_000), "]".repeat(10_000)), 400),
        chat("nesting_100_in_template_kwargs", &deep_kwargs, 200),
        with_bytes("invalid_utf8_in_content", &format!("{user}\"bad "), &[0xff, 0xfe], "\"}]}"),
        with_bytes("invalid_utf8_in_key", "{\"mo", &[0xc3, 0x28], "del\":1}"),
        with_bytes("invalid_utf8_between_tokens", "{\"model\":\"x\",", &[0xff], "}"),
        with_bytes("overlong_utf8_slash", &format!("{user}\"a"), &[0xc0, 0xaf], "\"}]}"),
        with_bytes("truncated_utf8_sequence", &format!("{user}\"a"), &[0xe2, 0x82], "\"}]}"),
        with_bytes("utf8_bom_prefix", "", &[0xef, 0xbb, 0xbf], &format!("{user}\"hi\"}}]}}")),
        raw("lone_high_surrogate", CHAT, format!(r#"{user}"\ud800"}}],"max_tokens":2}}"#), 400),
        raw("lone_low_surrogate", CHAT, format!(r#"{user}"\udc00x"}}],"max_tokens":2}}"#), 400),
        raw("surrogate_pair_emoji", CHAT, format!(r#"{user}"\ud83d\ude00"}}],"max_tokens":2}}"#), 200),
        raw("nul_escape_in_content", CHAT, format!(r#"{user}"a\u0000b"}}],"max_tokens":2}}"#), 200),
        raw("empty_body", CHAT, "", 400),
        raw("body_null", CHAT, "null", 400),
        raw("body_string", CHAT, "\"hello\"", 400),
        raw("batch_list_of_requests", CHAT, format!(r#"[{user}"hi"}}]}},{user}"hi"}}]}}]"#), 400),
        chat("trailing_garbage", r#","max_tokens":2} xyz"#, 400),
        chat("two_objects_concatenated", r#","max_tokens":2}{"a":1"#, 400),
        chat("duplicate_model_key", r#","max_tokens":2,"model":"other""#, 400),
        // --- numbers ---
        chat("max_tokens_nan", r#","max_tokens":NaN"#, 400),
        chat("max_tokens_infinity", r#","max_tokens":Infinity"#, 400),
        chat("temperature_1e999", r#","max_tokens":2,"temperature":1e999"#, 400),
        chat("max_tokens_float", r#","max_tokens":1e3"#, 400),
        chat("max_tokens_huge_integer", r#","max_tokens":99999999999999999999999999"#, 400),
        chat("max_tokens_negative", r#","max_tokens":-1"#, 400),
        chat("max_tokens_zero", r#","max_tokens":0"#, 400),
        chat("max_completion_tokens_over_context", r#","max_completion_tokens":4294967296"#, 400),
        chat("temperature_negative_zero", r#","max_tokens":2,"temperature":-0.0"#, 200),
        chat("temperature_just_over_two", r#","max_tokens":2,"temperature":2.0000001"#, 400),
        chat("top_p_subnormal", r#","max_tokens":2,"top_p":5e-324"#, 200),
        chat("top_k_zero", r#","max_tokens":2,"top_k":0"#, 400),
        chat("top_k_huge", r#","max_tokens":2,"top_k":9223372036854775807"#, 200),
        chat("seed_i64_min", r#","max_tokens":2,"seed":-9223372036854775808"#, 200),
        chat("min_tokens_over_max", r#","max_tokens":2,"min_tokens":3"#, 400),
        chat("stop_token_ids_negative", r#","max_tokens":2,"stop_token_ids":[-1]"#, 400),
        chat("n_zero", r#","max_tokens":2,"n":0"#, 400),
        chat("n_negative", r#","max_tokens":2,"n":-1"#, 400),
        chat("n_huge", r#","max_tokens":2,"n":1000000000"#, 400),
        chat("n_one", r#","max_tokens":2,"n":1"#, 200),
        chat("n_string", r#","max_tokens":2,"n":"2""#, 400),
        // --- stop ---
        chat("stop_1000_strings", &format!(r#","max_tokens":2,"stop":[{}]"#, many_stops.join(",")), 400),
        chat("stop_16_strings", &format!(r#","max_tokens":2,"stop":[{}]"#, sixteen_stops.join(",")), 200),
        chat("stop_number", r#","max_tokens":2,"stop":7"#, 400),
        chat("stop_list_with_null", r#","max_tokens":2,"stop":[null]"#, 400),
        chat("stop_empty_string", r#","max_tokens":2,"stop":"""#, 200),
        // --- logprobs ---
        chat("logprobs_true", r#","max_tokens":2,"logprobs":true,"top_logprobs":2"#, 200),
        // Every OpenAI field is type-checked here, whether the gateway implements it or the
        // worker's own route does (SGLang's pydantic would read "yes" as true).
        chat("logprobs_string", r#","max_tokens":2,"logprobs":"yes""#, 400),
        chat("top_logprobs_huge", r#","max_tokens":2,"top_logprobs":100000"#, 400),
        chat("top_logprobs_21", r#","max_tokens":2,"logprobs":true,"top_logprobs":21"#, 400),
        chat("response_format_string", r#","max_tokens":2,"response_format":"x""#, 400),
        chat("response_format_unknown_type", r#","max_tokens":2,"response_format":{"type":"yaml"}"#, 400),
        chat("response_format_schema_without_name", r#","max_tokens":2,"response_format":{"type":"json_schema","json_schema":{"schema":{}}}"#, 400),
        chat("response_format_json_object", r#","max_tokens":2,"response_format":{"type":"json_object"}"#, 200),
        chat("logit_bias_word_key", r#","max_tokens":2,"logit_bias":{"hello":1}"#, 400),
        chat("logit_bias_out_of_range", r#","max_tokens":2,"logit_bias":{"5":101}"#, 400),
        chat("parallel_tool_calls_string", r#","max_tokens":2,"parallel_tool_calls":"yes""#, 400),
        chat("metadata_number_value", r#","max_tokens":2,"metadata":{"a":1}"#, 400),
        chat("reasoning_effort_number", r#","max_tokens":2,"reasoning_effort":3"#, 400),
        chat("functions_string", r#","max_tokens":2,"functions":"x""#, 400),
        chat("function_call_required", r#","max_tokens":2,"function_call":"required""#, 400),
        // --- wrong types, nulls, empty strings, unknown fields ---
        raw("model_null", CHAT, r#"{"model":null,"messages":[{"role":"user","content":"hi"}]}"#, 400),
        raw("model_number", CHAT, r#"{"model":7,"messages":[{"role":"user","content":"hi"}]}"#, 400),
        raw("model_empty", CHAT, r#"{"model":"","messages":[{"role":"user","content":"hi"}]}"#, 404),
        raw("messages_null", CHAT, format!(r#"{{"model":"{MODEL}","messages":null}}"#), 400),
        raw("messages_object", CHAT, format!(r#"{{"model":"{MODEL}","messages":{{}}}}"#), 400),
        msgs("message_null", "[null]", 400),
        msgs("message_list", "[[]]", 400),
        msgs("role_null", r#"[{"role":null,"content":"hi"}]"#, 400),
        msgs("role_empty", r#"[{"role":"","content":"hi"}]"#, 400),
        msgs("role_unknown", r#"[{"role":"wizard","content":"hi"}]"#, 400),
        msgs("role_uppercase", r#"[{"role":"USER","content":"hi"}]"#, 400),
        msgs("content_number", r#"[{"role":"user","content":5}]"#, 400),
        msgs("content_object", r#"[{"role":"user","content":{}}]"#, 400),
        msgs("content_empty_string", r#"[{"role":"user","content":""}]"#, 200),
        // Only assistant messages may omit content; the template refuses it.
        msgs("content_null_user", r#"[{"role":"user","content":null}]"#, 400),
        msgs("content_image_part", r#"[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]"#, 400),
        msgs("content_audio_part", r#"[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AA","format":"wav"}}]}]"#, 400),
        msgs("content_part_unknown_type", r#"[{"role":"user","content":[{"type":"hologram"}]}]"#, 400),
        msgs("content_part_without_text", r#"[{"role":"user","content":[{"type":"text"}]}]"#, 400),
        msgs("content_part_text_number", r#"[{"role":"user","content":[{"type":"text","text":5}]}]"#, 400),
        msgs("content_part_bare_string", r#"[{"role":"user","content":["hi"]}]"#, 400),
        msgs("content_parts_text_ok", r#"[{"role":"user","content":[{"type":"text","text":"hi"}]}]"#, 200),
        msgs("unknown_field_in_message", r#"[{"role":"user","content":"hi","mood":"grumpy"}]"#, 200),
        msgs("tool_message_without_id", r#"[{"role":"user","content":"hi"},{"role":"tool","content":"x"}]"#, 200),
        chat("unknown_top_level_field", r#","max_tokens":2,"frobnicate":{"a":[1,2]}"#, 200),
        chat("unknown_field_in_stream_options", r#","max_tokens":2,"stream_options":{"include_usage":true,"x":1}"#, 200),
        chat("every_optional_null", r#","max_tokens":null,"max_completion_tokens":2,"temperature":null,"top_p":null,"stop":null,"seed":null,"tools":null,"user":null,"stream_options":null"#, 200),
        chat("stream_string", r#","max_tokens":2,"stream":"yes""#, 400),
        chat("stream_null", r#","max_tokens":2,"stream":null"#, 400),
        chat("stream_options_string", r#","max_tokens":2,"stream_options":"x""#, 400),
        chat("user_number", r#","max_tokens":2,"user":5"#, 400),
        chat("template_kwargs_string", r#","max_tokens":2,"chat_template_kwargs":"x""#, 400),
        chat("template_kwargs_override_messages", r#","max_tokens":2,"chat_template_kwargs":{"messages":"x","add_generation_prompt":"y"}"#, 200),
        // --- tools: type-checked here, then the worker's own route answers ---
        chat("tools_string", r#","max_tokens":2,"tools":"garbage""#, 400),
        chat("tools_list_of_garbage", r#","max_tokens":2,"tools":[1,"x",null]"#, 400),
        chat("tools_without_function", r#","max_tokens":2,"tools":[{"type":"function"}]"#, 400),
        chat("tools_function_without_name", r#","max_tokens":2,"tools":[{"type":"function","function":{"description":"d"}}]"#, 400),
        chat("tools_parameters_string", r#","max_tokens":2,"tools":[{"type":"function","function":{"name":"f","parameters":"x"}}]"#, 400),
        chat("tools_valid", r#","max_tokens":2,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]"#, 200),
        chat("tool_choice_garbage", r#","max_tokens":2,"tool_choice":{"type":42}"#, 400),
        chat("tool_choice_number", r#","max_tokens":2,"tool_choice":1"#, 400),
        chat("tool_choice_unknown_mode", r#","max_tokens":2,"tool_choice":"sometimes""#, 400),
        // --- content types ---
        with_type(chat("no_content_type", ok, 415), None),
        with_type(chat("text_plain", ok, 415), Some("text/plain")),
        with_type(chat("multipart", ok, 415), Some("multipart/form-data; boundary=x")),
        with_type(chat("form_urlencoded", ok, 415), Some("application/x-www-form-urlencoded")),
        with_type(chat("json_lookalike", ok, 415), Some("application/jsonx")),
        with_type(chat("json_charset_utf8", ok, 200), Some("application/json; charset=utf-8")),
        with_type(chat("json_uppercase", ok, 200), Some("APPLICATION/JSON")),
        // --- completions prompts ---
        comp("prompt_missing", "", 400),
        comp("prompt_null", r#","prompt":null"#, 400),
        comp("prompt_empty_list", r#","prompt":[]"#, 400),
        comp("prompt_empty_batch", r#","prompt":[[]]"#, 400),
        comp("prompt_negative_id", r#","prompt":[-1]"#, 400),
        comp("prompt_id_over_u32", r#","prompt":[4294967296]"#, 400),
        comp("prompt_float_id", r#","prompt":[1.5]"#, 400),
        comp("prompt_id_at_vocab_size", r#","prompt":[49152]"#, 400),
        comp("prompt_mixed_list", r#","prompt":["a",1]"#, 400),
        comp("prompt_object", r#","prompt":{"text":"a"}"#, 400),
        comp("prompt_valid_ids", r#","prompt":[1,2,3]"#, 200),
        // One generation per prompt, served by the gateway on `/generate`.
        comp("prompt_text_batch", r#","prompt":["a","b"]"#, 200),
        comp("prompt_echo_logprobs", r#","prompt":"hi","echo":true,"logprobs":3"#, 400),
        comp("echo_string", r#","prompt":"hi","echo":"x""#, 400),
        comp("suffix_number", r#","prompt":"hi","suffix":5"#, 400),
        comp("logprobs_flag_on_completions", r#","prompt":"hi","logprobs":true"#, 400),
        comp("logprobs_six", r#","prompt":"hi","logprobs":6"#, 400),
        comp("best_of_string", r#","prompt":"hi","best_of":"2""#, 400),
        // --- /generate: the gateway checks the prompt fields; the worker refuses the rest ---
        generate("generate_text_and_input_ids", r#""text":"hi","input_ids":[1,2]"#, 400),
        generate("generate_neither_text_nor_ids", r#""rid":"x""#, 400),
        generate("generate_text_null", r#""text":null"#, 400),
        generate("generate_negative_ids", r#""input_ids":[1,-5]"#, 400),
        generate("generate_ids_beyond_vocab", r#""input_ids":[1,999999999]"#, 400),
        generate("generate_ids_string", r#""input_ids":"abc""#, 400),
        generate("generate_text_number", r#""text":5"#, 400),
        generate("generate_text_ids", r#""text":[1,2]"#, 400),
        generate("generate_ids_over_context", &format!(r#""input_ids":[{}1]"#, "1,".repeat(8192)), 400),
        by_worker(generate("generate_batch_texts", r#""text":["a","b"]"#, 400)),
        by_worker(generate("generate_batch_ids", r#""input_ids":[[1,2],[3]]"#, 400)),
        generate("generate_empty_ids", r#""input_ids":[]"#, 400),
        by_worker(raw("generate_sampling_garbage", GEN, r#"{"text":"hi","sampling_params":"x"}"#, 400)),
        generate("generate_valid_text", r#""text":"hi""#, 200),
        raw("generate_body_list", GEN, "[1,2,3]", 400),
    ]
}

/// What is wrong with this answer to a case expecting `expect`, if anything.
pub fn check_answer(expect: u16, status: u16, body: &[u8]) -> Option<String> {
    if status != expect {
        let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
        return Some(format!("status {status}, expected {expect}: {text}"));
    }
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Some(format!("body is not JSON ({e})")),
    };
    if status == 200 {
        let answered = v.get("choices").is_some() || v.get("text").is_some();
        return (!answered).then(|| format!("200 without choices or text: {v}"));
    }
    let Some(err) = v.get("error").and_then(Value::as_object) else {
        return Some(format!("no error object: {v}"));
    };
    let shaped = err
        .get("message")
        .and_then(Value::as_str)
        .is_some_and(|m| !m.is_empty())
        && err.get("type").and_then(Value::as_str).is_some()
        && err.contains_key("param")
        && err.contains_key("code");
    (!shaped).then(|| format!("not the OpenAI error shape: {v}"))
}
