"""Drives a Switchboard gateway (or any OpenAI-compatible server) with the official
OpenAI SDK: chat and completions, streamed and not, with and without usage
chunks, plus a stop string and n = 2 choices. Relies on the simulator being deterministic per
prompt, so a streamed answer must equal the non-streamed one.

Usage: openai_sdk_check.py BASE_URL MODEL [CA_FILE]
(CA_FILE: a PEM CA to trust for an https:// BASE_URL.)
Prints one JSON summary line; exits 1 with a message on the first failure.
"""

import json
import sys

import httpx

from common import CheckFailed, check
from openai import OpenAI, OpenAIError
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

MAX_TOKENS = 24


class Runner:
    def __init__(self, base_url, model, ca_file=None):
        # max_retries=0: a retried request would hide a failed first attempt.
        http = {"http_client": httpx.Client(verify=ca_file, timeout=60)} if ca_file else {}
        self.client = OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key="x", max_retries=0, timeout=60, **http)
        self.model = model
        self.requests = 0

    def run(self, kind, prompt, stream, include_usage=False, max_tokens=MAX_TOKENS, stop=None):
        """One request; returns (text, finish_reason, usage or None) as the SDK parsed them."""
        self.requests += 1
        what = f"{kind} stream={stream} include_usage={include_usage} stop={stop!r}"
        kw = dict(model=self.model, max_tokens=max_tokens, stream=stream)
        if stop is not None:
            kw["stop"] = stop
        if include_usage:
            kw["stream_options"] = {"include_usage": True}
        try:
            if kind == "chat":
                resp = self.client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kw)
            else:
                resp = self.client.completions.create(prompt=prompt, **kw)
            return self.parse(kind, what, resp, stream, include_usage)
        except OpenAIError as e:
            raise CheckFailed(f"{what}: the SDK raised {type(e).__name__}: {e}") from e

    def parse(self, kind, what, resp, stream, include_usage):
        if not stream:
            want = ChatCompletion if kind == "chat" else Completion
            check(isinstance(resp, want), f"{what}: SDK gave {type(resp).__name__}, not {want.__name__}")
            check(resp.model == self.model, f"{what}: model {resp.model!r}")
            check(len(resp.choices) == 1, f"{what}: {len(resp.choices)} choices")
            c = resp.choices[0]
            text = c.message.content if kind == "chat" else c.text
            check(isinstance(text, str), f"{what}: no text in {resp}")
            check(resp.usage is not None, f"{what}: no usage in a non-streamed response")
            return text, c.finish_reason, resp.usage

        want = ChatCompletionChunk if kind == "chat" else Completion
        parts, finish, usage, ids = [], None, None, set()
        for chunk in resp:
            check(isinstance(chunk, want), f"{what}: SDK gave {type(chunk).__name__}, not {want.__name__}")
            check(usage is None, f"{what}: chunk after the usage chunk: {chunk}")
            ids.add(chunk.id)
            if chunk.usage is not None:
                # The usage chunk is the last one and carries no choices (OpenAI's shape).
                check(include_usage, f"{what}: usage chunk sent without stream_options.include_usage")
                check(chunk.choices == [], f"{what}: usage chunk has choices: {chunk}")
                usage = chunk.usage
                continue
            check(len(chunk.choices) == 1, f"{what}: chunk with {len(chunk.choices)} choices: {chunk}")
            c = chunk.choices[0]
            check(finish is None, f"{what}: chunk after finish_reason: {chunk}")
            piece = c.delta.content if kind == "chat" else c.text
            parts.append(piece or "")
            finish = c.finish_reason
        check(len(ids) == 1, f"{what}: chunk ids differ: {ids}")
        check(finish is not None, f"{what}: stream ended without a finish_reason")
        check(not include_usage or usage is not None, f"{what}: include_usage set but no usage chunk")
        return "".join(parts), finish, usage


def check_choices(r, kind, prompt, text, prompt_tokens, n=2):
    """n choices, whole and streamed, as the SDK parses them: each choice by its index is the
    deterministic sim's answer; usage counts the prompt once and sums the completions."""
    kw = dict(model=r.model, max_tokens=MAX_TOKENS, n=n)
    create = (lambda **k: r.client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **k)) if kind == "chat" else (
        lambda **k: r.client.completions.create(prompt=prompt, **k)
    )
    what = f"{kind} n={n}"
    r.requests += 2
    try:
        whole = create(**kw)
        chunks = list(create(stream=True, stream_options={"include_usage": True}, **kw))
    except OpenAIError as e:
        raise CheckFailed(f"{what}: the SDK raised {type(e).__name__}: {e}") from e
    check([c.index for c in whole.choices] == list(range(n)), f"{what}: choices {whole.choices}")
    for c in whole.choices:
        got = c.message.content if kind == "chat" else c.text
        check(got == text, f"{what}: choice {c.index} is {got!r}, want {text!r}")
        check(c.finish_reason == "length", f"{what}: finish_reason {c.finish_reason!r}")
    check(whole.usage.prompt_tokens == prompt_tokens, f"{what}: prompt counted once: {whole.usage}")
    check(whole.usage.completion_tokens == n * MAX_TOKENS, f"{what}: completions summed: {whole.usage}")
    texts, finishes, ids = {}, {}, set()
    for chunk in chunks[:-1]:
        ids.add(chunk.id)
        for c in chunk.choices:
            piece = c.delta.content if kind == "chat" else c.text
            texts[c.index] = texts.get(c.index, "") + (piece or "")
            if c.finish_reason is not None:
                check(c.index not in finishes, f"{what}: two finish reasons for choice {c.index}")
                finishes[c.index] = c.finish_reason
    check(len(ids) == 1, f"{what}: chunk ids differ: {ids}")
    check(texts == {i: text for i in range(n)}, f"{what}: streamed choices {texts}")
    check(finishes == {i: "length" for i in range(n)}, f"{what}: finish reasons {finishes}")
    last = chunks[-1]
    check(last.choices == [] and last.usage is not None, f"{what}: the last chunk is not the usage: {last}")
    check(last.usage.completion_tokens == n * MAX_TOKENS, f"{what}: streamed usage {last.usage}")


def check_usage(what, usage, max_tokens, prompt_tokens=None):
    check(usage.prompt_tokens > 0, f"{what}: prompt_tokens {usage.prompt_tokens}")
    check(usage.completion_tokens == max_tokens, f"{what}: completion_tokens {usage.completion_tokens} != max_tokens {max_tokens}")
    check(
        usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
        f"{what}: total_tokens {usage.total_tokens} != {usage.prompt_tokens} + {usage.completion_tokens}",
    )
    details = usage.prompt_tokens_details
    check(details is not None and details.cached_tokens is not None, f"{what}: no prompt_tokens_details.cached_tokens: {usage}")
    check(0 <= details.cached_tokens <= usage.prompt_tokens, f"{what}: cached_tokens {details.cached_tokens} of {usage.prompt_tokens}")
    if prompt_tokens is not None:
        check(usage.prompt_tokens == prompt_tokens, f"{what}: prompt_tokens {usage.prompt_tokens}, non-streamed said {prompt_tokens}")


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: openai_sdk_check.py BASE_URL MODEL [CA_FILE]")
    r = Runner(*sys.argv[1:])
    summary = {"requests": 0}
    prompts = {
        "chat": "Tell me a short story about a lighthouse keeper.",
        "completions": "The three most important things about distributed systems are",
    }
    for kind, prompt in prompts.items():
        # The reference answer; every other shape of the same request must match it.
        text, finish, usage = r.run(kind, prompt, stream=False)
        what = f"{kind} non-stream"
        check(text, f"{what}: empty text")
        check(finish == "length", f"{what}: finish_reason {finish!r}, want 'length'")
        check_usage(what, usage, MAX_TOKENS)

        for include_usage in (False, True):
            what = f"{kind} stream include_usage={include_usage}"
            s_text, s_finish, s_usage = r.run(kind, prompt, stream=True, include_usage=include_usage)
            check(s_text == text, f"{what}: streamed text differs from non-streamed:\n  stream: {s_text!r}\n  plain:  {text!r}")
            check(s_finish == "length", f"{what}: finish_reason {s_finish!r}, want 'length'")
            if include_usage:
                check_usage(what, s_usage, MAX_TOKENS, usage.prompt_tokens)

        # Stop string: a word from the middle of the answer; the answer must end right before it.
        words = text.split()
        check(len(words) >= 3, f"{kind}: answer too short for a stop-word case: {text!r}")
        word = words[len(words) // 2]
        expected = text[: text.index(word)]
        for stream in (False, True):
            what = f"{kind} stop={word!r} stream={stream}"
            st_text, st_finish, _ = r.run(kind, prompt, stream=stream, stop=[word])
            check(st_text == expected, f"{what}: got {st_text!r}, want the prefix before the stop word {expected!r}")
            check(st_finish == "stop", f"{what}: finish_reason {st_finish!r}, want 'stop'")
        check_choices(r, kind, prompt, text, usage.prompt_tokens)
        summary[kind] = {"text": text, "prompt_tokens": usage.prompt_tokens, "stop_word": word}
    summary["requests"] = r.requests
    summary["ok"] = True
    print(json.dumps(summary))


if __name__ == "__main__":
    try:
        main()
    except CheckFailed as e:
        print(f"openai_sdk_check FAILED: {e}", file=sys.stderr)
        sys.exit(1)
