"""Invariants-only log conformance: no policy assumed, the log judged by the invariants alone.

The reference engine is driven by the implementation's log
(:class:`~checkers.conformance.oracle_log.Puppet` places, evicts and reclaims exactly as it says,
every victim it shows included) and the invariant monitor judges the run it reconstructs, as a
history checker judges a database against an isolation level rather than against one execution
(spec/invariants.md §Oracle).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from checkers.conformance.oracle_log import (
    MOVE_KINDS,
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
from kvmodel.io.observations import AllocObs, observation_to_json
from kvmodel.io.trace import Infer, Op, Trace

__all__ = ["check_log_invariants", "follow_every_victim"]


def check_log_invariants(
    trace: Trace,
    log: Sequence[Record],
    config: EngineConfig,
    invariants: Iterable[str],
    *,
    complete: bool = False,
) -> OracleVerdict:
    """Invariants-only mode: reconstruct the implementation's run from its log and judge it by
    the named invariants alone. A log that cannot be followed -- its hits, writes or rejections
    are not what its own residency gives on this trace -- is ILLEGAL as inconsistent."""
    by_op = records_by_op(log)
    n_ops = len(trace.ops)
    if any(op >= n_ops or op < 0 for op in by_op):
        return OracleVerdict("UNKNOWN", reason="the log names ops the trace does not have")
    moved = next((r for r in log if r["kind"] in MOVE_KINDS), None)
    if moved is not None:  # never an OK it did not earn, never a divergence it invented
        return OracleVerdict(
            "UNKNOWN",
            int(moved["op"]),
            f"the log moves KV between tiers (a {moved['kind']!r} record), which "
            "invariants-only mode does not yet follow (spec/movement.md MV11)",
        )
    last_logged = last_complete(by_op, n_ops, complete)
    puppet = Puppet(by_op)
    engine = Engine(config, puppet)
    mon = Monitor(engine, invariants)
    for i, op in enumerate(trace.ops):
        before = resident_state(engine)
        own = own_keys(engine, op)
        seen = len(engine.log)
        mon.before_op(op)
        try:
            engine.apply(op)
        except PolicyError as e:
            mon.policy_error(e)
        else:
            follow_every_victim(engine, op, puppet.victims.get(i, []), seen)
            mon.after_op(op)
        if mon.violations:
            v = mon.violations[0]
            why = _keyed(f"{v.invariant}: {v.message}", engine)
            return OracleVerdict("ILLEGAL", i, why, (), (), before)
        mine = decisions((observation_to_json(o) for o in engine.log.since(seen)), own)
        theirs = decisions(by_op.get(i, ()), own)
        if mine != theirs or puppet.missing is not None:
            if i >= last_logged:
                return OracleVerdict("UNKNOWN", i, "the log ends before the trace does")
            why = puppet.missing or "its decisions are not what its own residency gives"
            return OracleVerdict(
                "ILLEGAL", i, f"the log is inconsistent: {why}", tuple(mine), tuple(theirs), before
            )
    mon.at_end()
    if mon.violations:
        v = mon.violations[0]
        return OracleVerdict("ILLEGAL", v.op, _keyed(f"{v.invariant}: {v.message}", engine))
    return OracleVerdict("OK")


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


def _keyed(message: str, engine: Engine) -> str:
    """A monitor message with the reference's slot numbers (``block 7``) replaced by the keys
    the implementation knows its blocks by: the key the message names beside the slot where it
    does (the block's own, as the check saw it), else the last block written to that slot --
    which, for a block evicted and the slot rewritten within one op, is the wrong block."""
    key_of: dict[int, str] = {}
    for o in engine.log:
        if isinstance(o, AllocObs):
            key_of[o.block] = str(o.key)
    return re.sub(
        r"\bblock (\d+)(?: \(key ([^)]*)\))?",
        lambda m: f"block {m.group(2) or key_of.get(int(m.group(1)), m.group(1))}",
        message,
    )
