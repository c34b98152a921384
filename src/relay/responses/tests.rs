//! The Responses grammar: event order, sequence numbers, and the stream against the whole answer.

use super::*;
use crate::relay::grammar::sse_events as events;

#[test]
fn a_stream_numbers_its_events_and_closes_with_the_whole_response() {
    let usage = openai::Usage::new(10, 3, 4);
    let call = ToolCall {
        name: "w".into(),
        arguments: r#"{"c": "P"}"#.into(),
    };
    let ending = Ending {
        reason: "length",
        stop_string: None,
    };
    let mut f = ResponsesFormat::new("r", "m".into(), Map::new());
    let mut out = Vec::new();
    f.start(&mut out, &usage);
    f.reasoning(&mut out, "hm");
    f.text(&mut out, "Hi", None);
    f.text(&mut out, " there", None);
    f.tool_calls(&mut out, std::slice::from_ref(&call));
    f.finish(&mut out, &ending, &usage);
    let evs = events(&out);
    for (i, (name, v)) in evs.iter().enumerate() {
        assert_eq!(v["type"], name.as_str(), "{v}");
        assert_eq!(v["sequence_number"], i, "{v}");
    }
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"response.created"));
    assert_eq!(names.last(), Some(&"response.incomplete"));
    let deltas: String = evs
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "Hi there");
    let last = &evs.last().unwrap().1["response"];
    assert_eq!(last["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 4);
    let whole = ResponsesFormat::new("r", "m".into(), Map::new()).whole(Whole {
        content: "Hi there",
        reasoning: Some("hm"),
        calls: Some(&[call]),
        ending,
        usage,
    });
    let whole: Value = serde_json::from_slice(&whole).unwrap();
    assert_eq!(whole["output"], last["output"]);
    assert_eq!(whole["output"][0]["type"], "reasoning");
    assert_eq!(whole["output"][2]["type"], "function_call");
}
