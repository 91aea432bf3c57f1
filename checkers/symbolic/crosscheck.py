"""Every parametric proof checked against the executable model before it is given (issue 62
item 3; spec/invariants.md §Parametric proofs): the engine run on generated sessions under the
Monitor's ``symbolic-model`` check, and where prefix closure is proved, prefix closure and the
prefix-monotone axiom over every resident parent-child pair."""

from __future__ import annotations

import functools
from typing import Any

import attrs

from checkers.invariants.inductive import prefix_monotone
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Policy

__all__ = ["CROSS_SEEDS", "CROSS_TIERS", "CrossCheck", "cross_validate"]


@attrs.frozen
class CrossCheck:
    """What :func:`cross_validate` ran and what it found: the executable model's quiescent
    states checked against the axioms and inductive invariants, and the first that left them."""

    traces: int
    states: int
    left: str | None = None


#: the executable runs every parametric proof is checked against (issue 62 item 3): generated
#: agentic sessions on one tier and on two, under pressure (hundreds of evictions each)
CROSS_SEEDS = (0, 1, 2)
CROSS_TIERS = ((300,), (150, 300))


def cross_validate(policy: Policy, *, closure: bool = False) -> CrossCheck:
    """Run the executable model on :data:`CROSS_SEEDS` x :data:`CROSS_TIERS` with the Monitor's
    ``symbolic-model`` check: the parametric model's axioms and the inductive invariants the
    declarations make inductive, on every quiescent state; where ``closure`` (prefix closure's
    proof, the one proof that reads parent and child, was given) also prefix closure and the
    prefix-monotone axiom over every resident block and its resident parent. Deterministic
    (seeded traces)."""
    import copy

    from checkers.invariants import Monitor
    from kvmodel.config import EngineConfig
    from kvmodel.engine import Engine
    from kvmodel.ids import TierName
    from kvmodel.memory import TierConfig
    from kvmodel.workloads.agentic import AgenticParams, generate_agentic

    traces = states = 0
    for seed in CROSS_SEEDS:
        ops = generate_agentic(AgenticParams(seed=seed, sessions=2)).ops
        for sizes in CROSS_TIERS:
            names = ("hbm", "hbf")[: len(sizes)]
            config = EngineConfig(
                16, tuple(TierConfig(TierName(n), k) for n, k in zip(names, sizes, strict=True))
            )
            # (no-zombie-kv monitored: every block that can be Dead is judged, every op)
            watched = ("no-zombie-kv", "temporary-bypass")
            mon = Monitor(Engine(config, copy.deepcopy(policy)), watched, contract=False)
            traces += 1
            for k, op in enumerate(ops):
                if not mon.apply(op):
                    break
                states += 1
                found = mon.first("symbolic-model")
                left = found.message if found is not None else None
                if left is None and closure:  # (only prefix closure's proof reads the pairs)
                    left = _prefix_left(mon.engine)
                if left is not None:
                    return CrossCheck(
                        traces, states, f"{left} (seed {seed}, tiers {sizes}, op {k})"
                    )
    return CrossCheck(traces, states)


@attrs.frozen
class _Featured:
    """A block's features as :func:`prefix_monotone` reads them (holders counted)."""

    depth: int
    last_access: float
    last_op: int
    holders: int
    alloc_time: float
    state: BlockClass
    suspend_time: float | None


def _prefix_left(engine: Any) -> str | None:
    """Prefix closure and the prefix-monotone axiom over every resident block whose parent is
    resident in this quiescent state of ``engine`` (None: they hold)."""
    from checkers.invariants.structural import check_prefix_closed

    if (orphans := check_prefix_closed(engine)) != []:
        return f"block {orphans[0].block}: its parent is not resident (prefix closure)"
    view = engine.view
    by_key = {b.spec.key: bid for bid, b in engine.blocks.items() if b.spec.key is not None}

    def featured(bid: Any) -> _Featured:
        i = view.block(bid)
        return _Featured(
            i.depth, i.last_access, i.last_op, len(i.holders), i.alloc_time, i.state, i.suspend_time
        )

    for bid, b in engine.blocks.items():
        pid = by_key.get(b.spec.parent) if b.spec.key is not None else None
        if pid is None:
            continue
        if not _monotone(featured(pid), featured(bid)):
            return f"block {bid} and its parent {pid} leave the prefix-monotone axiom"
    return None


@functools.lru_cache(maxsize=1 << 16)
def _monotone(p: _Featured, c: _Featured) -> bool:
    """:func:`prefix_monotone` on concrete values, once per distinct pair (most blocks keep
    their features from one op to the next)."""
    from checkers.invariants import CONCRETE

    return bool(prefix_monotone(p, c, CONCRETE))
