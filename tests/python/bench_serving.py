"""Runs SGLang's own benchmark client (`python -m sglang.bench_serving`, 0.5.9)
offline and checks its JSON result.

Usage: bench_serving.py [bench_serving args...]   e.g.
  bench_serving.py --base-url http://127.0.0.1:30000 --backend sglang \
      --dataset-name random-ids --num-prompts 200 --random-input-len 64 --random-output-len 32

Adds --tokenizer (the bundled SmolLM2 directory) and --model unless given, and
always --output-file/--output-details (a temp file). Prints one JSON summary
line; exits 1 if any request failed, fewer than the expected number completed,
or the client's re-tokenized output count differs from the generated count.
"""

import argparse
import json
import sys
from pathlib import Path

import common

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "assets" / "tokenizers" / "smollm2-135m-instruct"
MODEL = "smollm2-135m-instruct"


def expected_requests(args):
    # Mirrors bench_serving's defaults: gsp ignores --num-prompts.
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--dataset-name", default="sharegpt")
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--gsp-num-groups", type=int, default=64)
    p.add_argument("--gsp-prompts-per-group", type=int, default=16)
    known, _ = p.parse_known_args(args)
    if known.dataset_name == "generated-shared-prefix":
        return known.gsp_num_groups * known.gsp_prompts_per_group
    return known.num_prompts


def main():
    args = sys.argv[1:]
    if "--tokenizer" not in args:
        # A directory: a tokenizer.json path would send 0.5.9 down a code path that imports torch.
        args += ["--tokenizer", str(TOKENIZER)]
    if "--model" not in args:
        args += ["--model", MODEL]
    want = expected_requests(args)

    result = common.run_bench_serving(args, "bench_serving")

    errors = [e for e in result["errors"] if e]
    summary = {
        "backend": result["backend"],
        "dataset": result["dataset_name"],
        "requests": len(result["errors"]),
        "completed": result["completed"],
        "failed": len(errors),
        "total_input_tokens": result["total_input_tokens"],
        "total_output_tokens": result["total_output_tokens"],
        "total_output_tokens_retokenized": result["total_output_tokens_retokenized"],
        "mean_ttft_ms": round(result["mean_ttft_ms"], 2),
        "median_ttft_ms": round(result["median_ttft_ms"], 2),
        "p99_ttft_ms": round(result["p99_ttft_ms"], 2),
        "mean_tpot_ms": round(result["mean_tpot_ms"], 2),
        "median_tpot_ms": round(result["median_tpot_ms"], 2),
        "median_itl_ms": round(result["median_itl_ms"], 2),
        "mean_itl_ms": round(result.get("mean_itl_ms", 0.0), 2),
        "p99_itl_ms": round(result.get("p99_itl_ms", 0.0), 2),
        # From GET /get_server_info internal_states[0] (its "Accept length:" line); null without.
        "accept_length": result.get("accept_length"),
        "output_throughput": round(result["output_throughput"], 1),
        "duration_s": round(result["duration"], 2),
    }
    print(json.dumps(summary), flush=True)

    problems = []
    if errors:
        problems.append(f"{len(errors)} requests failed, first error: {errors[0]!r}")
    if result["completed"] != want:
        problems.append(f"completed {result['completed']} of {want} requests")
    if result["total_output_tokens_retokenized"] != result["total_output_tokens"]:
        problems.append(
            f"retokenized output {result['total_output_tokens_retokenized']} != generated {result['total_output_tokens']}"
        )
    if problems:
        sys.exit("bench_serving FAILED: " + "; ".join(problems))


if __name__ == "__main__":
    main()
