"""Drives a Switchboard gateway's /v1/messages with the official Anthropic SDK: messages.create
and messages.stream for text, a tool-use round trip with a tool_result, stop_sequences, usage,
and errors in Anthropic's shape. The gateway runs with --tool-call-parser qwen25 and --api-key
KEY in front of simulators scripted by tests/it/front_doors.rs:
  TOOL_PROMPT -> a qwen25 tool call of get_weather {"city": "Paris"}
  the tool result RESULT -> FINAL
  STOP_PROMPT -> a text with "STOP" in it
The simulator is deterministic per prompt, so a stream must join to the non-streamed answer.

Usage: anthropic_sdk_check.py BASE_URL MODEL KEY
Prints one JSON summary line; exits 1 with a message on the first failure.
"""

import json
import sys

import anthropic
from anthropic.types import Message

from common import CheckFailed, check

TOOL_PROMPT = "What is the weather in Paris?"
RESULT = "18 degrees and sunny"
FINAL = "It is 18 degrees and sunny in Paris."
STOP_PROMPT = "Count to five please"
BEFORE_STOP = "one two three "
TOOLS = [{
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


class Runner:
    def __init__(self, base_url, model, key):
        self.client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=60)
        self.model = model

    def both(self, what, **kw):
        """The same request created and streamed; checks the stream against the whole answer
        and returns the whole one."""
        kw = dict(model=self.model, **kw)
        whole = self.client.messages.create(**kw)
        check(isinstance(whole, Message), f"{what}: not a Message: {type(whole).__name__}")
        check(whole.model == self.model and whole.role == "assistant", f"{what}: {whole}")
        check(whole.id.startswith("msg_"), f"{what}: id {whole.id}")
        check(whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0) > 0, f"{what}: usage {whole.usage}")
        check(whole.usage.output_tokens > 0, f"{what}: usage {whole.usage}")
        check(isinstance(whole.usage.cache_read_input_tokens, int), f"{what}: no cache_read_input_tokens")
        types = []
        with self.client.messages.stream(**kw) as stream:
            for event in stream:
                types.append(event.type)
            final = stream.get_final_message()
        check(types[0] == "message_start", f"{what}: stream began with {types[:3]}")
        check(types[-1] == "message_stop", f"{what}: stream ended with {types[-3:]}")
        with self.client.messages.stream(**kw) as stream:
            joined = "".join(stream.text_stream)
        check(joined == text_of(final), f"{what}: text_stream {joined!r} != final {text_of(final)!r}")
        same = lambda m: [b.model_dump(exclude={"id"}) for b in m.content]
        check(same(final) == same(whole), f"{what}: stream {final.content} != whole {whole.content}")
        check(final.stop_reason == whole.stop_reason, f"{what}: {final.stop_reason} != {whole.stop_reason}")
        check(final.stop_sequence == whole.stop_sequence, f"{what}: stop_sequence differs")
        check(final.usage.output_tokens == whole.usage.output_tokens, f"{what}: usage {final.usage} vs {whole.usage}")
        return whole

    def text(self):
        m = self.both("text", max_tokens=16, system="You are terse.",
                      messages=[{"role": "user", "content": "Say something"}])
        check(m.stop_reason in ("end_turn", "max_tokens"), f"text: stop_reason {m.stop_reason}")
        check(len(text_of(m)) > 0, f"text: empty {m}")
        return {"text": text_of(m), "usage": m.usage.model_dump()}

    def tool_round_trip(self):
        first = self.both("tool_use", max_tokens=128, tools=TOOLS,
                          messages=[{"role": "user", "content": TOOL_PROMPT}])
        check(first.stop_reason == "tool_use", f"tool_use: stop_reason {first.stop_reason}")
        uses = [b for b in first.content if b.type == "tool_use"]
        check(len(uses) == 1, f"tool_use: {first.content}")
        use = uses[0]
        check(use.name == "get_weather" and use.input == {"city": "Paris"}, f"tool_use: {use}")
        check(use.id.startswith("toolu_"), f"tool_use: id {use.id}")
        messages = [
            {"role": "user", "content": TOOL_PROMPT},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": RESULT}]},
        ]
        second = self.both("tool_result", max_tokens=128, tools=TOOLS, messages=messages)
        check(text_of(second) == FINAL, f"tool_result: {second.content}")
        check(second.stop_reason == "end_turn", f"tool_result: stop_reason {second.stop_reason}")
        return {"call": [use.name, use.input], "final": text_of(second)}

    def stop_sequences(self):
        m = self.both("stop_sequences", max_tokens=64, stop_sequences=["STOP"],
                      messages=[{"role": "user", "content": STOP_PROMPT}])
        check(m.stop_reason == "stop_sequence", f"stop_sequences: stop_reason {m.stop_reason}")
        check(m.stop_sequence == "STOP", f"stop_sequences: stop_sequence {m.stop_sequence!r}")
        check(text_of(m) == BEFORE_STOP, f"stop_sequences: text {text_of(m)!r}")
        return {"text": text_of(m)}

    def errors(self, base_url):
        try:
            self.client.messages.create(model=self.model, max_tokens=0, messages=[{"role": "user", "content": "x"}])
            raise CheckFailed("max_tokens 0 was accepted")
        except anthropic.BadRequestError as e:
            check(e.body["type"] == "error", f"bad request body {e.body}")
            check(e.body["error"]["type"] == "invalid_request_error", f"bad request body {e.body}")
        wrong = anthropic.Anthropic(base_url=base_url, api_key="wrong", max_retries=0, timeout=60)
        try:
            wrong.messages.create(model=self.model, max_tokens=4, messages=[{"role": "user", "content": "x"}])
            raise CheckFailed("a wrong key was accepted")
        except anthropic.AuthenticationError as e:
            check(e.body["error"]["type"] == "authentication_error", f"auth body {e.body}")
        try:
            self.client.messages.create(model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "x"}])
            raise CheckFailed("an unknown model was accepted")
        except anthropic.NotFoundError as e:
            check(e.body["error"]["type"] == "not_found_error", f"not found body {e.body}")
        return 3


def main():
    base_url, model, key = sys.argv[1:4]
    r = Runner(base_url, model, key)
    out = {
        "text": r.text(),
        "tools": r.tool_round_trip(),
        "stop": r.stop_sequences(),
        "errors": r.errors(base_url),
    }
    print(json.dumps({"ok": True, **out}))


if __name__ == "__main__":
    try:
        main()
    except (CheckFailed, anthropic.APIError) as e:
        print(f"anthropic_sdk_check FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
