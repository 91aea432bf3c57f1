"""Invariants-only log conformance: no policy assumed, the log judged by the invariants alone.

The reference engine is driven by the implementation's log
(:class:`~checkers.conformance.oracle_log.Puppet` places, evicts and reclaims exactly as it says,
every victim it shows included) and the invariant monitor judges the run it reconstructs, as a
history checker judges a database against an isolation level rather than against one execution
(spec/invariants.md §Oracle).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from checkers.conformance.oracle_log import (
    MOVE_KINDS,
    LogStream,
    OracleVerdict,
    Puppet,
    Record,
    decisions,
    last_complete,
    own_keys,
    records_by_op,
    resident_state,
)
from checkers.invariants import Monitor
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import PolicyError
from kvmodel.ids import BlockKey, ContextId
from kvmodel.io.observations import AllocObs, Observation, observation_to_json
from kvmodel.io.trace import Infer, Op, Trace

__all__ = ["check_log_invariants", "follow_every_victim"]


def check_log_invariants(
    trace: Trace,
    log: Sequence[Record] | LogStream,
    config: EngineConfig,
    invariants: Iterable[str],
    *,
    complete: bool = False,
    tick: Callable[[], None] | None = None,
) -> OracleVerdict:
    """Invariants-only mode: reconstruct the implementation's run from its log and judge it by
    the named invariants alone. A log that cannot be followed -- its hits, writes or rejections
    are not what its own residency gives on this trace -- is ILLEGAL as inconsistent.

    A :class:`LogStream` is read op by op and the run's own records are forgotten after each
    op, so the judge holds the reconstructed state, not the log; the resident state before a
    divergent op is rebuilt when a verdict needs it."""
    by_op: Mapping[int, Sequence[Record]] = (
        log if isinstance(log, LogStream) else records_by_op(log)
    )
    n_ops = len(trace.ops)
    if any(op >= n_ops or op < 0 for op in by_op):
        return OracleVerdict("UNKNOWN", reason="the log names ops the trace does not have")
    if isinstance(log, LogStream):
        moved = log.first_move
    else:
        first = next((r for r in log if r["kind"] in MOVE_KINDS), None)
        moved = None if first is None else (int(first["op"]), str(first["kind"]))
    if moved is not None:  # never an OK it did not earn, never a divergence it invented
        return OracleVerdict(
            "UNKNOWN",
            moved[0],
            f"the log moves KV between tiers (a {moved[1]!r} record), which "
            "invariants-only mode does not yet follow (spec/movement.md MV11)",
        )
    last_logged = last_complete(by_op, n_ops, complete)
    puppet = Puppet(by_op)
    engine = Engine(config, puppet)
    mon = Monitor(engine, invariants)
    slots: dict[int, str] = {}  # each slot's last key written: the monitor's messages keyed
    for i, op in enumerate(trace.ops):
        own = own_keys(engine, op)
        seen = len(engine.log)
        mon.before_op(op)
        try:
            engine.apply(op)
        except PolicyError as e:
            mon.policy_error(e)
        else:
            follow_every_victim(engine, op, puppet.victims(i), seen)
            mon.after_op(op)
        ran = engine.log.since(seen)
        if mon.violations:
            v = mon.violations[0]
            why = _keyed(f"{v.invariant}: {v.message}", ran, slots)
            return OracleVerdict("ILLEGAL", i, why, (), (), _state_before(trace, by_op, config, i))
        mine = decisions((observation_to_json(o) for o in ran), own)
        theirs = decisions(by_op.get(i, ()), own)
        if mine != theirs or puppet.missing is not None:
            if i >= last_logged:
                return OracleVerdict("UNKNOWN", i, "the log ends before the trace does")
            why = puppet.missing or "its decisions are not what its own residency gives"
            before = _state_before(trace, by_op, config, i)
            return OracleVerdict(
                "ILLEGAL", i, f"the log is inconsistent: {why}", tuple(mine), tuple(theirs), before
            )
        for o in ran:
            if isinstance(o, AllocObs):
                slots[o.block] = str(o.key)
        engine.log.forget()  # (this op's records are read: a long run holds none of them)
        if tick is not None:
            tick()
    mon.at_end()
    if mon.violations:
        v = mon.violations[0]
        return OracleVerdict("ILLEGAL", v.op, _keyed(f"{v.invariant}: {v.message}", (), slots))
    return OracleVerdict("OK")


def _state_before(
    trace: Trace, by_op: Mapping[int, Sequence[Record]], config: EngineConfig, i: int
) -> tuple[str, ...]:
    """The reconstructed run's resident blocks before op ``i``, rebuilt (ops ``0..i-1`` under
    a fresh puppet, no monitor: it never changes what the engine does) -- a verdict needs it
    once, where a snapshot before every op cost the resident blocks at every op."""
    puppet = Puppet(by_op)
    engine = Engine(config, puppet)
    for j, op in enumerate(trace.ops[:i]):
        seen = len(engine.log)
        try:
            engine.apply(op)
        except PolicyError:
            pass  # (as the judged run went on past it)
        else:
            follow_every_victim(engine, op, puppet.victims(j), seen)
        engine.log.forget()
    return resident_state(engine)


def follow_every_victim(engine: Engine, op: Op, victims: Sequence[object], since: int) -> None:
    """Invariants-only mode and policy mode's adoption (``--keep-going``): the log's victims the
    engine did not need (a cache that frees a whole node) are evicted too, so the reconstructed
    run keeps the implementation's residency instead of drifting from it. One not evictable now
    stays, and the comparison of later decisions says the log is inconsistent.

    ``victims``: every victim the log records for ``op``; ``since``: where the engine's log
    stood before the op. A victim the engine already evicted in this op (its records since
    ``since``) is not followed again, once per eviction: a key evicted and then written afresh
    by the same inference (a cache that drops a block the prompt needs, then rewrites it) names
    a new block by then, which the log never evicted -- following it again evicted the new,
    Suspended block and made the reference's own log ILLEGAL (MORI, seed 28353)."""
    taken: dict[str, int] = {}
    for o in engine.log.since(since):
        if o.kind == "evict":
            taken[str(o.key)] = taken.get(str(o.key), 0) + 1
    extra = []
    for key in victims:
        if taken.get(str(key), 0):
            taken[str(key)] -= 1
        else:
            extra.append(key)
    if not extra:
        return
    where = {b.spec.key: b for b in engine.blocks.values()}
    ctx = op.ctx if isinstance(op, Infer) else ContextId("")
    for key in extra:
        b = where.get(BlockKey(str(key)))
        if b is None or b.id not in engine.blocks or not engine.view.evictable(b.id):
            continue
        engine.evict_now(b.id, ctx)


def _keyed(message: str, ran: Iterable[Observation], slots: Mapping[int, str]) -> str:
    """A monitor message with the reference's slot numbers (``block 7``) replaced by the keys
    the implementation knows its blocks by: the key the message names beside the slot where it
    does (the block's own, as the check saw it), else the last block written to that slot
    (``slots`` before the op, then the op's own records ``ran``) -- which, for a block evicted
    and the slot rewritten within one op, is the wrong block."""
    key_of = dict(slots)
    for o in ran:
        if isinstance(o, AllocObs):
            key_of[o.block] = str(o.key)
    return re.sub(
        r"\bblock (\d+)(?: \(key ([^)]*)\))?",
        lambda m: f"block {m.group(2) or key_of.get(int(m.group(1)), m.group(1))}",
        message,
    )
