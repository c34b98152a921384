"""Runs SGLang's benchmark client (`python -m sglang.bench_serving`, 0.5.9) offline against a
gateway in front of a real engine and prints one JSON summary line, with the requests whose
re-tokenized output differs from the generated count listed under "retokenize_diffs".

Unlike bench_serving.py (for the simulator, whose words re-encode to themselves by design) it
does not fail on a re-tokenized mismatch: a real model can emit a non-canonical token sequence
(e.g. " for" + "c" where the tokenizer would say " forc"), whose text then re-encodes to fewer
tokens. The caller decides, knowing that real_engine_check.py proves exactly, with the engine's
token ids, that the gateway relays every token's text unchanged.

Usage: real_engine_bench.py [bench_serving args...]
Exits 1 if any request failed or fewer than --num-prompts completed.
"""

import json
import os
import sys
from pathlib import Path

import common

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "assets" / "tokenizers" / "smollm2-135m-instruct"
MODEL = "smollm2-135m-instruct"


def main():
    args = sys.argv[1:]
    if "--tokenizer" not in args:
        # A directory: a tokenizer.json path would send 0.5.9 down a code path that imports torch.
        args += ["--tokenizer", str(TOKENIZER)]
    if "--model" not in args:
        args += ["--model", MODEL]
    want = int(args[args.index("--num-prompts") + 1]) if "--num-prompts" in args else 1000

    result = common.run_bench_serving(args, "real_engine_bench")

    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    from transformers import AutoTokenizer  # late: slow to import, and only needed here

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER))
    diffs = []
    for text, n, err in zip(result["generated_texts"], result["output_lens"], result["errors"]):
        if err:
            continue
        re_n = len(tok.encode(text, add_special_tokens=False))
        if re_n != n:
            diffs.append({"generated": n, "retokenized": re_n, "text": text})

    errors = [e for e in result["errors"] if e]
    summary = {
        "backend": result["backend"],
        "requests": len(result["errors"]),
        "completed": result["completed"],
        "failed": len(errors),
        "first_error": errors[0] if errors else None,
        "total_input_tokens": result["total_input_tokens"],
        "total_output_tokens": result["total_output_tokens"],
        "total_output_tokens_retokenized": result["total_output_tokens_retokenized"],
        "retokenize_diffs": diffs,
        "mean_ttft_ms": round(result["mean_ttft_ms"], 2),
        "median_ttft_ms": round(result["median_ttft_ms"], 2),
        "p99_ttft_ms": round(result["p99_ttft_ms"], 2),
        "mean_tpot_ms": round(result["mean_tpot_ms"], 2),
        "output_throughput": round(result["output_throughput"], 1),
        "duration_s": round(result["duration"], 2),
    }
    print(json.dumps(summary), flush=True)

    problems = []
    if errors:
        problems.append(f"{len(errors)} requests failed, first error: {errors[0]!r}")
    if result["completed"] != want:
        problems.append(f"completed {result['completed']} of {want} requests")
    if problems:
        sys.exit("real_engine_bench FAILED: " + "; ".join(problems))


if __name__ == "__main__":
    main()
