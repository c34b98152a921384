"""Drives a Switchboard gateway's /v1/responses with the official OpenAI SDK: responses.create
plain and streamed (the output_text deltas join to the final output_text, sequence numbers
count up from 0), a function tool round trip with a function_call_output, and the 400s for what
needs server-side state or a built-in tool. The gateway runs with --tool-call-parser qwen25 in
front of simulators scripted by tests/it/front_doors.rs (the same rules as
anthropic_sdk_check.py: TOOL_PROMPT -> a get_weather call, RESULT -> FINAL).

Usage: openai_responses_check.py BASE_URL MODEL KEY
Prints one JSON summary line; exits 1 with a message on the first failure.
"""

import json
import sys

import openai
from openai import OpenAI
from openai.types.responses import Response

from common import CheckFailed, check

TOOL_PROMPT = "What is the weather in Paris?"
RESULT = "18 degrees and sunny"
FINAL = "It is 18 degrees and sunny in Paris."
TOOLS = [{
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]


class Runner:
    def __init__(self, base_url, model, key):
        self.client = OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=key, max_retries=0, timeout=60)
        self.model = model

    def both(self, what, **kw):
        """The same request created and streamed; checks the stream against the whole answer
        and returns the whole one."""
        kw = dict(model=self.model, **kw)
        whole = self.client.responses.create(**kw)
        check(isinstance(whole, Response), f"{what}: not a Response: {type(whole).__name__}")
        check(whole.id.startswith("resp_") and whole.model == self.model, f"{what}: {whole}")
        check(whole.usage is not None and whole.usage.input_tokens > 0, f"{what}: usage {whole.usage}")
        check(whole.usage.output_tokens > 0, f"{what}: usage {whole.usage}")
        events = list(self.client.responses.create(stream=True, **kw))
        seq = [e.sequence_number for e in events]
        check(seq == list(range(len(events))), f"{what}: sequence numbers {seq}")
        types = [e.type for e in events]
        check(types[:2] == ["response.created", "response.in_progress"], f"{what}: began {types[:3]}")
        check(types[-1] in ("response.completed", "response.incomplete"), f"{what}: ended {types[-3:]}")
        final = events[-1].response
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        check(deltas == final.output_text, f"{what}: deltas {deltas!r} != output_text {final.output_text!r}")
        args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        calls = [i for i in final.output if i.type == "function_call"]
        check(args == "".join(c.arguments for c in calls), f"{what}: argument deltas {args!r} != {calls}")
        check(final.output_text == whole.output_text, f"{what}: stream {final.output_text!r} != whole {whole.output_text!r}")
        strip = lambda r: [i.model_dump(exclude={"id", "call_id"}) for i in r.output]
        check(strip(final) == strip(whole), f"{what}: stream {final.output} != whole {whole.output}")
        check(final.status == whole.status, f"{what}: status {final.status} != {whole.status}")
        return whole

    def plain(self):
        r = self.both("plain", input="Say something", instructions="You are terse.", max_output_tokens=16)
        check(len(r.output_text) > 0, f"plain: empty {r}")
        check(r.status in ("completed", "incomplete"), f"plain: status {r.status}")
        return {"text": r.output_text, "status": r.status}

    def tool_round_trip(self):
        first = self.both("function_call", input=TOOL_PROMPT, tools=TOOLS, max_output_tokens=128)
        calls = [i for i in first.output if i.type == "function_call"]
        check(len(calls) == 1, f"function_call: {first.output}")
        call = calls[0]
        check(call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}, f"function_call: {call}")
        items = [{"role": "user", "content": TOOL_PROMPT}]
        items += [i.model_dump(exclude_none=True) for i in first.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": RESULT})
        second = self.both("function_call_output", input=items, tools=TOOLS, max_output_tokens=128)
        check(second.output_text == FINAL, f"function_call_output: {second.output}")
        check(second.status == "completed", f"function_call_output: status {second.status}")
        return {"call": [call.name, call.arguments], "final": second.output_text}

    def refusals(self):
        cases = {
            "previous_response_id": dict(previous_response_id="resp_123"),
            "store": dict(store=True),
            "background": dict(background=True),
            "tools[0].type": dict(tools=[{"type": "web_search"}]),
        }
        for param, extra in cases.items():
            try:
                self.client.responses.create(model=self.model, input="hi", **extra)
                raise CheckFailed(f"{param}: accepted")
            except openai.BadRequestError as e:
                check(e.status_code == 400, f"{param}: status {e.status_code}")
                check(e.body.get("param") == param, f"{param}: body {e.body}")
                check(param.split("[")[0] in e.body.get("message", ""), f"{param}: message {e.body}")
        return len(cases)


def main():
    base_url, model, key = sys.argv[1:4]
    r = Runner(base_url, model, key)
    out = {"plain": r.plain(), "tools": r.tool_round_trip(), "refused": r.refusals()}
    print(json.dumps({"ok": True, **out}))


if __name__ == "__main__":
    try:
        main()
    except (CheckFailed, openai.OpenAIError) as e:
        print(f"openai_responses_check FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
