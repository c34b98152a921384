"""Prefill/decode disaggregation on simulated workers, two measurements:

itl   Long prompts arriving while many streams decode: ITL p99 of the decoding streams with PD
      (1 prefill + 1 decode sim behind `switchboard serve --pd-disaggregation`) against the same
      two sims co-located (`--worker-urls`, both doing prefill and decode). --streams short chat
      streams (--stream-tokens tokens each, ignore_eos) start together; after --lead-secs, a long
      prompt (--long-words words, ~1 token each, 8 output tokens) arrives every --long-every
      seconds, --long-count times. ITL = gaps between content chunks of the decoding streams.
      The sims run --time-scale (10) times slower than the modelled GPU, so the machine's own
      jitter (a loaded 2-core box, the Python client) is small against a step; every figure is
      reported in model time (measured / time scale).
serve SGLang 0.5.9's bench_serving (random-ids, sglang-oai-chat and sglang backends) against
      1 prefill + 2 decode sims through Switchboard in PD mode and through SMG 1.13 in PD mode
      (`smg launch --pd-disaggregation --prefill URL PORT --decode URL ...`): failures, TTFT, ITL.

Usage:
  python benches/pd.py [--only itl|serve] [--binary target/release/switchboard] [--smg PATH]
The python must have sglang 0.5.9's bench_serving and aiohttp: `bash .ci/python-env.sh | tail -1`.
SMG comes from --smg, else ~/.cache/switchboard/pd-smg-venv/bin/smg (made with pip if missing).
Every process started here runs on 127.0.0.1 and is stopped on exit.
"""

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
PROCS = []


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, listening=None):
    """Starts cmd; with `listening`, waits for the line naming its address and returns it."""
    log("+ " + " ".join(map(str, cmd)))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    PROCS.append(p)
    if listening is None:
        return None
    deadline = time.time() + 30
    for line in p.stdout:
        if line.startswith(listening):
            addr = line[len(listening):].strip()
            # Keep draining stdout so the child never blocks on a full pipe.
            import threading

            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return "http://" + addr
        if time.time() > deadline:
            break
    raise RuntimeError(f"{cmd} did not listen")


def stop_all():
    for p in PROCS:
        p.terminate()
    for p in PROCS:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    PROCS.clear()


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def wait_ok(url, limit=60):
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never answered 200")


def wait_routable(url, limit=90):
    body = json.dumps({"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).encode()
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            req = urllib.request.Request(url + "/v1/chat/completions", body, {"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} never became routable")


SIM_LISTENING = "switchboard sim (simulated SGLang worker) listening on http://"
SERVE_LISTENING = "switchboard listening on http://"


def sim(binary, *flags):
    url = start([binary, "sim", "--port", "0", *flags], SIM_LISTENING)
    wait_ok(url + "/health")
    return url


def prefill_sim(binary, *flags):
    url = sim(binary, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0", *flags)
    return url, get_json(url + "/server_info")["disaggregation_bootstrap_port"]


def gateway(binary, *flags):
    url = start([binary, "serve", "--port", "0", "--log-level", "warn", *flags], SERVE_LISTENING)
    wait_routable(url)
    return url


# ---------------------------------------------------------------- itl


async def stream_chat(session, url, content, max_tokens, gaps=None):
    body = {"model": MODEL, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "messages": [{"role": "user", "content": content}]}
    last = None
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if not chunk.get("choices") or not chunk["choices"][0]["delta"].get("content"):
                continue
            now = time.perf_counter()
            if last is not None and gaps is not None:
                gaps.append((now - last) * 1000)
            last = now


async def itl_workload(url, args):
    gaps = []
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        decoding = [asyncio.create_task(stream_chat(s, url, f"stream {i}: tell me a story", args.stream_tokens, gaps))
                    for i in range(args.streams)]
        await asyncio.sleep(args.lead_secs * args.time_scale)
        longs = []
        for i in range(args.long_count):
            prompt = f"long {i} " + "word " * args.long_words
            longs.append(asyncio.create_task(stream_chat(s, url, prompt, 8)))
            await asyncio.sleep(args.long_every * args.time_scale)
        await asyncio.gather(*decoding, *longs)
    gaps = sorted(g / args.time_scale for g in gaps)
    pick = lambda q: gaps[min(len(gaps) - 1, int(q * len(gaps)))]
    return {"itl_mean_ms": round(statistics.mean(gaps), 2), "itl_p50_ms": round(pick(0.5), 2),
            "itl_p99_ms": round(pick(0.99), 2), "itl_max_ms": round(gaps[-1], 2), "gaps": len(gaps)}


def run_itl(args):
    rows = {}
    ts = ["--time-scale", str(args.time_scale)]
    try:
        a, b = sim(args.binary, *ts), sim(args.binary, *ts)
        rows["co-located (2 sims)"] = asyncio.run(itl_workload(gateway(args.binary, "--worker-urls", a, b), args))
    finally:
        stop_all()
    try:
        p, port = prefill_sim(args.binary, *ts)
        d = sim(args.binary, "--disaggregation-mode", "decode", *ts)
        gw = gateway(args.binary, "--pd-disaggregation", "--prefill", p, str(port), "--decode", d)
        rows["PD (1 prefill + 1 decode)"] = asyncio.run(itl_workload(gw, args))
    finally:
        stop_all()
    return rows


# ---------------------------------------------------------------- serve


def smg_binary(given):
    if given:
        return given
    venv = Path.home() / ".cache" / "switchboard" / "pd-smg-venv"
    smg = venv / "bin" / "smg"
    if not smg.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "smg==1.13.0"], check=True)
    return str(smg)


def bench_serving(url, backend):
    out = subprocess.run(
        [sys.executable, str(REPO / "tests" / "python" / "bench_serving.py"), "--base-url", url, "--backend", backend,
         "--dataset-name", "random-ids", "--num-prompts", "200", "--random-input-len", "128",
         "--random-output-len", "32", "--max-concurrency", "32"],
        capture_output=True, text=True)
    line = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not line:
        raise RuntimeError(f"bench_serving printed no summary: {out.stdout}\n{out.stderr}")
    return json.loads(line[-1])


def run_serve(args):
    rows = {}
    for system in ["switchboard", "smg"]:
        try:
            flags = ["--enable-cache-report", "--time-scale", "0.1"]
            p, port = prefill_sim(args.binary, *flags)
            d1 = sim(args.binary, "--disaggregation-mode", "decode", *flags)
            d2 = sim(args.binary, "--disaggregation-mode", "decode", *flags)
            if system == "switchboard":
                gw = gateway(args.binary, "--pd-disaggregation", "--prefill", p, str(port), "--decode", d1, "--decode", d2)
            else:
                gport = free_port()
                start([smg_binary(args.smg), "launch", "--host", "127.0.0.1", "--port", str(gport), "--pd-disaggregation",
                       "--prefill", p, str(port), "--decode", d1, "--decode", d2, "--log-level", "warn",
                       "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())])
                gw = f"http://127.0.0.1:{gport}"
                wait_routable(gw)
            for backend in ["sglang-oai-chat", "sglang"]:
                rows[f"{system} {backend}"] = bench_serving(gw, backend)
        finally:
            stop_all()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["itl", "serve"])
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "switchboard"))
    ap.add_argument("--smg")
    ap.add_argument("--time-scale", type=float, default=10.0)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--stream-tokens", type=int, default=600)
    ap.add_argument("--lead-secs", type=float, default=0.2)
    ap.add_argument("--long-words", type=int, default=6000)
    ap.add_argument("--long-count", type=int, default=16)
    ap.add_argument("--long-every", type=float, default=0.1)
    args = ap.parse_args()
    result = {}
    try:
        if args.only in (None, "itl"):
            result["itl"] = run_itl(args)
        if args.only in (None, "serve"):
            result["serve"] = run_serve(args)
    finally:
        stop_all()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
