"""Helpers shared by the Python client scripts that the Rust tests run."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


class CheckFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def run_bench_serving(args, name):
    """Runs `python -m sglang.bench_serving ARGS` offline and returns its JSON result.

    Exits with `NAME FAILED: ...` if it fails or writes no result."""
    with tempfile.TemporaryDirectory(prefix="bench_serving-") as tmp:
        out = Path(tmp) / "result.jsonl"
        # HOME=tmp keeps the gsp dataset cache (~/.cache/sglang) per run: its key
        # ignores the tokenizer's path, so a shared one could serve stale prompts.
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HOME=tmp)
        cmd = [sys.executable, "-m", "sglang.bench_serving", *args, "--output-file", str(out), "--output-details"]
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        # Its report goes to our stderr, so stdout stays a single JSON line.
        proc = subprocess.run(cmd, env=env, stdout=sys.stderr, stderr=sys.stderr)
        if proc.returncode != 0:
            sys.exit(f"{name} FAILED: sglang.bench_serving exited {proc.returncode}")
        if not out.exists():
            sys.exit(f"{name} FAILED: no result file (no request succeeded?)")
        return json.loads(out.read_text().splitlines()[-1])
