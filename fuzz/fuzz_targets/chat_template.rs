//! The chat-template path with the bundled tokenizer: arbitrary JSON as messages (plus tools and
//! template kwargs) → `render_and_encode`. Errors are fine; panics and non-client errors for
//! client-shaped input are not.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use switchboard::protocol::openai::Tool;
use switchboard::tokenize::{ChatTemplateInput, Tokenizer};

fn tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| switchboard::bundled::tokenizer().expect("bundled tokenizer loads"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    // Either a bare messages array, or `{"messages", "tools", "chat_template_kwargs"}`.
    let (messages, tools, extra) = match &v {
        Value::Array(m) => (m.clone(), None, None),
        Value::Object(o) => (
            match o.get("messages") {
                Some(Value::Array(m)) => m.clone(),
                Some(other) => vec![other.clone()],
                None => Vec::new(),
            },
            // Tools as the gateway passes them: parsed into their typed form first.
            o.get("tools")
                .and_then(|t| serde_json::from_value::<Vec<Tool>>(t.clone()).ok()),
            o.get("chat_template_kwargs").and_then(Value::as_object),
        ),
        other => (vec![other.clone()], None, None),
    };
    let input = ChatTemplateInput {
        messages: &messages,
        tools: tools.as_deref(),
        add_generation_prompt: data.first().is_some_and(|b| b & 1 == 1),
        extra,
    };
    match tokenizer().render_and_encode(&input) {
        Ok(ids) => {
            let vocab = tokenizer().vocab_size() as u32;
            assert!(
                ids.iter().all(|&t| t < vocab),
                "token id outside the vocabulary"
            );
        }
        // The gateway answers 500 for a non-client error: client input must never cause one.
        Err(e) => assert!(e.is_client_error(), "client input gave a server error: {e}"),
    }
});
