"""Replay a trace through the engine and summarise it (spec §trace-format T5, CLI ``replay``)."""

from __future__ import annotations

import gc
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from kvmodel.config import EngineConfig, default_config
from kvmodel.engine import Engine
from kvmodel.errors import TraceError
from kvmodel.ids import TierName
from kvmodel.io.trace import Op, Trace, TraceHeader, op_name
from kvmodel.policy import Policy, resolve_policy

__all__ = [
    "GC_GEN0_DURING_REPLAY",
    "ReplayResult",
    "Summary",
    "fewer_collections",
    "replay",
    "summarize",
]


@attrs.frozen(slots=True)
class Summary:
    """The figures ``kvmodel replay --json`` prints (spec T5). Key order is part of the format."""

    policy: str
    ops: int
    infers: int
    prompt_tokens: int
    hit_tokens: int
    miss_tokens: int
    output_tokens: int
    rejected: int
    writes: dict[str, int]
    evictions: dict[str, int]
    frees: dict[str, int]
    resident_final: int
    dead_resident_final: int
    dead_resident_max: int
    zombie_block_seconds: float
    duration_s: float
    device_years: dict[str, float | None]
    hbf_device_years: float | None
    #: the movement layer's totals (spec/movement.md), for a policy that moves KV; absent from
    #: the JSON otherwise, so a run without moves prints what it printed before
    movement: dict[str, Any] | None = None

    @property
    def token_hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["token_hit_rate"] = round(self.token_hit_rate, 6)
        d["zombie_block_seconds"] = round(self.zombie_block_seconds, 6)
        for k in ("device_years",):
            d[k] = {n: (None if v is None else round(v, 6)) for n, v in d[k].items()}
        if d["hbf_device_years"] is not None:
            d["hbf_device_years"] = round(d["hbf_device_years"], 6)
        if d["movement"] is None:
            del d["movement"]
        return d


@attrs.frozen(slots=True)
class ReplayResult:
    """The engine after the last op (its observation ``log``, its state) and the run's
    :class:`Summary`."""

    engine: Engine
    summary: Summary


def summarize(engine: Engine, ops: int) -> Summary:
    st = engine.stats
    mem = engine.memory
    seconds = (st.t_last - st.t_first) if st.t_first is not None and st.t_last is not None else 0.0
    years = {t.name: mem.device_years(TierName(t.name), seconds) for t in mem.tiers}
    worn = [
        y for t in mem.tiers if t.pe_cycles is not None for y in [years[t.name]] if y is not None
    ]
    any_endurance = any(t.pe_cycles is not None for t in mem.tiers)
    return Summary(
        policy=engine.policy.name,
        ops=ops,
        infers=st.infers,
        prompt_tokens=st.prompt_tokens,
        hit_tokens=st.hit_tokens,
        miss_tokens=st.miss_tokens,
        output_tokens=st.output_tokens,
        rejected=st.rejected,
        writes={str(k): v for k, v in mem.writes.items()},
        evictions=dict(st.evictions),
        frees=dict(st.frees),
        resident_final=len(engine.blocks),
        dead_resident_final=len(engine.dead),
        dead_resident_max=st.dead_resident_max,
        zombie_block_seconds=st.zombie_block_seconds,
        duration_s=seconds,
        device_years={k: (None if v is None or math.isinf(v) else v) for k, v in years.items()},
        hbf_device_years=min(worn) if worn and any_endurance else None,
        movement=None if engine.movement is None else engine.movement.summary(),
    )


_GC_LOCK = threading.Lock()
_GC_DEPTH = 0
_GC_SAVED: tuple[int, ...] = ()
#: the cyclic collector's first-generation threshold while a replay runs (Python's default: 700)
GC_GEN0_DURING_REPLAY = 100_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often for the duration (re-entrant, thread-safe).

    A replay allocates millions of small objects that never form cycles (records, specs, keys;
    reference counting frees them); with Python's default threshold the collector walks the live
    ones again every 700 allocations, which cost a quarter of a large replay (measured:
    benchmarks/bench_vs_vllm.py, 17.5 s -> 13.8 s). Collections still run, 140x less often; the
    previous thresholds come back when the outermost replay ends.
    """
    global _GC_DEPTH, _GC_SAVED
    with _GC_LOCK:
        if _GC_DEPTH == 0:
            _GC_SAVED = gc.get_threshold()
            gen0, *rest = _GC_SAVED
            if gen0:  # 0: collection is off; leave it so
                gc.set_threshold(max(gen0, GC_GEN0_DURING_REPLAY), *rest)
        _GC_DEPTH += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_DEPTH -= 1
            if _GC_DEPTH == 0:
                gc.set_threshold(*_GC_SAVED)


def replay(
    trace: Trace | Iterable[Op],
    policy: str | Policy = "lru",
    config: EngineConfig | None = None,
    *,
    after_op: Callable[[Engine, int, Op], None] | None = None,
    observe: bool = True,
) -> ReplayResult:
    """Run every op; ``after_op(engine, i, op)`` is called after each (checkers hook in here).
    ``observe=False`` builds no observation log (the summary does not need it; metrics do).

    A bad op raises :class:`TraceError` located at its trace line.
    """
    cfg = config or default_config()
    pol = resolve_policy(policy)
    ops = trace.ops if isinstance(trace, Trace) else tuple(trace)
    prepare = getattr(pol, "prepare", None)
    if callable(prepare):  # offline policies read the whole trace first (spec PP5)
        prepare(trace if isinstance(trace, Trace) else Trace(TraceHeader(), ops), cfg)
    engine = Engine(cfg, pol, observe=observe)
    source = trace.source if isinstance(trace, Trace) else None
    with fewer_collections():
        for i, op in enumerate(ops):
            try:
                engine.apply(op)
            except TraceError as e:
                line = trace.line_of(i) if isinstance(trace, Trace) else i + 1
                raise e.located(file=source, line=line, op=op_name(op)) from None
            if after_op is not None:
                after_op(engine, i, op)
    return ReplayResult(engine, summarize(engine, len(ops)))
