"""Drives a Switchboard gateway in front of a real engine (llama.cpp `llama-server` with
SmolLM2-135M-Instruct) with the official OpenAI SDK: chat and completions, streamed and not,
with and without `stream_options.include_usage`, and a stop string.

Unlike openai_sdk_check.py (written for the simulator) it does not assume every answer runs to
`max_tokens` or that the engine reports `cached_tokens`: a real model may end early on EOS.
Determinism comes from `temperature: 0` and a fixed `seed`, and the requests run one at a time,
so a streamed answer must equal the non-streamed one. Prompt token counts are checked against
the bundled tokenizer (the one the gateway routes with) to prove both sides agree.

Token fidelity: gibberish prompts (like bench_serving's random-ids, 32 tokens, ignore_eos) are
streamed through the gateway and straight to one engine; text and completion_tokens must be
identical both ways. That is what bench_serving's "retokenized == generated" means to check, in
a form a real model cannot break: a model may emit a non-canonical token sequence (" for" + "c"
where the tokenizer says " forc") whose text re-encodes to fewer tokens. Such answers are
listed under "noncanonical", not failed. (llama.cpp's logprobs cannot serve as the proof: for a
character split over two byte tokens it lists only the second token's id.)

Usage: real_engine_check.py BASE_URL MODEL TOKENIZER_DIR ENGINE_URL (one engine behind the gateway)
Prints one JSON summary line; exits 1 with a message on the first failure.
"""

import json
import os
import random
import sys

from common import CheckFailed, check
from openai import OpenAI, OpenAIError
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

MAX_TOKENS = 32
SEED = 1234
SYSTEM = "You are a helpful assistant."
FIDELITY_PROMPTS = 12


class Runner:
    def __init__(self, base_url, model):
        # max_retries=0: a retried request would hide a failed first attempt.
        self.client = OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key="x", max_retries=0, timeout=60)
        self.model = model
        self.requests = 0

    def run(self, kind, prompt, stream, include_usage=False, stop=None):
        """One request; returns (text, finish_reason, usage or None, content chunks)."""
        self.requests += 1
        what = f"{kind} stream={stream} include_usage={include_usage} stop={stop!r}"
        kw = dict(model=self.model, max_tokens=MAX_TOKENS, stream=stream, temperature=0, seed=SEED)
        if stop is not None:
            kw["stop"] = stop
        if include_usage:
            kw["stream_options"] = {"include_usage": True}
        try:
            if kind == "chat":
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
                resp = self.client.chat.completions.create(messages=messages, **kw)
            else:
                resp = self.client.completions.create(prompt=prompt, **kw)
            return self.parse(kind, what, resp, stream, include_usage)
        except OpenAIError as e:
            raise CheckFailed(f"{what}: the SDK raised {type(e).__name__}: {e}") from e

    def parse(self, kind, what, resp, stream, include_usage):
        if not stream:
            want = ChatCompletion if kind == "chat" else Completion
            check(isinstance(resp, want), f"{what}: SDK gave {type(resp).__name__}, not {want.__name__}")
            check(resp.model == self.model, f"{what}: model {resp.model!r}, want {self.model!r}")
            check(len(resp.choices) == 1, f"{what}: {len(resp.choices)} choices")
            c = resp.choices[0]
            text = c.message.content if kind == "chat" else c.text
            check(isinstance(text, str), f"{what}: no text in {resp}")
            check(resp.usage is not None, f"{what}: no usage in a non-streamed response")
            return text, c.finish_reason, resp.usage, None

        want = ChatCompletionChunk if kind == "chat" else Completion
        parts, finish, usage, ids, content_chunks = [], None, None, set(), 0
        for chunk in resp:
            check(isinstance(chunk, want), f"{what}: SDK gave {type(chunk).__name__}, not {want.__name__}")
            check(usage is None, f"{what}: chunk after the one with usage: {chunk}")
            ids.add(chunk.id)
            if chunk.usage is not None and chunk.choices == []:
                # OpenAI's shape: a last chunk with usage and no choices, only when asked for.
                check(include_usage, f"{what}: usage chunk sent without stream_options.include_usage: {chunk}")
                usage = chunk.usage
                continue
            # llama.cpp's /v1/completions puts usage on its finish chunk instead, asked or not; the
            # gateway relays the engine's chunks as they are, so that shape is accepted here.
            check(chunk.usage is None or kind == "completions", f"{what}: usage on a content chunk: {chunk}")
            if kind == "completions" and chunk.usage is not None:
                usage = chunk.usage
            if not chunk.choices:
                continue
            check(len(chunk.choices) == 1, f"{what}: chunk with {len(chunk.choices)} choices: {chunk}")
            c = chunk.choices[0]
            check(finish is None, f"{what}: chunk after finish_reason: {chunk}")
            piece = (c.delta.content if kind == "chat" else c.text) or ""
            content_chunks += bool(piece)
            parts.append(piece)
            finish = c.finish_reason
        check(len(ids) == 1, f"{what}: chunk ids differ: {ids}")
        check(finish is not None, f"{what}: stream ended without a finish_reason")
        check(not include_usage or usage is not None, f"{what}: include_usage set but no usage chunk")
        return "".join(parts), finish, usage, content_chunks


def check_usage(what, usage, finish, prompt_tokens):
    check(usage.prompt_tokens == prompt_tokens, f"{what}: prompt_tokens {usage.prompt_tokens}, the tokenizer counts {prompt_tokens}")
    check(0 < usage.completion_tokens <= MAX_TOKENS, f"{what}: completion_tokens {usage.completion_tokens} (max_tokens {MAX_TOKENS})")
    if finish == "length":
        check(usage.completion_tokens == MAX_TOKENS, f"{what}: finish 'length' but completion_tokens {usage.completion_tokens}")
    check(
        usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
        f"{what}: total_tokens {usage.total_tokens} != {usage.prompt_tokens} + {usage.completion_tokens}",
    )


def chatml(prompt):
    # The bundled template is ChatML (plus a default system prompt, avoided by sending one), so
    # it is rendered here without jinja2, which the test venv does not have.
    return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def stream_text(client, model, prompt):
    """One streamed chat answer to a gibberish prompt: (text, completion_tokens)."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=MAX_TOKENS, temperature=0, seed=SEED,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    text, usage = "", None
    for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            text += c.delta.content or ""
    check(usage is not None, f"no usage chunk for {prompt!r}")
    return text, usage.completion_tokens


def token_fidelity(r, tok, engine_url):
    """Gibberish prompts through the gateway and straight to an engine: the same bytes and
    counts both ways. Returns the answers whose text re-encodes to another token count."""
    engine = OpenAI(base_url=engine_url.rstrip("/") + "/v1", api_key="x", max_retries=0, timeout=60)
    rng = random.Random(SEED)
    noncanonical = []
    for i in range(FIDELITY_PROMPTS):
        prompt = tok.decode([rng.randrange(100, tok.vocab_size) for _ in range(32)])
        what = f"fidelity prompt {i}"
        try:
            via_gw = stream_text(r.client, r.model, prompt)
            direct = stream_text(engine, r.model, prompt)
            r.requests += 1
        except OpenAIError as e:
            raise CheckFailed(f"{what}: the SDK raised {type(e).__name__}: {e}") from e
        check(via_gw == direct, f"{what}: gateway and engine differ:\n  gateway: {via_gw!r}\n  engine:  {direct!r}")
        text, n = via_gw
        check(n == MAX_TOKENS, f"{what}: completion_tokens {n} with ignore_eos")
        re_n = len(tok.encode(text, add_special_tokens=False))
        if re_n != n:
            noncanonical.append({"generated": n, "retokenized": re_n, "text": text})
    return noncanonical


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: real_engine_check.py BASE_URL MODEL TOKENIZER_DIR ENGINE_URL")
    base_url, model, tok_dir, engine_url = sys.argv[1:]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer  # late: only after the offline switches are set

    tok = AutoTokenizer.from_pretrained(tok_dir)
    r = Runner(base_url, model)
    summary = {}
    prompts = {
        "chat": "Write three sentences about a lighthouse keeper and the sea.",
        "completions": "Once upon a time, in a small village by the sea, there lived",
    }
    for kind, prompt in prompts.items():
        ids = tok.encode(chatml(prompt) if kind == "chat" else prompt, add_special_tokens=False)
        # The reference answer; every other shape of the same request must match it.
        text, finish, usage, _ = r.run(kind, prompt, stream=False)
        what = f"{kind} non-stream"
        check(text.strip(), f"{what}: empty text")
        check(finish in ("length", "stop"), f"{what}: finish_reason {finish!r}")
        check_usage(what, usage, finish, len(ids))

        for include_usage in (False, True):
            what = f"{kind} stream include_usage={include_usage}"
            s_text, s_finish, s_usage, chunks = r.run(kind, prompt, stream=True, include_usage=include_usage)
            check(s_text == text, f"{what}: streamed text differs from non-streamed:\n  stream: {s_text!r}\n  plain:  {text!r}")
            check(s_finish == finish, f"{what}: finish_reason {s_finish!r}, non-streamed said {finish!r}")
            if include_usage:
                check_usage(what, s_usage, s_finish, len(ids))
                check(s_usage.completion_tokens == usage.completion_tokens, f"{what}: completion_tokens {s_usage.completion_tokens}, non-streamed said {usage.completion_tokens}")
                # One token per chunk at most (llama.cpp sends each token as it comes).
                check(chunks <= s_usage.completion_tokens, f"{what}: {chunks} content chunks for {s_usage.completion_tokens} tokens")

        # Stop string: a word from the middle of the answer; the answer must end right before
        # its first occurrence, and say so with finish_reason "stop".
        words = [w for w in text.split() if len(w) >= 3]
        check(len(words) >= 3, f"{kind}: answer too short for a stop-word case: {text!r}")
        word = words[len(words) // 2]
        expected = text[: text.index(word)]
        for stream in (False, True):
            what = f"{kind} stop={word!r} stream={stream}"
            st_text, st_finish, st_usage, _ = r.run(kind, prompt, stream=stream, stop=[word], include_usage=stream)
            check(st_text == expected, f"{what}: got {st_text!r}, want the prefix before the stop word {expected!r}")
            check(st_finish == "stop", f"{what}: finish_reason {st_finish!r}, want 'stop'")
            check(st_usage is not None and st_usage.completion_tokens < usage.completion_tokens, f"{what}: usage {st_usage} not shorter than {usage}")
        summary[kind] = {
            "text": text,
            "finish_reason": finish,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "stop_word": word,
        }
    summary["noncanonical"] = token_fidelity(r, tok, engine_url)
    summary["requests"] = r.requests
    summary["ok"] = True
    print(json.dumps(summary))


if __name__ == "__main__":
    try:
        main()
    except CheckFailed as e:
        print(f"real_engine_check FAILED: {e}", file=sys.stderr)
        sys.exit(1)
