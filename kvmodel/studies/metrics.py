"""Evaluation metrics of one replay (the figures the papers report, in one place).

* token hit rate and recomputed prefill tokens (spec T5);
* estimated task cost (spec E1-E3): the input side (uncached and cached prompt tokens of the
  admitted inferences, and every rejected inference's prompt as a full recompute) and the output
  side, at configurable prices (default cached = 0.1 x input, as provider prompt caches charge);
* modelled latency (spec E4): per admitted inference, TTFT = recomputed tokens / prefill rate +
  a fixed overhead, and decode = output tokens x TPOT; and with queueing for the prefill servers
  (spec E5), over every inference;
* zombie block-seconds, writes per tier, device-years (spec M6, M7), and device-years over the
  load model's settled window (spec E6);
* regretted evictions: evicted blocks whose key is written again later (needed after all);
* share of an offline optimum: ``value / optimum`` for a quantity the optimum maximises.
"""

from __future__ import annotations

import heapq
from typing import Any

import attrs
import numpy as np

from kvmodel.engine import Engine
from kvmodel.io.observations import AllocObs, CopyObs, EvictObs, InferObs, LoadObs, RejectObs
from kvmodel.memory import device_years
from kvmodel.replay import ReplayResult

__all__ = [
    "Metrics",
    "Prices",
    "Timing",
    "compute_metrics",
    "queued_ttfts",
    "regretted_evictions",
    "settled_device_years",
    "share_of_optimum",
]


@attrs.frozen
class Prices:
    """Dollars per million tokens (defaults: a frontier model's list prices, illustrative)."""

    input: float = 3.0
    cached_input: float = 0.3
    output: float = 15.0


@attrs.frozen
class Timing:
    prefill_tok_per_s: float = 20_000.0
    ttft_overhead_s: float = 0.05
    tpot_s: float = 0.03
    #: prefill servers the queueing model shares among every inference (spec E5)
    prefill_servers: int = 1


@attrs.frozen
class Metrics:
    policy: str
    token_hit_rate: float
    recomputed_tokens: int
    cost_usd: float
    #: the policy-dependent part (spec E1) and the part no policy changes (E2)
    input_cost_usd: float
    output_cost_usd: float
    #: inferences memory could not hold (P7.7), each costed as a full recompute (E3)
    rejected: int
    rejected_prompt_tokens: int
    ttft_s_mean: float
    latency_s_total: float
    #: with queueing for the prefill servers, over every inference, rejected ones retried as
    #: full recomputes (spec E5)
    queued_ttft_s_mean: float
    queued_ttft_s_p99: float
    zombie_block_seconds: float
    regretted_evictions: int
    evictions: int
    writes: dict[str, int]
    device_years: dict[str, float | None]
    #: the settled window of the load model (spec E6), and device-years from its writes alone
    settled_window: tuple[float, float] | None = None
    device_years_settled: dict[str, float | None] = attrs.field(factory=dict)
    #: for a policy that moves KV (spec/movement.md MV4): tokens loaded from a lower tier
    #: instead of recomputed, the seconds their transfers add to TTFT, and bytes per source tier;
    #: None (and absent from the JSON) for a policy that moves nothing
    movement: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        if d["movement"] is None:
            del d["movement"]
        return d


def regretted_evictions(engine: Engine) -> int:
    """Evictions of a key that is written again later in the run (reads the log)."""
    if not engine.observing:
        raise ValueError("regretted evictions read the observation log: replay with observe=True")
    evicted: set[str] = set()
    regrets = 0
    for o in engine.log:
        if isinstance(o, EvictObs) and o.key is not None:
            evicted.add(o.key)
        elif isinstance(o, AllocObs) and o.key is not None and o.key in evicted:
            regrets += 1
            evicted.discard(o.key)
    return regrets


def queued_ttfts(requests: list[tuple[float, int, int]], timing: Timing) -> list[float]:
    """TTFT of each request ``(arrival, order, prefill tokens)`` under spec E5: first come,
    first served on ``timing.prefill_servers`` servers, each prefilling one request at a time
    at ``prefill_tok_per_s``; TTFT = wait + own prefill + the fixed overhead. Open loop: a wait
    does not delay the trace's later ops."""
    free = [0.0] * max(1, timing.prefill_servers)  # a heap of the times each server frees
    out = []
    for t, _, tokens in sorted(requests):
        start = max(t, heapq.heappop(free))
        done = start + tokens / timing.prefill_tok_per_s
        heapq.heappush(free, done)
        out.append(done - t + timing.ttft_overhead_s)
    return out


def settled_device_years(
    result: ReplayResult, window: tuple[float, float]
) -> dict[str, float | None]:
    """Per tier with endurance: device-years at the write rate of ``window`` alone (spec E6:
    ramp-up and drain left out), from the blocks written at ``a <= t < b``."""
    a, b = window
    mem = result.engine.memory
    written: dict[str, int] = {}
    for o in result.engine.log:
        if (isinstance(o, AllocObs) or (isinstance(o, CopyObs) and o.result == "written")) and (
            a <= o.t < b
        ):  # (a copy moved into a worn tier is a P/E write too: spec/movement.md MV3)
            written[o.tier] = written.get(o.tier, 0) + 1
    out: dict[str, float | None] = {}
    for name in mem.names:
        c = mem.config(name)
        if c.pe_cycles is None or c.bytes_per_block is None:
            continue
        out[name] = device_years(
            pe_cycles=c.pe_cycles,
            capacity_bytes=c.blocks * c.bytes_per_block,
            write_amplification=c.write_amplification,
            bytes_written=written.get(name, 0) * c.bytes_per_block,
            seconds=b - a,
        )
    return out


def compute_metrics(
    result: ReplayResult,
    prices: Prices | None = None,
    timing: Timing | None = None,
    *,
    window: tuple[float, float] | None = None,
) -> Metrics:
    if not result.engine.observing:
        raise ValueError("metrics read the observation log: replay with observe=True")
    p = prices or Prices()
    tm = timing or Timing()
    s = result.summary
    infers = [o for o in result.engine.log if isinstance(o, InferObs)]
    rejected_ops = {o.op for o in result.engine.log if isinstance(o, RejectObs)}
    served = [o for o in infers if o.op not in rejected_ops]
    refused = [o for o in infers if o.op in rejected_ops]
    # loads (spec/movement.md MV4): a loaded block is not recomputed; its tokens are priced as
    # cached input and its transfer (bytes / the source tier's read bandwidth) adds to TTFT
    bs = result.engine.block_size
    mem = result.engine.memory
    loaded: dict[int, int] = {}
    load_s: dict[int, float] = {}
    load_bytes: dict[str, int] = {}
    for o in result.engine.log:
        if isinstance(o, LoadObs):
            loaded[o.op] = loaded.get(o.op, 0) + bs
            c = mem.config(o.from_tier)
            if c.bytes_per_block is not None:
                load_bytes[o.from_tier] = load_bytes.get(o.from_tier, 0) + c.bytes_per_block
                if c.read_gbps is not None:
                    secs = c.bytes_per_block / (c.read_gbps * 1e9)
                    load_s[o.op] = load_s.get(o.op, 0.0) + secs
    load_tokens = sum(loaded.values())
    ttfts = [
        (o.miss_tokens - loaded.get(o.op, 0)) / tm.prefill_tok_per_s
        + load_s.get(o.op, 0.0)
        + tm.ttft_overhead_s
        for o in served
    ]
    decode = sum(o.output_tokens * tm.tpot_s for o in served)
    refused_prompt = sum(o.prompt_tokens for o in refused)
    requests = sorted(
        [(o.t, o.seq, o.miss_tokens - loaded.get(o.op, 0)) for o in served]
        + [(o.t, o.seq, o.prompt_tokens) for o in refused]  # retried from nothing (E3)
    )
    queued = queued_ttfts(requests, tm)  # (in the requests' order)
    if load_s:  # a transfer is not prefill work: it adds to its own request's TTFT only
        extra = {o.seq: load_s.get(o.op, 0.0) for o in served}
        queued = [q + extra.get(r[1], 0.0) for q, r in zip(queued, requests, strict=True)]
    recomputed = s.miss_tokens - load_tokens
    cached = s.hit_tokens + load_tokens
    input_cost = (recomputed * p.input + cached * p.cached_input + refused_prompt * p.input) / 1e6
    output_cost = (s.output_tokens + sum(o.output_tokens for o in refused)) * p.output / 1e6
    return Metrics(
        policy=s.policy,
        token_hit_rate=s.token_hit_rate,
        recomputed_tokens=recomputed,
        cost_usd=input_cost + output_cost,
        input_cost_usd=input_cost,
        output_cost_usd=output_cost,
        rejected=len(refused),
        rejected_prompt_tokens=refused_prompt,
        ttft_s_mean=sum(ttfts) / len(ttfts) if ttfts else 0.0,
        latency_s_total=sum(ttfts) + decode,
        queued_ttft_s_mean=sum(queued) / len(queued) if queued else 0.0,
        queued_ttft_s_p99=float(np.percentile(queued, 99)) if queued else 0.0,
        zombie_block_seconds=s.zombie_block_seconds,
        regretted_evictions=regretted_evictions(result.engine),
        evictions=sum(s.evictions.values()),
        writes=dict(s.writes),
        device_years=dict(s.device_years),
        settled_window=window,
        device_years_settled=settled_device_years(result, window) if window else {},
        movement=None
        if result.engine.movement is None
        else {
            "load_tokens": load_tokens,
            "load_s_total": sum(load_s.values()),
            "load_bytes": dict(sorted(load_bytes.items())),
        },
    )


def share_of_optimum(value: float, optimum: float) -> float:
    """How much of what an offline optimum achieves an online policy achieves (1.0 = all)."""
    return value / optimum if optimum else 1.0
