"""kvmodel's replay against vLLM's own block pool on the same work. Prints figures; asserts nothing
but that the work is the same.

    python benchmarks/bench_vs_vllm.py                 # 60 sessions x 40 rounds (issue 18)
    python benchmarks/bench_vs_vllm.py --sessions 8 --rounds 10   # a smoke run

The workload: ``--sessions`` agent sessions take turns for ``--rounds`` rounds; each turn appends
a tool observation to the session's context and infers on the whole context, which emits an
output (seeded sizes). Block size 16, one tier of ``--blocks`` usable blocks: the sessions' KV
does not fit, so recency-based eviction turns over most of it (the hard case for a cache).

Both sides do the same block operations, checked here: hits, writes, evictions.

* **vLLM** -- vLLM 0.33.0's ``BlockPool`` (fetched from its wheel at run time, loaded with stub
  imports: :mod:`checkers.conformance.vllm_pool`), driven as its ``KVCacheManager`` drives it for
  one request: ``get_cached_block`` over the prompt's full blocks until a miss, ``touch``,
  ``get_new_blocks``, ``cache_full_blocks``, ``free_blocks`` tail-first. Two times are printed:
  the pool's calls alone, and those plus the request's block hashing (``hash_block_tokens``
  over every full block of prompt and output, as vLLM's ``Request`` does for each new request).
* **kvmodel** -- ``replay(trace, "vllm-prefix", config)``: the whole model (contexts, lifecycle,
  packing and hash chains, placement and eviction, statistics, the observation log).

Times are CPU seconds of this process (``time.process_time``), best of ``--repeat``; both sides
run with the garbage-collector setting that ``replay`` uses
(:func:`kvmodel.replay.fewer_collections`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from checkers.conformance.vllm_pool import (
    PoolRequest,
    VLLMUnavailableError,
    fetch_sources,
    load_block_pool,
    vllm_sha256,
)
from kvmodel import EngineConfig, Message, MessageKind, Role, TierConfig, replay
from kvmodel.ids import ContextId, MessageId, SessionId, TierName
from kvmodel.io.observations import HitObs, InferObs
from kvmodel.io.trace import Append, Infer, Op, Open, Trace, TraceHeader
from kvmodel.messages import AgentKind
from kvmodel.replay import fewer_collections

BLOCK = 16


def agent_rounds(sessions: int, rounds: int, seed: int) -> Trace:
    """Sessions taking turns: each turn appends an observation and infers an output."""
    rng = np.random.default_rng(seed)
    ops: list[Op] = []
    for s in range(sessions):
        ops.append(Open(0.0, ContextId(f"s{s}"), SessionId(f"s{s}"), AgentKind.MAIN))
    n = 0
    for r in range(rounds):
        for s in range(sessions):
            t = float(r * sessions + s)
            ctx = ContextId(f"s{s}")
            obs = Message(
                MessageId(f"m{n}"), Role.TOOL, MessageKind.OBSERVATION, int(rng.integers(20, 200))
            )
            out = Message(
                MessageId(f"m{n + 1}"), Role.ASSISTANT, MessageKind.OUTPUT,
                int(rng.integers(10, 100)),
            )  # fmt: skip
            n += 2
            ops += [Append(t, ctx, (obs,)), Infer(t, ctx, (out,))]
    return Trace(TraceHeader(), tuple(ops))


def requests(trace: Trace) -> list[tuple[list[int], int]]:
    """Each infer as vLLM sees it: (the request's tokens, prompt length). Tokens are synthetic
    and distinct per message (no two messages share content here)."""
    tokens: dict[str, list[int]] = {}
    out: list[tuple[list[int], int]] = []
    base = 0
    for op in trace.ops:
        if isinstance(op, Append):
            toks = tokens.setdefault(op.ctx, [])
            for m in op.messages:
                toks += range(base, base + m.tokens)
                base += m.tokens
        elif isinstance(op, Infer):
            toks = tokens.setdefault(op.ctx, [])
            prompt = len(toks)
            for m in op.output:
                toks += range(base, base + m.tokens)
                base += m.tokens
            out.append((list(toks), prompt))
    return out


def run_vllm(
    reqs: list[tuple[list[int], int]], blocks: int, src: Path
) -> tuple[float, float, dict[str, int]]:
    """(pool seconds, hashing seconds, counts)."""
    mods = load_block_pool(src)
    utils = mods.kv_cache_utils
    utils.init_none_hash(vllm_sha256)
    hash_block = utils.hash_block_tokens
    # vLLM keeps block 0 as its null block: one more slot for the same usable capacity
    pool = mods.block_pool.BlockPool(
        blocks + 1, enable_caching=True, hash_block_size=BLOCK, enable_kv_cache_events=False
    )
    cached = pool.cached_block_hash_to_block
    hits = writes = evictions = 0
    pool_s = hash_s = 0.0
    clock = time.process_time
    for toks, prompt in reqs:
        t0 = clock()
        hashes: list[bytes] = []
        for d in range(len(toks) // BLOCK):
            parent = hashes[-1] if hashes else None
            hashes.append(hash_block(vllm_sha256, parent, toks[d * BLOCK : (d + 1) * BLOCK]))
        t1 = clock()
        found: list[Any] = []
        for d in range(prompt // BLOCK):
            b = pool.get_cached_block(hashes[d], [0])
            if b is None:
                break
            found.append(b[0])
        need = -(-len(toks) // BLOCK) - len(found)
        if need > pool.get_num_free_blocks() - sum(1 for b in found if b.ref_cnt == 0):
            raise RuntimeError("the workload was sized to admit every request")
        pool.touch(found)
        before = len(cached)
        new = pool.get_new_blocks(need)
        evictions += before - len(cached)
        got = found + new
        pool.cache_full_blocks(PoolRequest(hashes, toks), got, len(found), len(hashes), BLOCK, 0)
        pool.free_blocks(reversed(got))
        t2 = clock()
        hits += len(found)
        writes += need
        hash_s += t1 - t0
        pool_s += t2 - t1
    return pool_s, hash_s, {"hits": hits, "writes": writes, "evictions": evictions}


def run_kvmodel(trace: Trace, blocks: int, *, observe: bool = True) -> tuple[float, dict[str, int]]:
    cfg = EngineConfig(BLOCK, (TierConfig(TierName("hbm"), blocks),))
    t0 = time.process_time()
    r = replay(trace, "vllm-prefix", cfg, observe=observe)
    dt = time.process_time() - t0
    if not observe:  # no records to count hits by: the time is what this run is for
        return dt, {}
    st = r.engine.stats
    # a hit is a hit record, or a block of the context's own chain found resident (counted)
    hits = sum(
        1 if isinstance(o, HitObs) else o.own_blocks
        for o in r.engine.log
        if isinstance(o, (HitObs, InferObs))
    )
    return dt, {
        "hits": hits,
        "writes": sum(r.engine.memory.writes.values()),
        "evictions": sum(st.evictions.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--blocks", type=int, default=5999)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        src = fetch_sources()
    except VLLMUnavailableError as e:
        print(f"skipped: {e}")
        return 0
    trace = agent_rounds(args.sessions, args.rounds, args.seed)
    reqs = requests(trace)
    print(
        f"{args.sessions} sessions x {args.rounds} rounds: {len(trace.ops)} ops, {len(reqs)} "
        f"requests, block size {BLOCK}, {args.blocks} usable blocks"
    )
    best_v: tuple[float, float, dict[str, int]] | None = None
    best_k: tuple[float, dict[str, int]] | None = None
    best_blind: float | None = None
    for _ in range(args.repeat):
        with fewer_collections():  # the GC setting replay() runs under, for both sides
            v = run_vllm(reqs, args.blocks, src)
        k = run_kvmodel(trace, args.blocks)
        blind, _ = run_kvmodel(trace, args.blocks, observe=False)
        best_v = v if best_v is None or v[0] < best_v[0] else best_v
        best_k = k if best_k is None or k[0] < best_k[0] else best_k
        best_blind = blind if best_blind is None else min(best_blind, blind)
    assert best_v is not None
    assert best_k is not None
    pool_s, hash_s, vc = best_v
    k_s, kc = best_k
    if vc != kc:
        print(f"DIFFERENT WORK: vLLM {vc}, kvmodel {kc}")
        return 1
    ops = sum(vc.values())
    print(f"same work on both sides: {vc['hits']} hits, {vc['writes']} writes, "
          f"{vc['evictions']} evictions ({ops} block ops)")  # fmt: skip
    print(f"  vLLM BlockPool          {pool_s:7.2f} s  {ops / pool_s:10.0f} block ops/s")
    print(f"  vLLM pool + hashing     {pool_s + hash_s:7.2f} s  "
          f"{ops / (pool_s + hash_s):10.0f} block ops/s")  # fmt: skip
    assert best_blind is not None
    print(f"  kvmodel replay          {k_s:7.2f} s  {ops / k_s:10.0f} block ops/s")
    print(f"  kvmodel, no log         {best_blind:7.2f} s  {ops / best_blind:10.0f} block ops/s"
          "  (kvmodel replay without --observations)")  # fmt: skip
    print(f"  kvmodel / vLLM speed: {pool_s / k_s:.2f}x of the pool alone, "
          f"{(pool_s + hash_s) / k_s:.2f}x of pool + hashing; without the log "
          f"{pool_s / best_blind:.2f}x and {(pool_s + hash_s) / best_blind:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
