"""SGLang's own KV-event code as the oracle (tests/it/kv_events.rs).

`check SIM_URL ENDPOINT REPLAY VERSION`: subscribes to a simulator's KV events, drives it
(prompts sharing prefixes through a small KV pool, so pages are stored and evicted, then a
flush), and checks every batch: it decodes with sglang 0.5.9's `KVEventBatch` (0.5.9) or with
0.5.23's event classes (same fields, tagged maps), sequence numbers run from 0 without a gap,
every stored block's hash is SGLang's (`get_hash_str` chained from its parent,
`hash_str_to_int64`), removals name stored blocks, and the replay socket sends the same
batches again. Prints a JSON summary.

`publish ENDPOINT REPLAY PAGE_SIZE`: SGLang's own `ZmqEventPublisher`, driven by commands on
stdin (see `publish`): stored pages, lost batches, a clear. The test kills it to restart it.
"""

import ast
import hashlib
import importlib.util
import json
import os
import sys
import time
import urllib.request
from typing import List, Optional

import msgspec
import zmq

ROOT = importlib.util.find_spec("sglang").submodule_search_locations[0]


def load_kv_events():
    # The module imports only msgspec, pyzmq and pydantic: load it without the sglang package.
    spec = importlib.util.spec_from_file_location(
        "sglang_kv_events", os.path.join(ROOT, "srt/disaggregation/kv_events.py")
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sglang_kv_events"] = mod
    spec.loader.exec_module(mod)
    return mod


def load_hash_functions():
    # hicache_storage imports torch; its two hash functions are plain Python: take just them.
    path = os.path.join(ROOT, "srt/mem_cache/hicache_storage.py")
    tree = ast.parse(open(path).read())
    wanted = {"get_hash_str", "hash_str_to_int64"}
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {f.name for f in funcs} == wanted, "hash functions not found"
    ns = {"hashlib": hashlib, "List": List, "Optional": Optional}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), path, "exec"), ns)
    return ns["get_hash_str"], ns["hash_str_to_int64"]


kv = load_kv_events()
get_hash_str, hash_str_to_int64 = load_hash_functions()


# 0.5.23's event classes (sglang/srt/disaggregation/kv_events.py of that release): tagged maps,
# optional fields omitted; the batch stays an array.
class Event23(msgspec.Struct, omit_defaults=True, tag=True):
    pass


class BlockStored(Event23):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str] = None
    cache_salt: Optional[str] = None
    session_id: Optional[str] = None
    lora_name: Optional[str] = None


class BlockRemoved(Event23):
    block_hashes: list[int]
    medium: Optional[str] = None


class AllBlocksCleared(Event23):
    pass


class Batch23(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    attn_dp_rank: Optional[int] = None


def post(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def drive(sim):
    # 12 prompts of 320 tokens in 3 families sharing 160 tokens, through a 1,024-token pool:
    # pages stored, shared prefixes reused, leaves evicted; then a flush and one more prompt.
    for i in range(12):
        family = i % 3
        prompt = [1000 + family * 1000 + t for t in range(160)] + [50000 + i * 400 + t for t in range(160)]
        post(f"{sim}/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}})
    post(f"{sim}/flush_cache", {})
    post(f"{sim}/generate", {"input_ids": list(range(7, 7 + 100)), "sampling_params": {"max_new_tokens": 4}})


def check(sim, endpoint, replay, version):
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.connect(endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    time.sleep(0.5)  # the subscription must reach the publisher before the first batch
    drive(sim)
    decoder = (
        msgspec.msgpack.Decoder(type=kv.KVEventBatch)
        if version == "0.5.9"
        else msgspec.msgpack.Decoder(type=Batch23)
    )
    received = []
    while sub.poll(1500):
        topic, seq, payload = sub.recv_multipart()
        received.append((int.from_bytes(seq, "big"), payload))
    assert received, "no batch received"
    seqs = [s for s, _ in received]
    assert seqs == list(range(len(seqs))), f"sequence numbers {seqs[:20]}..."

    digests = {}  # block hash -> hex digest
    live = set()
    counts = {"stored": 0, "removed": 0, "cleared": 0, "blocks": 0}
    for _, payload in received:
        batch = decoder.decode(payload)
        assert batch.attn_dp_rank == 0
        for ev in batch.events:
            name = type(ev).__name__
            if name == "BlockStored":
                counts["stored"] += 1
                assert ev.medium == "GPU" and ev.lora_id is None
                assert len(ev.token_ids) == ev.block_size * len(ev.block_hashes)
                parent = ev.parent_block_hash
                prior = None
                if parent is not None:
                    assert parent in digests, "parent never stored"
                    prior = digests[parent]
                for i, h in enumerate(ev.block_hashes):
                    page = ev.token_ids[i * ev.block_size:(i + 1) * ev.block_size]
                    d = get_hash_str(page, prior_hash=prior)
                    assert hash_str_to_int64(d) == h, "block hash differs from SGLang's"
                    digests[h] = d
                    live.add(h)
                    prior = d
                    counts["blocks"] += 1
            elif name == "BlockRemoved":
                counts["removed"] += 1
                for h in ev.block_hashes:
                    assert h in live, "removed a block not stored"
                    live.discard(h)
            else:
                counts["cleared"] += 1
                live.clear()

    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(replay)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    replayed = []
    while True:
        assert dealer.poll(5000), "replay did not answer"
        frames = dealer.recv_multipart()
        seq = int.from_bytes(frames[-2], "big", signed=True)
        if seq == -1:
            break
        replayed.append((seq, frames[-1]))
    assert replayed == received, "replayed batches differ"
    print(json.dumps({"batches": len(received), "live_blocks": len(live), **counts}))


def stored_events(prompts, page_size):
    events = []
    for prompt in prompts:
        parent, prior = None, None
        for start in range(0, len(prompt) // page_size * page_size, page_size):
            page = prompt[start:start + page_size]
            d = get_hash_str(page, prior_hash=prior)
            h = hash_str_to_int64(d)
            events.append(kv.BlockStored(block_hashes=[h], parent_block_hash=parent, token_ids=page,
                                         block_size=page_size, lora_id=None, medium="GPU"))
            parent, prior = h, d
    return events


def publish(endpoint, replay, page_size):
    """Reads one JSON command per stdin line and answers with one JSON line:
    {"op": "store", "prompts": [[ids]]}  publish BlockStored for the prompts' pages;
    {"op": "lose", "prompts": [[ids]]}   the same batch, buffered for replay but never sent
                                         (lost on the way);
    {"op": "skip", "n": N}               N sequence numbers lost outright (not even buffered);
    {"op": "clear"}                      AllBlocksCleared."""
    pub = kv.ZmqEventPublisher(attn_dp_rank=0, endpoint=endpoint, replay_endpoint=replay or None)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "clear":
            pub.publish(kv.KVEventBatch(ts=time.time(), events=[kv.AllBlocksCleared()]))
        elif op == "store":
            pub.publish(kv.KVEventBatch(ts=time.time(), events=stored_events(cmd["prompts"], page_size)))
        elif op == "lose":
            batch = kv.KVEventBatch(ts=time.time(), events=stored_events(cmd["prompts"], page_size), attn_dp_rank=0)
            seq = next(pub._seq_gen)
            pub._buffer.append((seq, msgspec.msgpack.Encoder().encode(batch)))
        elif op == "skip":
            for _ in range(cmd["n"]):
                next(pub._seq_gen)
        time.sleep(0.2)  # the publisher thread sends from its queue
        print(json.dumps({"ok": op}), flush=True)
    pub.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(*sys.argv[2:6])
    else:
        publish(sys.argv[2], sys.argv[3], int(sys.argv[4]))
