"""The official OpenAI SDK reading a reasoning model's chat answer through a Switchboard gateway
started with --reasoning-parser (tests/it/reasoning_gateway.rs).

Usage: openai_sdk_reasoning.py BASE_URL MODEL PROMPT
Prints one JSON line: {"ok": true, "whole": [reasoning, content], "stream": [reasoning, content]}
as the SDK parsed them; exits 1 with a message on the first failure.
"""

import json
import sys

from common import CheckFailed, check
from openai import OpenAI
from openai.types.chat import ChatCompletion, ChatCompletionChunk


def main():
    base_url, model, prompt = sys.argv[1:4]
    client = OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key="x", max_retries=0, timeout=60)
    kw = dict(model=model, max_tokens=64, messages=[{"role": "user", "content": prompt}])
    resp = client.chat.completions.create(**kw)
    check(isinstance(resp, ChatCompletion), f"not a ChatCompletion: {type(resp).__name__}")
    message = resp.choices[0].message
    # reasoning_content is not in the SDK's model: it is kept as an extra field.
    whole = [getattr(message, "reasoning_content", None), message.content]
    reasoning, content, finish = "", "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        check(isinstance(chunk, ChatCompletionChunk), f"not a chunk: {type(chunk).__name__}")
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning += getattr(delta, "reasoning_content", None) or ""
        content += delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    check(finish == "stop", f"finish_reason {finish!r}")
    print(json.dumps({"ok": True, "whole": whole, "stream": [reasoning, content]}))


if __name__ == "__main__":
    try:
        main()
    except CheckFailed as e:
        print(f"openai_sdk_reasoning FAILED: {e}", file=sys.stderr)
        sys.exit(1)
