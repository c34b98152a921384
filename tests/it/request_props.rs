//! Property tests for OpenAI request parsing and preparation (`server::body::parse_request`,
//! `Sampling::to_sglang`, `requested_max_tokens`): what a client sends is what we read, every
//! wrongly-typed field is named in the error, and range checks accept exactly the valid range.

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use switchboard::protocol::openai::{ChatCompletionRequest, CompletionRequest, Prompt};
use switchboard::protocol::sampling::requested_max_tokens;
use switchboard::server::body::parse_request;

/// Sampling fields with values of the right type (in range or not).
fn sampling_fields() -> impl Strategy<Value = Map<String, Value>> {
    (
        proptest::option::of(any::<i64>()),
        proptest::option::of(-5.0f64..5.0),
        proptest::option::of(-1.0f64..2.0),
        proptest::option::of(-3i64..100),
        proptest::option::of(any::<i64>()),
        proptest::option::of(proptest::collection::vec("[a-z\\n]{0,4}", 0..20)),
        proptest::option::of(proptest::collection::vec(any::<u32>(), 0..4)),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            |(max, temp, top_p, top_k, seed, stop, stop_ids, ignore_eos)| {
                let mut m = Map::new();
                let mut put = |k: &str, v: Option<Value>| {
                    if let Some(v) = v {
                        m.insert(k.to_owned(), v);
                    }
                };
                put("max_tokens", max.map(Value::from));
                put("temperature", temp.map(Value::from));
                put("top_p", top_p.map(Value::from));
                put("top_k", top_k.map(Value::from));
                put("seed", seed.map(Value::from));
                put("stop", stop.map(Value::from));
                put("stop_token_ids", stop_ids.map(Value::from));
                put("ignore_eos", ignore_eos.map(Value::from));
                m
            },
        )
}

/// serde_json (without its `float_roundtrip` feature) may read a float back one ULP off what
/// it wrote; that is harmless for sampling values, so equality is up to a few ULPs.
fn same_float(got: Option<f64>, sent: Option<&Value>) -> bool {
    match (got, sent.and_then(Value::as_f64)) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs()),
        _ => false,
    }
}

fn chat_body(fields: &Map<String, Value>) -> Vec<u8> {
    let mut body = fields.clone();
    body.insert("model".into(), json!("m"));
    body.insert(
        "messages".into(),
        json!([{"role": "user", "content": "hi"}]),
    );
    serde_json::to_vec(&body).unwrap_or_default()
}

proptest! {
    /// Every field a client sends is read back exactly, floats included.
    #[test]
    fn sampling_round_trips(fields in sampling_fields()) {
        let req: ChatCompletionRequest = parse_request(&chat_body(&fields)).expect("valid types parse");
        let s = &req.sampling;
        prop_assert_eq!(s.max_tokens, fields.get("max_tokens").and_then(Value::as_i64));
        prop_assert!(same_float(s.temperature, fields.get("temperature")), "temperature {:?}", s.temperature);
        prop_assert!(same_float(s.top_p, fields.get("top_p")), "top_p {:?}", s.top_p);
        prop_assert_eq!(s.top_k, fields.get("top_k").and_then(Value::as_i64));
        prop_assert_eq!(s.seed, fields.get("seed").and_then(Value::as_i64));
        let stop = s.stop.clone().map(|st| st.into_vec());
        let sent_stop = fields.get("stop").and_then(|v| serde_json::from_value::<Vec<String>>(v.clone()).ok());
        prop_assert_eq!(stop, sent_stop);
        prop_assert_eq!(s.stop_token_ids.clone(), fields.get("stop_token_ids").and_then(|v| serde_json::from_value(v.clone()).ok()));
        prop_assert_eq!(s.ignore_eos, fields.get("ignore_eos").and_then(Value::as_bool));
    }

    /// `to_sglang` accepts exactly the documented ranges and carries the values through.
    #[test]
    fn range_checks_match_the_documented_ranges(fields in sampling_fields(), budget in 1u32..8192) {
        let req: ChatCompletionRequest = parse_request(&chat_body(&fields)).expect("valid types parse");
        let s = &req.sampling;
        let in_range = s.temperature.is_none_or(|t| (0.0..=2.0).contains(&t))
            && s.top_p.is_none_or(|p| (0.0..=1.0).contains(&p))
            && s.top_k.is_none_or(|k| k == -1 || k >= 1)
            && s.stop.clone().is_none_or(|st| st.into_vec().len() <= 16);
        match s.to_sglang(budget) {
            Ok(p) => {
                prop_assert!(in_range, "accepted out-of-range sampling: {:?}", s);
                prop_assert_eq!(p.max_new_tokens, Some(budget));
                prop_assert_eq!(p.temperature, s.temperature);
                prop_assert_eq!(p.top_k, s.top_k);
                prop_assert_eq!(p.sampling_seed, s.seed);
            }
            Err(e) => {
                prop_assert!(!in_range, "rejected valid sampling ({}): {:?}", e, s);
                prop_assert!(fields.contains_key(e.param), "error names `{}`, which was not sent", e.param);
            }
        }
    }

    /// A token limit is accepted iff 1 ≤ n ≤ context length.
    #[test]
    fn max_tokens_limits(n in any::<i64>(), ctx in 1usize..1_000_000) {
        let got = requested_max_tokens("max_tokens", Some(n), ctx);
        let valid = n >= 1 && (n as u128) <= ctx as u128;
        prop_assert_eq!(got.is_ok(), valid);
        if let Ok(m) = got {
            prop_assert_eq!(m.map(i64::from), Some(n));
        }
    }

    /// A value of the wrong type in any field is a 400 that names that field.
    #[test]
    fn wrong_types_name_their_field(
        field in proptest::sample::select(vec![
            "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
            "frequency_penalty", "repetition_penalty", "seed", "stop", "stop_token_ids",
            "ignore_eos", "min_tokens", "skip_special_tokens", "no_stop_trim", "n",
            "stream", "max_completion_tokens", "user", "model",
        ]),
        wrong in prop_oneof![Just(json!({"x": 1})), Just(json!([[true]])), Just(json!(-0.5))],
    ) {
        // `-0.5` is a fine value for the float fields: only count it as wrong elsewhere.
        let floats = ["temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"];
        prop_assume!(!(wrong == json!(-0.5) && floats.contains(&field)));
        let mut fields = Map::new();
        fields.insert(field.to_owned(), wrong);
        let mut body: Map<String, Value> = serde_json::from_slice(&chat_body(&Map::new())).unwrap_or_default();
        body.extend(fields);
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let err = parse_request::<ChatCompletionRequest>(&bytes).expect_err("wrong type must fail");
        prop_assert_eq!(err.status().as_u16(), 400);
        let param = err.body().error.param.unwrap_or_default();
        prop_assert!(param == field || param.starts_with(&format!("{field}.")) || param.starts_with(&format!("{field}[")),
            "param `{}` for field `{}`", param, field);
    }

    /// Completion prompts: token ids and texts come back as sent, in the right variant.
    #[test]
    fn prompts_round_trip(ids in proptest::collection::vec(any::<u32>(), 1..16), text in "\\PC{0,30}") {
        let req: CompletionRequest = parse_request(&serde_json::to_vec(&json!({"model": "m", "prompt": ids})).unwrap_or_default()).expect("ids");
        prop_assert!(matches!(&req.prompt, Prompt::Ids(got) if *got == ids));
        let req: CompletionRequest = parse_request(&serde_json::to_vec(&json!({"model": "m", "prompt": [text.clone()]})).unwrap_or_default()).expect("texts");
        prop_assert!(matches!(&req.prompt, Prompt::Texts(got) if *got == vec![text.clone()]));
        // Unknown fields are named in `extensions` (they decide whether the worker's own route
        // answers); sampling fields are not.
        let req: CompletionRequest = parse_request(&serde_json::to_vec(&json!({"model": "m", "prompt": text, "zz_extra": ids, "top_k": 3})).unwrap_or_default()).expect("extra");
        prop_assert_eq!(req.extensions, vec!["zz_extra".to_owned()]);
    }
}
