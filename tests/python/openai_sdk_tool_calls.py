"""The official OpenAI SDK reading tool calls through a Switchboard gateway started with
--tool-call-parser (tests/it/tool_calls_gateway.rs).

Usage: openai_sdk_tool_calls.py BASE_URL MODEL PROMPT TOOLS_JSON
Prints one JSON line: {"ok": true, "whole": {...}, "stream": {...}}, each
{"content": str or null, "calls": [[id, name, arguments], ...], "finish": str} as the SDK parsed
it (a stream's tool-call deltas joined by index); exits 1 with a message on the first failure.
"""

import json
import sys

from common import CheckFailed, check
from openai import OpenAI
from openai.types.chat import ChatCompletion, ChatCompletionChunk


def main():
    base_url, model, prompt, tools = sys.argv[1:5]
    client = OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key="x", max_retries=0, timeout=60)
    kw = dict(
        model=model,
        max_tokens=512,
        messages=[{"role": "user", "content": prompt}],
        tools=json.loads(tools),
    )
    resp = client.chat.completions.create(**kw)
    check(isinstance(resp, ChatCompletion), f"not a ChatCompletion: {type(resp).__name__}")
    choice = resp.choices[0]
    whole = {
        "content": choice.message.content,
        "calls": [[c.id, c.function.name, c.function.arguments] for c in choice.message.tool_calls or []],
        "finish": choice.finish_reason,
    }
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        check(isinstance(chunk, ChatCompletionChunk), f"not a chunk: {type(chunk).__name__}")
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            call = calls.setdefault(tc.index, [None, "", ""])
            if tc.id:
                check(call[0] is None, f"call {tc.index} named twice")
                call[0] = tc.id
            if tc.function and tc.function.name:
                check(tc.function.name != "", "an empty tool name")
                call[1] += tc.function.name
            if tc.function and tc.function.arguments:
                call[2] += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    stream = {
        "content": content or None,
        "calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
    }
    print(json.dumps({"ok": True, "whole": whole, "stream": stream}))


if __name__ == "__main__":
    try:
        main()
    except CheckFailed as e:
        print(f"openai_sdk_tool_calls FAILED: {e}", file=sys.stderr)
        sys.exit(1)
