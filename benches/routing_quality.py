#!/usr/bin/env python3
"""Routing quality: cache reuse, TTFT and load balance per routing policy.

Runs every configuration against FOUR FRESH simulated SGLang workers
(`switchboard sim`, cold caches, identical seeds) behind one gateway:

  * Switchboard `serve --policy P` for P in prefix_cost, cache_aware, round_robin
  * SMG 1.13 (`smg launch --policy cache_aware`, SGLang's own Rust gateway), from a
    separate cached venv under ${XDG_CACHE_HOME:-~/.cache}/switchboard/smg-venv

Three workloads per configuration:

  gsp      SGLang's `python -m sglang.bench_serving --dataset-name generated-shared-prefix`
           (64 groups x 16 prompts, 2048-token system prompt, 128-token question,
           32-token output, --backend sglang i.e. POST /generate with text, streaming,
           --max-concurrency 32, default warm-up of 1 request).
  gsp_ids  The same gsp shape built by the client below as token ids (shuffled), so neither
           gateway nor sims tokenize: isolates routing from tokenizer CPU (bench_serving 0.5.9's
           gsp cannot send ids).
  zipf     A small async client in this file: the same kind of shared-prefix prompts,
           built as token ids (random ids from the tokenizer's vocabulary, seeded), each
           request's group drawn from a zipf distribution (P(rank k) ~ 1/k^s, s = 1.0 over
           64 groups, group 0 hottest), sent as POST /generate {"input_ids"} with
           streaming at a fixed concurrency; it measures TTFT itself (time to the first
           SSE data chunk). No warm-up.

Measured per run, from the sims' own /metrics after the run (summed over the 4 sims):
  cached share = sum sglang:cached_tokens_total / sum sglang:prompt_tokens_total
  (over EVERYTHING the sims served, i.e. including bench_serving's single warm-up
  request), and per-worker sglang:num_requests_total (load balance).

TTFT: the sims run with --time-scale T (default 1.0; every modelled GPU step takes
T x its modelled time), so the client-side wall-clock TTFT is in scaled time. The
tables give wall-clock ms as measured and "model ms" = wall / T (gateway, client and
network overhead, which do not scale, are inflated by 1/T in that figure). On 2 cores
T = 0.25 made client/tokenizer CPU, not routing, dominate TTFT, hence the default 1.0.

Several replicas (--replicas N, N > 1): per workload and policy, rows for the front doors in
--fronts (default single,spread,sticky), each against 4 fresh sims:
  single   one gateway (the single-replica row, as without --replicas)
  spread   N gateway processes (same flags, different ports) in front of the same 4 sims; the
           client sends request i to replica i mod N, blind to the prompt like a plain Kubernetes
           Service (kube-proxy picks a pod per connection, not per request, but just as blindly)
  sticky   the same N gateways; the client picks the replica by hashing the request's
           shared-prefix group id (sha1("group-<g>") mod N), as session/prefix hashing at a front
           load balancer would
KV events (--kv-events off,on; default off): with `on` every sim runs with SGLang's
`--kv-events-config {"publisher": "zmq", "endpoint": "tcp://*:PORT", "replay_endpoint": ...}` and
`--page-size 16` (so do the sims of the `off` rows) and the gateways subscribe
(no gateway flag needed: they read it from /server_info) and route on the exact index; the run
starts once every gateway follows every sim. Per row, from the gateways' /metrics: the share of
requests whose predicted cached tokens were within one page (16 tokens) of the worker's reported
`cached_tokens` (switchboard_cache_prediction_error_tokens: -16 < reported - predicted <= 16).
Each row also counts shared-prefix misses: requests whose meta_info.cached_tokens is below half
the system prompt (at least one per group used). --gateway-args "..." adds flags to every
`switchboard serve` (e.g. --load-poll-interval-ms 0).
Only the script's own client spreads requests, so spread/sticky rows are run for gsp_ids and
zipf only: gsp (bench_serving, one --base-url) gets its single row and is skipped for the
others. SMG likewise gets only its single row.

KV sizing: a group needs ~ 2048 + 16 x (128 + 32) = 4608 tokens when its system
prompt and every prompt's question + output stay cached, so --kv-capacity-tokens
16 x 4608 = 73728 holds ~16 of the 64 groups per sim (a quarter each).

Usage:
  python benches/routing_quality.py [--policies prefix_cost,cache_aware,round_robin,smg]
      [--skip-smg] [--quick] [--out results.json] [--time-scale 1.0] [--concurrency 32]
      [--workloads gsp,gsp_ids,zipf] [--replicas 3 [--fronts single,spread,sticky]]
      [--gateway-args "--load-poll-interval-ms 0"] [--kv-events off,on]
      [--groups 32 --prompts-per-group 16 --system-len 1024 --kv-capacity 12288]

The python must have sglang 0.5.9's bench_serving and aiohttp: `bash .ci/python-env.sh | tail -1`.
"""

import argparse
import asyncio
import bisect
import datetime
import hashlib
import json
import os
import platform
import random
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = REPO / "assets" / "tokenizers" / "smollm2-135m-instruct"
MODEL = "smollm2-135m-instruct"
SWITCHBOARD_POLICIES = ["prefix_cost", "cache_aware", "round_robin", "consistent_hash", "power_of_two", "random"]
DEFAULT_POLICIES = ["prefix_cost", "cache_aware", "round_robin", "smg"]
SMG_VERSION = "1.13.0"

RAN = []  # every command this script started, in order


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_logged(cmd, **kw):
    RAN.append(" ".join(shlex.quote(str(c)) for c in cmd))
    log("+ " + RAN[-1])


# ---------------------------------------------------------------- processes


def default_binary():
    """Where `cargo build --release` (and `cargo bench`) put the binary: $CARGO_TARGET_DIR or target/."""
    target = Path(os.environ.get("CARGO_TARGET_DIR") or "target")
    return (target if target.is_absolute() else REPO / target) / "release" / "switchboard"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")


class Procs:
    """Every process started for one configuration; stop() ends them all (bounded)."""

    def __init__(self, logdir):
        self.logdir = Path(logdir)
        self.procs = []

    def start(self, name, cmd, env=None):
        run_logged(cmd)
        logf = open(self.logdir / f"{name}.log", "wb")
        p = subprocess.Popen(
            [str(c) for c in cmd], stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )
        self.procs.append((name, p, logf))
        return p

    def log_text(self, name):
        try:
            return (self.logdir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def check_alive(self):
        for name, p, _ in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}:\n{self.log_text(name)[-3000:]}")

    def stop(self):
        for _, p, _ in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        for name, p, logf in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"  {name} (pid {p.pid}) ignored SIGTERM; killing it")
                p.kill()
                p.wait(timeout=5)
            logf.close()
        self.procs = []


def start_listening(procs, name, cmd, health, timeout=30):
    """Starts `switchboard sim|serve ... --port 0`, reads the address it prints once bound
    (`switchboard listening on http://ADDR`, `switchboard sim (...) listening on http://ADDR`),
    then waits for `health` to answer 200. The same steps as benches/common/procs.rs."""
    procs.start(name, [*cmd, "--host", "127.0.0.1", "--port", "0"])
    deadline = time.monotonic() + timeout
    while True:
        procs.check_alive()
        for line in procs.log_text(name).splitlines():
            if line.startswith("switchboard") and "listening on http://" in line:
                url = "http://" + line.rsplit("listening on http://", 1)[1].strip().rstrip("/")
                wait_until(lambda: http_get(url + health)[0] == 200, timeout, f"{name} {health}", procs)
                return url
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not report its address in {timeout} s")
        time.sleep(0.05)


def start_sims(procs, binary, n, kv_capacity, time_scale, kv_events=False, page_size=None):
    def events():
        if not kv_events:
            return []
        # With a replay socket a gateway is in sync on joining (the buffer starts at seq 0);
        # without one it waits for the first live batch.
        return ["--kv-events-config", json.dumps({"publisher": "zmq", "endpoint": f"tcp://*:{free_port()}",
                                                  "replay_endpoint": f"tcp://*:{free_port()}"})]

    return [
        start_listening(procs, f"sim{i}", [binary, "sim", "--enable-metrics", "--model-name", MODEL, "--kv-capacity-tokens", kv_capacity,
                                           "--time-scale", time_scale, *events(),
                                           *(["--page-size", page_size] if page_size else [])], "/health")
        for i in range(n)
    ]


def metric_lines(text, name):
    """(labels, value) of every sample of `name` in a Prometheus text page."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels = line[len(name):].split("}", 1)[0] if line[len(name)] == "{" else ""
            out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def wait_subscribed(procs, bases, n):
    """Every gateway follows all n sims' KV events and none is stale."""
    def ok():
        for b in bases:
            text = http_get(b + "/metrics")[1]
            if len(metric_lines(text, "switchboard_kv_index_blocks")) < n:
                return False
            if any(v != 0 for _, v in metric_lines(text, "switchboard_kv_events_stale_workers")):
                return False
        return True

    wait_until(ok, 60, "gateways subscribed to every sim's KV events", procs)


def prediction_accuracy(bases, page=16):
    """Requests whose prediction was within one page of the worker's report, over all gateways."""
    within = count = 0.0
    for b in bases:
        text = http_get(b + "/metrics", timeout=5)[1]
        buckets = metric_lines(text, "switchboard_cache_prediction_error_tokens_bucket")
        le = {lab.split('le="', 1)[1].split('"', 1)[0]: v for lab, v in buckets if 'le="' in lab}
        within += le.get(f"{page}", 0.0) - le.get(f"-{page}", 0.0)
        count += sum(v for _, v in metric_lines(text, "switchboard_cache_prediction_error_tokens_count"))
    return {"predicted_within_page": within / count if count else float("nan"), "predictions": int(count)}


def wait_until(pred, timeout, what, procs):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        procs.check_alive()
        try:
            if pred():
                return
        except (OSError, urllib.error.URLError, ValueError) as e:
            last = e
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what} (last error: {last})")


def start_gateway(procs, binary, policy, worker_urls, smg_bin, name="gateway", extra=()):
    n = len(worker_urls)
    if policy == "smg":
        # SMG is not ours: it gets a port picked here, as it cannot report one it bound itself.
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        mport = free_port()
        cmd = [smg_bin, "launch", "--host", "127.0.0.1", "--port", port, "--worker-urls", *worker_urls,
               "--policy", "cache_aware", "--prometheus-host", "127.0.0.1", "--prometheus-port", mport,
               "--log-level", "warn"]
        procs.start(name, cmd)

        def ready():
            st, body = http_get(base + "/readiness")
            return st == 200 and json.loads(body).get("healthy_workers", 0) >= n

        wait_until(ready, 90, "SMG /readiness with all workers", procs)
        # SMG also checks the model name; make sure it lists the sims' one.
        st, body = http_get(base + "/v1/models")
        if MODEL not in body:
            raise RuntimeError(f"SMG /v1/models does not list {MODEL}: {body[:300]}")
    else:
        cmd = [binary, "serve", "--policy", policy, "--log-level", "warn", *extra, "--worker-urls", *worker_urls]
        base = start_listening(procs, name, cmd, "/readiness")
    return base


def scrape_sims(urls):
    out = []
    for u in urls:
        _, text = http_get(u + "/metrics", timeout=5)
        vals = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in ("sglang:cached_tokens_total", "sglang:prompt_tokens_total", "sglang:num_requests_total",
                        "sglang:generation_tokens_total"):
                vals[name] = vals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        out.append({
            "url": u,
            "requests": int(vals.get("sglang:num_requests_total", 0)),
            "prompt_tokens": int(vals.get("sglang:prompt_tokens_total", 0)),
            "cached_tokens": int(vals.get("sglang:cached_tokens_total", 0)),
            "generation_tokens": int(vals.get("sglang:generation_tokens_total", 0)),
        })
    return out


def summarize_sims(per_worker):
    prompt = sum(w["prompt_tokens"] for w in per_worker)
    cached = sum(w["cached_tokens"] for w in per_worker)
    reqs = [w["requests"] for w in per_worker]
    return {
        "cached_share": cached / prompt if prompt else 0.0,
        "cached_tokens": cached,
        "prompt_tokens": prompt,
        "requests_per_worker": reqs,
        "max_min_ratio": (max(reqs) / min(reqs)) if min(reqs) > 0 else float("inf"),
        "per_worker": per_worker,
    }


# ---------------------------------------------------------------- workloads


def run_gsp(base, args, home, logdir, tag):
    w = args.workload
    out = Path(logdir) / f"bench_serving-{tag}.jsonl"
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", base,
           "--dataset-name", "generated-shared-prefix",
           "--gsp-num-groups", w["groups"], "--gsp-prompts-per-group", w["prompts_per_group"],
           "--gsp-system-prompt-len", w["system_len"], "--gsp-question-len", w["question_len"],
           "--gsp-output-len", w["output_len"], "--max-concurrency", args.concurrency,
           "--seed", args.seed, "--tokenizer", TOKENIZER, "--model", MODEL, "--disable-tqdm",
           "--output-file", out, "--output-details"]
    run_logged(cmd)
    # HOME: sglang caches gsp prompts under ~/.cache keyed without the tokenizer; a private
    # HOME (shared by this script's runs: same seed, same tokenizer) keeps foreign caches out.
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HOME=str(home))
    with open(Path(logdir) / f"bench_serving-{tag}.log", "wb") as lf:
        p = subprocess.run([str(c) for c in cmd], env=env, stdout=lf, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=args.run_timeout)
    if p.returncode != 0 or not out.exists():
        tail = (Path(logdir) / f"bench_serving-{tag}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"bench_serving exited {p.returncode}:\n{tail}")
    r = json.loads(out.read_text().splitlines()[-1])
    errors = [e for e in r.get("errors", []) if e]
    return {
        "requests": len(r.get("errors", [])),
        "completed": r["completed"],
        "failed": len(errors),
        "first_error": errors[0] if errors else None,
        "total_input_tokens": r["total_input_tokens"],
        "ttft_p50_ms": r["median_ttft_ms"],
        "ttft_p99_ms": r["p99_ttft_ms"],
        "ttft_mean_ms": r["mean_ttft_ms"],
        "duration_s": r["duration"],
        "output_throughput": r["output_throughput"],
    }


def load_vocab_ids():
    tj = json.loads((TOKENIZER / "tokenizer.json").read_text())
    ids = set(tj["model"]["vocab"].values())
    ids.update(t["id"] for t in tj.get("added_tokens", []))
    return sorted(ids)


def make_plans(args):
    """Deterministic requests, [(group, input_ids)] per own-client workload:
    gsp_ids = bench_serving's gsp shape as token ids (every group x prompts_per_group, shuffled),
    zipf = zipf_requests requests whose group is drawn from zipf(s)."""
    w = args.workload
    rng = random.Random(args.seed)
    vocab = load_vocab_ids()
    g = w["groups"]
    systems = [rng.choices(vocab, k=w["system_len"]) for _ in range(g)]
    gsp = [(grp, systems[grp] + rng.choices(vocab, k=w["question_len"]))
           for grp in range(g) for _ in range(w["prompts_per_group"])]
    rng.shuffle(gsp)
    weights = [1.0 / (k + 1) ** args.zipf_s for k in range(g)]
    cum = []
    acc = 0.0
    for x in weights:
        acc += x
        cum.append(acc)
    plan = []
    for _ in range(w["zipf_requests"]):
        grp = min(bisect.bisect_left(cum, rng.random() * acc), g - 1)
        plan.append((grp, systems[grp] + rng.choices(vocab, k=w["question_len"])))
    return {"gsp_ids": gsp, "zipf": plan}


def sticky_replica(group, n):
    """The replica a prefix-hashing front door sends a group to: a stable hash of its id."""
    return int.from_bytes(hashlib.sha1(f"group-{group}".encode()).digest()[:8], "big") % n


def replica_for(front, i, group, n):
    """Request i of the plan (shared-prefix group `group`) -> index of the gateway replica."""
    if n == 1 or front == "single":
        return 0
    if front == "spread":
        return i % n
    if front == "sticky":
        return sticky_replica(group, n)
    raise ValueError(f"unknown front {front}")


async def zipf_client(bases, plan, output_len, concurrency, timeout, front="single"):
    import aiohttp

    results = []
    queue = list(enumerate(plan))
    queue.reverse()
    urls = [b + "/generate" for b in bases]
    tmo = aiohttp.ClientTimeout(total=timeout)

    async def one(session, i, grp, ids):
        replica = replica_for(front, i, grp, len(urls))
        url = urls[replica]
        body = {"input_ids": ids, "stream": True,
                "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0.0}}
        st = time.perf_counter()
        ttft = None
        err = None
        done = False
        cached = None
        try:
            async with session.post(url, json=body) as resp:
                if resp.status != 200:
                    err = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                else:
                    async for raw in resp.content:
                        line = raw.strip()
                        if not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            done = True
                            continue
                        if ttft is None:
                            ttft = time.perf_counter() - st
                        chunk = json.loads(data)
                        meta = chunk.get("meta_info") or {}
                        if "cached_tokens" in meta:
                            cached = meta["cached_tokens"]
                        if "error" in chunk:
                            err = str(chunk["error"])[:200]
                        elif meta.get("finish_reason"):
                            done = True
        except Exception as e:  # noqa: BLE001 - reported per request
            err = f"{type(e).__name__}: {e}"
        if err is None and (ttft is None or not done):
            err = "stream ended early"
        results.append({"group": grp, "replica": replica, "cached_tokens": cached, "ttft": ttft,
                        "latency": time.perf_counter() - st, "error": err})

    async def worker(session):
        while queue:
            i, (grp, ids) = queue.pop()
            await one(session, i, grp, ids)

    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn, timeout=tmo) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        dur = time.perf_counter() - t0
    return results, dur


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_own_client(bases, args, plan, workload, front="single"):
    what = f"zipf s={args.zipf_s:g}" if workload == "zipf" else "gsp shape, uniform, shuffled"
    if len(bases) == 1:
        where = f"{bases[0]}/generate"
    else:
        how = "request i -> replica i mod N" if front == "spread" else "replica = sha1(group id) mod N"
        where = f"{{{', '.join(bases)}}}/generate ({front}: {how})"
    RAN.append(f"[in-process client, {workload}] {len(plan)} x POST {where} input_ids stream, {what}, "
               f"seed {args.seed}, concurrency {args.concurrency}, max_new_tokens {args.workload['output_len']}")
    log("+ " + RAN[-1])
    results, dur = asyncio.run(zipf_client(bases, plan, args.workload["output_len"], args.concurrency,
                                           args.run_timeout, front))
    ok = [r for r in results if r["error"] is None]
    errs = [r["error"] for r in results if r["error"] is not None]
    ttfts = [r["ttft"] * 1000 for r in ok]
    return {
        "requests": len(results),
        "completed": len(ok),
        "failed": len(errs),
        "first_error": errs[0] if errs else None,
        "ttft_p50_ms": statistics.median(ttfts) if ttfts else float("nan"),
        "ttft_p99_ms": pct(ttfts, 99),
        "ttft_mean_ms": statistics.fmean(ttfts) if ttfts else float("nan"),
        "duration_s": dur,
        "requests_per_replica": [sum(1 for r in results if r["replica"] == k) for k in range(len(bases))],
        # Requests that did not find (at least half of) their group's shared system prompt cached,
        # per the worker's own meta_info.cached_tokens: one per group is the minimum.
        "prefix_misses": sum(1 for r in ok if (r["cached_tokens"] or 0) < args.workload["system_len"] // 2),
        "groups_used": len({r["group"] for r in results}),
    }


# ---------------------------------------------------------------- driver


def one_config(policy, workload, args, binary, smg_bin, home, logroot, plan, front="single", kv_events=False):
    replicas = 1 if front == "single" else args.replicas
    tag = f"{workload}-{policy}" + ("-events" if kv_events else "") + ("" if front == "single" else f"-{front}{replicas}")
    logdir = Path(logroot) / tag
    logdir.mkdir(parents=True, exist_ok=True)
    gw = 'SMG ' + SMG_VERSION + ' cache_aware' if policy == 'smg' else 'switchboard ' + policy
    log(f"\n=== {tag}: 4 fresh sims + {gw}" + ("" if front == "single" else f" x {replicas} replicas, {front}"))
    procs = Procs(logdir)
    try:
        urls = start_sims(procs, binary, args.workers, args.kv_capacity, args.time_scale, kv_events,
                          args.sim_page_size)
        extra = shlex.split(args.gateway_args)
        if front == "single":
            bases = [start_gateway(procs, binary, policy, urls, smg_bin, extra=extra)]
        else:
            bases = [start_gateway(procs, binary, policy, urls, smg_bin, name=f"gateway{k}", extra=extra)
                     for k in range(replicas)]
        if kv_events:
            wait_subscribed(procs, bases, len(urls))
        before = scrape_sims(urls)
        if any(w["requests"] for w in before):
            raise RuntimeError(f"sims not cold: {before}")
        if workload == "gsp":
            client = run_gsp(bases[0], args, home, logdir, tag)
        else:
            client = run_own_client(bases, args, plan[workload], workload, front)
        procs.check_alive()
        sims = summarize_sims(scrape_sims(urls))
        accuracy = prediction_accuracy(bases) if policy != "smg" else {}
    finally:
        procs.stop()
    res = {"policy": policy, "workload": workload, "front": front, "replicas": replicas, "kv_events": kv_events,
           **client, **sims, **accuracy}
    res["ttft_p50_model_ms"] = res["ttft_p50_ms"] / args.time_scale
    res["ttft_p99_model_ms"] = res["ttft_p99_ms"] / args.time_scale
    log(f"  -> completed {res['completed']}/{res['requests']}, cached {res['cached_share']:.1%}, "
        f"TTFT p50 {res['ttft_p50_ms']:.1f} ms p99 {res['ttft_p99_ms']:.1f} ms (wall), "
        f"predicted within a page {res.get('predicted_within_page', float('nan')):.1%}, "
        f"requests/worker {res['requests_per_worker']}"
        + (f", requests/replica {res['requests_per_replica']}" if replicas > 1 else ""))
    return res


def ensure_smg():
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "switchboard" / "smg-venv"
    smg = cache / "bin" / "smg"
    marker = cache / ".complete"

    def installed():
        if not (marker.exists() and smg.exists()):
            return False
        r = subprocess.run([str(cache / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('smg'))"],
                           capture_output=True, text=True, timeout=60)
        return r.stdout.strip() == SMG_VERSION

    if not installed():
        log(f"installing smg=={SMG_VERSION} into {cache}")
        import shutil
        shutil.rmtree(cache, ignore_errors=True)
        cmd = ["python3", "-m", "venv", str(cache)]
        run_logged(cmd)
        subprocess.run(cmd, check=True, timeout=300)
        cmd = [str(cache / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", f"smg=={SMG_VERSION}"]
        run_logged(cmd)
        subprocess.run(cmd, check=True, timeout=900)
        marker.touch()
    return smg


def fmt_table(rows, workload, time_scale):
    lines = [
        f"| gateway / policy | cached share | TTFT p50 ms (wall) | TTFT p99 ms (wall) | TTFT p50 ms (model = wall/{time_scale:g}) "
        f"| TTFT p99 ms (model) | requests per worker | max/min | predicted within a page | completed |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        if r["workload"] != workload or r.get("front", "single") != "single":
            continue
        name = f"SMG {SMG_VERSION} cache_aware" if r["policy"] == "smg" else f"Switchboard {policy_name(r)}"
        lines.append(
            f"| {name} | {r['cached_share']:.1%} | {r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
            f"{r['ttft_p50_model_ms']:.0f} | {r['ttft_p99_model_ms']:.0f} | "
            f"{' / '.join(str(x) for x in r['requests_per_worker'])} | {r['max_min_ratio']:.2f} | "
            f"{within_page(r)} | {r['completed']}/{r['requests']} |")
    return "\n".join(lines)


def policy_name(r):
    return r["policy"] + (" (KV events)" if r.get("kv_events") else "")


def within_page(r):
    v = r.get("predicted_within_page")
    return "-" if v is None or v != v else f"{v:.1%}"


def front_name(r):
    if r["front"] == "single":
        return "1 gateway"
    how = "round-robin per request" if r["front"] == "spread" else "sha1(group) mod N"
    return f"{r['replicas']} gateways, {r['front']} ({how})"


def fmt_replica_table(rows, workload):
    lines = [
        "| policy | front door | cached share | TTFT p50 ms (wall) | TTFT p99 ms (wall) | requests per worker "
        "| max/min | requests per replica | shared-prefix misses (min = groups) | predicted within a page | completed |",
        "|---|---|---:|---:|---:|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        if r["workload"] != workload or r["policy"] == "smg":
            continue
        lines.append(
            f"| {policy_name(r)} | {front_name(r)} | {r['cached_share']:.1%} | {r['ttft_p50_ms']:.1f} | "
            f"{r['ttft_p99_ms']:.1f} | {' / '.join(str(x) for x in r['requests_per_worker'])} | "
            f"{r['max_min_ratio']:.2f} | {' / '.join(str(x) for x in r.get('requests_per_replica', [r['requests']]))} | "
            f"{r.get('prefix_misses', '?')} ({r.get('groups_used', '?')}) | {within_page(r)} | "
            f"{r['completed']}/{r['requests']} |")
    return "\n".join(lines)


def acceptance(rows, quick):
    # The checks are about one gateway; rows with several replicas are reported, not checked.
    by = {(r["workload"], r["policy"]): r for r in rows
          if r.get("front", "single") == "single" and not r.get("kv_events")}
    checks = []

    def add(name, ok, detail):
        checks.append({"check": name, "pass": ok, "detail": detail})

    for wl in ("gsp", "gsp_ids"):
        pc, ca, rr = by.get((wl, "prefix_cost")), by.get((wl, "cache_aware")), by.get((wl, "round_robin"))
        for r in (pc, ca):
            if r:
                add(f"{wl} {r['policy']} cached share >= 85%", r["cached_share"] >= 0.85, f"{r['cached_share']:.1%}")
        if rr and (pc or ca):
            best = min(x["cached_share"] for x in (pc, ca) if x)
            add(f"{wl} round_robin cached share far lower", rr["cached_share"] <= best - 0.25,
                f"{rr['cached_share']:.1%} (vs {best:.1%})")
        if pc and rr:
            add(f"{wl} TTFT p50 prefix_cost <= 0.5 x round_robin", pc["ttft_p50_ms"] <= 0.5 * rr["ttft_p50_ms"],
                f"{pc['ttft_p50_ms']:.1f} vs {rr['ttft_p50_ms']:.1f} ms "
                f"(ratio {pc['ttft_p50_ms'] / rr['ttft_p50_ms']:.2f})")
    z = by.get(("zipf", "prefix_cost"))
    if z:
        add("zipf prefix_cost busiest/idlest worker <= 2", z["max_min_ratio"] <= 2.0,
            f"{z['requests_per_worker']} -> {z['max_min_ratio']:.2f}")
        add("zipf prefix_cost cached share >= 75%", z["cached_share"] >= 0.75, f"{z['cached_share']:.1%}")
    for wl in ("gsp", "gsp_ids"):
        smg = by.get((wl, "smg"))
        if not smg:
            continue
        for pol in ("prefix_cost", "cache_aware"):
            r = by.get((wl, pol))
            if r:
                add(f"{wl} {pol} beats SMG on cached share", r["cached_share"] > smg["cached_share"],
                    f"{r['cached_share']:.1%} vs {smg['cached_share']:.1%}")
                add(f"{wl} {pol} beats SMG on TTFT p99", r["ttft_p99_ms"] < smg["ttft_p99_ms"],
                    f"{r['ttft_p99_ms']:.1f} vs {smg['ttft_p99_ms']:.1f} ms")
    for r in rows:
        if r.get("kv_events") and r.get("front", "single") == "single":
            v = r.get("predicted_within_page", float("nan"))
            add(f"{r['workload']} {r['policy']} with KV events: >= 95% predicted within a page", v >= 0.95, f"{v:.1%}")
            approx = by.get((r["workload"], r["policy"]))
            if approx:
                add(f"{r['workload']} {r['policy']} with KV events: cached share >= approximate",
                    r["cached_share"] >= approx["cached_share"],
                    f"{r['cached_share']:.1%} vs {approx['cached_share']:.1%}")
    if quick:
        for c in checks:
            c["detail"] += " (quick workload: thresholds are for the full one)"
    return checks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                    help=f"comma list from {SWITCHBOARD_POLICIES + ['smg']} (default: %(default)s)")
    ap.add_argument("--skip-smg", action="store_true", help="drop smg from --policies")
    ap.add_argument("--workloads", default="gsp,gsp_ids,zipf",
                    help="comma list of gsp (bench_serving, text), gsp_ids (same shape as token ids, own client), "
                         "zipf (own client) (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="small workload (16 groups x 4 prompts) for a smoke test")
    ap.add_argument("--out", default="routing_quality.json", help="JSON results file (default: %(default)s)")
    ap.add_argument("--binary", default=str(default_binary()),
                    help="switchboard to run, built with `cargo build --release` when missing (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--time-scale", type=float, default=1.0,
                    help="sims' --time-scale (default %(default)s: on 2 cores, 0.25 shrinks the modelled GPU time "
                         "until client and tokenizer CPU dominate TTFT)")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--zipf-s", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kv-capacity", type=int, default=None,
                    help="per-sim KV tokens (default: 16 groups' worth, computed)")
    ap.add_argument("--run-timeout", type=float, default=600, help="limit for one workload run, seconds")
    ap.add_argument("--log-dir", default=None, help="keep process logs here (default: a temp dir, removed)")
    ap.add_argument("--replicas", type=int, default=1,
                    help="gateway processes in front of the same sims for the spread/sticky rows (default %(default)s)")
    ap.add_argument("--fronts", default=None,
                    help="with --replicas > 1: comma list of single (1 gateway), spread (request i -> replica "
                         "i mod N), sticky (replica = hash of the prefix group) (default: single,spread,sticky)")
    ap.add_argument("--kv-events", default="off",
                    help="comma list of off (approximate index) and on (sims publish KV events, gateways route on "
                         "them) (default: %(default)s)")
    ap.add_argument("--sim-page-size", type=int, default=None,
                    help="sims' --page-size (default: the sim's 1; 16, the gateway's page, when --kv-events has on: "
                         "the exact index needs the workers' page size to match --prefix-page-size)")
    ap.add_argument("--groups", type=int, default=None, help="shared-prefix groups (default 64; 16 with --quick)")
    ap.add_argument("--prompts-per-group", type=int, default=None, help="default 16 (4 with --quick)")
    ap.add_argument("--system-len", type=int, default=None, help="system prompt tokens (default 2048; 1024 --quick)")
    ap.add_argument("--gateway-args", default="",
                    help="extra flags for every `switchboard serve`, e.g. \"--load-poll-interval-ms 0\" (default: none)")
    args = ap.parse_args()

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.skip_smg:
        policies = [p for p in policies if p != "smg"]
    for p in policies:
        if p not in SWITCHBOARD_POLICIES + ["smg"]:
            ap.error(f"unknown policy {p}")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if args.replicas < 1:
        ap.error("--replicas must be >= 1")
    if args.replicas == 1:
        if args.fronts not in (None, "single"):
            ap.error("--fronts needs --replicas > 1")
        fronts = ["single"]
    else:
        fronts = [f.strip() for f in (args.fronts or "single,spread,sticky").split(",") if f.strip()]
        for f in fronts:
            if f not in ("single", "spread", "sticky"):
                ap.error(f"unknown front {f}")

    if args.quick:
        w = dict(groups=16, prompts_per_group=4, system_len=1024, question_len=64, zipf_requests=96)
    else:
        w = dict(groups=64, prompts_per_group=16, system_len=2048, question_len=128, zipf_requests=1024)
    w["output_len"] = args.output_len
    for key in ("groups", "prompts_per_group", "system_len"):
        if getattr(args, key) is not None:
            w[key] = getattr(args, key)
    kv_modes = []
    for m in (x.strip() for x in args.kv_events.split(",") if x.strip()):
        if m not in ("off", "on"):
            ap.error(f"unknown --kv-events mode {m}")
        kv_modes.append(m == "on")
    if any(kv_modes) and args.sim_page_size is None:
        args.sim_page_size = 16
    per_group = w["system_len"] + w["prompts_per_group"] * (w["question_len"] + w["output_len"])
    groups_per_sim = w["groups"] // args.workers
    if args.kv_capacity is None:
        args.kv_capacity = groups_per_sim * per_group
    w["kv_tokens_per_group"] = per_group
    args.workload = w

    binary = Path(args.binary)
    if not binary.exists():
        cmd = ["cargo", "build", "--release"]
        run_logged(cmd)
        subprocess.run(cmd, cwd=REPO, check=True, timeout=1800)
    smg_bin = ensure_smg() if "smg" in policies else None

    nproc = os.cpu_count()
    try:
        nproc = int(subprocess.run(["nproc"], capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    machine = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "nproc": nproc,
        "platform": platform.platform(),
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        if os.path.exists("/proc/cpuinfo") else "?",
        "python": sys.version.split()[0],
        "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True).stdout.strip(),
    }
    log(f"machine: {machine}")
    log(f"this script: {' '.join(shlex.quote(a) for a in [sys.executable] + sys.argv)}")
    log(f"workload: {w}; sims: --kv-capacity-tokens {args.kv_capacity} (= {groups_per_sim} groups x {per_group}), "
        f"--page-size {args.sim_page_size or 1}, --time-scale {args.time_scale}; concurrency {args.concurrency}; seed {args.seed}; zipf s={args.zipf_s}")

    for wl in workloads:
        if wl not in ("gsp", "gsp_ids", "zipf"):
            ap.error(f"unknown workload {wl}")
    plan = make_plans(args)
    if "zipf" in workloads:
        counts = [0] * w["groups"]
        for g, _ in plan["zipf"]:
            counts[g] += 1
        log(f"zipf plan: {len(plan['zipf'])} requests, hottest groups {sorted(counts, reverse=True)[:6]}, "
            f"{sum(1 for c in counts if c)} groups used")
    if args.replicas > 1 and "sticky" in fronts:
        per = [sum(1 for g in range(w["groups"]) if sticky_replica(g, args.replicas) == k) for k in range(args.replicas)]
        log(f"sticky front: groups per replica {per}")

    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="routing_quality-"))
    logroot = Path(args.log_dir) if args.log_dir else tmp / "logs"
    home = tmp / "home"
    home.mkdir(parents=True)
    try:
        for workload in workloads:
            for policy in policies:
                for front in fronts:
                    if front != "single" and (workload == "gsp" or policy == "smg"):
                        log(f"\n=== {workload}-{policy}-{front}: skipped (several replicas: only the script's own "
                            f"client spreads requests, and only Switchboard policies)")
                        continue
                    for kv_events in kv_modes if policy != "smg" else [False]:
                        rows.append(one_config(policy, workload, args, str(binary), smg_bin and str(smg_bin), home,
                                               logroot, plan, front, kv_events))
    finally:
        if not args.log_dir:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)

    checks = acceptance(rows, args.quick)
    report = []
    report.append(f"Machine: nproc {machine['nproc']}, {machine['cpu']}, {machine['platform']}; date {machine['date']}; "
                  f"commit {machine['git']}")
    report.append(f"Sims: {args.workers} x `switchboard sim --kv-capacity-tokens {args.kv_capacity} --time-scale "
                  f"{args.time_scale:g}" + (f" --page-size {args.sim_page_size}" if args.sim_page_size else "")
                  + f"` (fresh per row; with KV events also --kv-events-config); concurrency {args.concurrency}; seed {args.seed}.")
    if args.gateway_args:
        report.append(f"Every `switchboard serve` also got: `{args.gateway_args}`.")
    if "gsp" in workloads:
        report.append(f"\n**Shared prefix** (bench_serving generated-shared-prefix: {w['groups']} groups x "
                      f"{w['prompts_per_group']} prompts, system {w['system_len']} + question {w['question_len']} "
                      f"tokens, output {w['output_len']}; cached share over all requests incl. the 1 warm-up):\n")
        report.append(fmt_table(rows, "gsp", args.time_scale))
    if "gsp_ids" in workloads:
        report.append(f"\n**Shared prefix as token ids** (own client: the same {w['groups']} x {w['prompts_per_group']} "
                      f"shape, {w['system_len']} + {w['question_len']} random vocab ids, output {w['output_len']}, "
                      f"shuffled, input_ids to /generate, so neither gateway nor sims tokenize; no warm-up):\n")
        report.append(fmt_table(rows, "gsp_ids", args.time_scale))
    if "zipf" in workloads:
        report.append(f"\n**Zipf groups** (own client, {w['zipf_requests']} requests, group ~ zipf s={args.zipf_s:g} over "
                      f"{w['groups']} groups, same prompt shape, input_ids to /generate, no warm-up):\n")
        report.append(fmt_table(rows, "zipf", args.time_scale))
    if args.replicas > 1:
        for wl in ("gsp_ids", "zipf"):
            if wl in workloads and any(r["workload"] == wl and r["front"] != "single" for r in rows):
                report.append(f"\n**Several replicas, {wl}** ({args.replicas} gateway processes with the same flags "
                              f"in front of the same {args.workers} fresh sims; cached share from the sims):\n")
                report.append(fmt_replica_table(rows, wl))
    report.append("\nAcceptance:\n")
    for c in checks:
        report.append(f"- [{'x' if c['pass'] else ' '}] {c['check']}: {c['detail']}")
    text = "\n".join(report)
    print(text)
    print("\nCommands run:")
    for c in RAN:
        print("  " + c)

    Path(args.out).write_text(json.dumps({
        "machine": machine,
        "script": [sys.executable] + sys.argv,
        "settings": {"workload": w, "workers": args.workers, "kv_capacity_tokens": args.kv_capacity,
                     "time_scale": args.time_scale, "concurrency": args.concurrency, "seed": args.seed,
                     "zipf_s": args.zipf_s, "policies": policies, "workloads": workloads,
                     "replicas": args.replicas, "fronts": fronts, "gateway_args": args.gateway_args,
                     "kv_events": args.kv_events, "sim_page_size": args.sim_page_size,
                     "cached_share_counts": "all requests the sims served, incl. bench_serving's 1 warm-up",
                     "ttft_units": "ttft_*_ms: client wall clock (scaled sim time); ttft_*_model_ms = wall / time_scale"},
        "results": rows,
        "acceptance": checks,
        "commands": RAN,
        "markdown": text,
    }, indent=2))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
