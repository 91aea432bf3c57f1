"""Replay throughput and per-inference cost versus context length. Prints figures; asserts nothing.

    python benchmarks/bench_replay.py            # full: >= 100k ops
    python benchmarks/bench_replay.py --quick    # a smoke run
    python benchmarks/bench_replay.py --memory 1000000 [--no-log]  # peak memory, 1M ops

1. Throughput: a generated trace of at least 100k ops (random valid ops over every primitive)
   replayed under each built-in policy; ops/s and block operations/s (alloc + evict + free + hit
   records, plus own blocks reused by count).
2. Scaling: one context grown to a short and a long length, then the same number of
   (append 16 tokens, infer) steps timed at each; if per-inference work is proportional to new
   blocks, the two per-infer times are about equal.
"""

from __future__ import annotations

import argparse
import time

from kvmodel import EngineConfig, Message, MessageKind, Role, TierConfig, replay
from kvmodel.ids import ContextId, MessageId, SessionId, TierName
from kvmodel.io.observations import InferObs
from kvmodel.io.trace import Append, Infer, Op, Open
from kvmodel.messages import AgentKind
from kvmodel.workloads import RandomParams, random_trace


def throughput(n_ops: int) -> None:
    tr = random_trace(RandomParams(seed=1, ops=n_ops, max_open=12, max_tokens=64))
    cfg = EngineConfig(16, (TierConfig(TierName("hbm"), 2048), TierConfig(TierName("hbf"), 8192)))
    print(f"throughput: {len(tr.ops)} random ops, hbm 2048 + hbf 8192 blocks of 16 tokens")
    for policy in ("lru", "kvtether", "hbm-first"):
        t0 = time.perf_counter()
        r = replay(tr, policy, cfg)
        dt = time.perf_counter() - t0
        recs = sum(1 for o in r.engine.log if o.kind in ("alloc", "evict", "free", "hit"))
        own = sum(o.own_blocks for o in r.engine.log if isinstance(o, InferObs))
        print(
            f"  {policy:<10} {dt:7.2f} s  {len(tr.ops) / dt:9.0f} ops/s  "
            f"{(recs + own) / dt:10.0f} block ops/s  ({recs} block records, {own} kept)"
        )


#: untimed (append, infer) steps before the timed ones: the first look at a full memory keys
#: every resident block once (a cost per memory, not per inference; printed on its own)
WARM_STEPS = 4


def _growth_trace(
    prefix_tokens: int, steps: int, filler_blocks: int = 0, contexts: int = 1
) -> tuple[list[Op], int]:
    """``contexts`` contexts grown to ``prefix_tokens`` each, then ``WARM_STEPS + steps`` x
    (append 16 tokens, infer), the contexts taking turns; returns the ops and the index of the
    first timed one. ``filler_blocks``: first, another context writes that many blocks and goes
    cold, so a memory sized to leave no free slot makes every timed inference evict."""
    ctxs = [ContextId(f"c{k}") for k in range(contexts)]
    ops: list[Op] = [Open(0.0, c, SessionId(f"s{k}"), AgentKind.MAIN) for k, c in enumerate(ctxs)]
    n = 0

    def msg(tokens: int) -> Message:
        nonlocal n
        n += 1
        return Message(MessageId(f"m{n}"), Role.USER, MessageKind.OBSERVATION, tokens)

    if filler_blocks:
        cold = ContextId("cold")
        ops.append(Open(0.0, cold, SessionId("cold"), AgentKind.MAIN))
        ops.append(Append(0.0, cold, (msg(filler_blocks * 16 + 1),)))
        ops.append(Infer(0.0, cold, ()))
    for ctx in ctxs:
        for _ in range(prefix_tokens // 1024):
            ops.append(Append(0.0, ctx, (msg(1024),)))
        ops.append(Infer(0.0, ctx, ()))
    for i in range(WARM_STEPS + steps):
        ctx = ctxs[i % contexts]
        ops.append(Append(float(i), ctx, (msg(16),)))
        ops.append(Infer(float(i), ctx, ()))
    return ops, len(ops) - 2 * steps


def scaling(steps: int, lengths: tuple[int, ...], policies: tuple[str, ...]) -> None:
    """Per-inference time at each context length, twice: one context with room to spare (no
    eviction), and two contexts taking turns with memory full, so that every timed inference
    evicts (the rank order is consulted, and the other context's features have changed). The
    warm-up steps are timed apart: with memory full, their first look keys all of it."""
    print(
        f"per-infer cost vs context length ({steps} x [append 16 tokens, infer], after "
        f"{WARM_STEPS} untimed):"
    )
    for policy in policies:
        for pressure in (False, True):
            row: list[float] = []
            label = "2 contexts, every infer evicts" if pressure else "1 context, room to spare"
            for length in lengths:
                filler = 2 * (WARM_STEPS + steps) + 64 if pressure else 0
                contexts = 2 if pressure else 1
                ops, first = _growth_trace(length, steps, filler, contexts)
                room = 0 if pressure else WARM_STEPS + steps + 64
                # the long contexts' blocks, the filler's (its partial tail is freed), spare room
                blocks = contexts * (length // 16) + filler + room + 1
                cfg = EngineConfig(16, (TierConfig(TierName("hbm"), blocks),))
                marks: dict[str, float] = {}

                def timer(
                    _e: object, i: int, _op: Op, first: int = first, marks: dict[str, float] = marks
                ) -> None:
                    if i == first - 2 * WARM_STEPS - 1:
                        marks["warm"] = time.perf_counter()
                    if i == first - 1:
                        marks["start"] = time.perf_counter()
                        marks["evicted"] = sum(_e.stats.evictions.values())  # type: ignore[attr-defined]

                r = replay(ops, policy, cfg, after_op=timer, observe=False)
                per = (time.perf_counter() - marks["start"]) / steps
                warm = marks["start"] - marks["warm"]
                row.append(per)
                evicted = sum(r.engine.stats.evictions.values()) - marks["evicted"]
                print(
                    f"  {policy:<11} {label:<32} {length:>8} tokens: {per * 1e6:9.1f} "
                    f"us/infer  ({evicted / steps:.0f} evictions/infer, "
                    f"{r.engine.stats.rejected} rejected; warm-up {warm * 1e3:.0f} ms)"
                )
            print(
                f"  {policy:<11} {label:<32} longest / shortest: {row[-1] / row[0]:.2f}x "
                "(flat: work per new block)"
            )


def op_kinds(steps: int, lengths: tuple[int, ...], policies: tuple[str, ...]) -> None:
    """Each op kind's cost against context length (issue 61 item 5): one context grown to each
    length beside a cold one that fills memory, then ``steps`` rounds of [append 16 tokens,
    infer, pin the first message, unpin it, turn_end], every op timed on its own, and, in a
    second run, ``steps`` rounds of [fork the whole context, infer on the fork, close it]. Flat
    rows mean an op's work is its own, not the context's. A fork shares the context's whole
    chain, so it and the close of the fork attach and detach each block (one holder more or
    less on every block, spec P4): their work is the chain, by the model's definition, and the
    next inference of the context re-keys the blocks whose holders changed."""
    from kvmodel.io.trace import Close, Fork, Pin, TurnEnd, Unpin, op_name

    print(f"op cost vs context length ({steps} rounds, memory full; us per op):")
    for policy in policies:
        rows: dict[str, list[float]] = {}
        for length in lengths:
            for forks in (False, True):
                filler = 4 * steps + 64
                ops, _ = _growth_trace(length, 0, filler, 1)
                c = ContextId("c0")
                n = len(ops)
                for i in range(steps):
                    t = float(WARM_STEPS + i)
                    if forks:
                        fork = ContextId(f"f{i}")
                        ops += [Fork(t, fork, c), Infer(t, fork, ()), Close(t, fork)]
                        continue
                    m = Message(MessageId(f"r{i}"), Role.USER, MessageKind.OBSERVATION, 16)
                    ops += [
                        Append(t, c, (m,)),
                        Infer(t, c, ()),
                        Pin(t, c, 0, 1),
                        Unpin(t, c, 0, 1),
                        TurnEnd(t, c),
                    ]
                blocks = length // 16 + filler + 1
                cfg = EngineConfig(16, (TierConfig(TierName("hbm"), blocks),))
                spent: dict[str, float] = {}
                last = [0.0]

                def hook(
                    _e: object,
                    i: int,
                    op: Op,
                    n: int = n,
                    spent: dict[str, float] = spent,
                    last: list[float] = last,
                    c: ContextId = c,
                ) -> None:
                    now = time.perf_counter()
                    if i >= n:
                        kind = op_name(op) + (" (the fork)" if op.ctx != c else "")  # type: ignore[union-attr]
                        spent[kind] = spent.get(kind, 0.0) + now - last[0]
                    last[0] = time.perf_counter()

                replay(ops, policy, cfg, after_op=hook, observe=False)
                for kind, sec in spent.items():
                    rows.setdefault(kind, []).append(sec / steps * 1e6)
        head = "".join(f"{n:>10,}" for n in lengths)
        print(f"  {policy:<9} {'op':<15}{head}  tokens  longest/shortest")
        for kind, us in rows.items():
            cells = "".join(f"{u:>10.1f}" for u in us)
            print(f"  {policy:<9} {kind:<15}{cells}  us      {us[-1] / us[0]:.2f}x")


def memory(n_ops: int, observe: bool) -> None:
    """Peak resident memory of generating and replaying an ``n_ops`` trace (with its log, or
    without: ``kvmodel replay`` without ``--observations``)."""
    import resource

    t0 = time.perf_counter()
    tr = random_trace(RandomParams(seed=2, ops=n_ops, max_open=12, max_tokens=64))
    cfg = EngineConfig(16, (TierConfig(TierName("hbm"), 2048), TierConfig(TierName("hbf"), 8192)))
    r = replay(tr, "kvtether", cfg, observe=observe)
    dt = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        f"memory: {len(tr.ops)} ops, {len(r.engine.log)} log records: peak RSS "
        f"{peak_kib / 1024:.0f} MiB ({dt:.0f} s to generate and replay)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--memory", type=int, metavar="OPS", help="only: the peak memory of an OPS-op replay"
    )
    ap.add_argument("--no-log", action="store_true", help="with --memory: replay without a log")
    a = ap.parse_args()
    if a.memory:
        memory(a.memory, observe=not a.no_log)
    elif a.quick:
        throughput(2_000)
        scaling(50, (1_024, 16_384), ("kvtether", "lru"))
        op_kinds(20, (1_024, 16_384), ("kvtether",))
    else:
        throughput(100_000)
        scaling(1_000, (1_024, 10_240, 102_400, 512_000), ("kvtether", "lru", "vllm-prefix"))
        op_kinds(100, (1_024, 102_400, 512_000), ("lru", "kvtether"))


if __name__ == "__main__":
    main()
