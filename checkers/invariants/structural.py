"""State invariants that every correct engine state satisfies, whatever the policy.

Each check is a plain function from an :class:`~kvmodel.engine.Engine` to a list of
:class:`Violation` (empty when it holds). They read the engine through its public surface: the
``view``, ``memory`` and the read-only ``contexts``/``index`` mappings.
"""

from __future__ import annotations

import attrs

from kvmodel.blocks import ROOT_KEY
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, ContextId

__all__ = [
    "Violation",
    "check_accounting",
    "check_chains",
    "check_no_zombie",
    "check_prefix_closed",
]


@attrs.frozen(slots=True)
class Violation:
    """What broke, where, and why. A result, never raised (STYLE §6)."""

    invariant: str
    message: str
    block: BlockId | None = None
    ctx: ContextId | None = None
    #: index of the trace op at which it was seen (None: not tied to an op)
    op: int | None = None


def check_accounting(engine: Engine) -> list[Violation]:
    """spec I-accounting: per tier free + used = capacity; slots and resident blocks agree."""
    out = []
    resident = engine.blocks.keys()
    per_tier = engine.memory.count_by_tier(resident)
    for tier, (free, used, cap) in engine.memory.accounting().items():
        if free + used != cap:
            out.append(Violation("accounting", f"tier {tier}: free {free} + used {used} != {cap}"))
        in_tier = per_tier[tier]
        if in_tier != used:
            out.append(
                Violation(
                    "accounting", f"tier {tier}: {used} slots used but {in_tier} resident blocks"
                )
            )
    for b in sorted(resident - engine.memory.used_slots()):
        out.append(Violation("accounting", "resident block on a free list", block=b))
    return out


def check_chains(engine: Engine) -> list[Violation]:
    """Every open context's materialized chain is resident, indexed and held (spec P3).

    Reads the engine's tables directly (not ``view.chain``) so that it reports, rather than
    trips over, a corrupted chain.
    """
    out = []
    for cid, c in engine.contexts.items():
        if not c.is_open:
            continue
        if c.valid > len(c.materialized):
            out.append(Violation("chains", "valid prefix longer than the chain", ctx=cid))
        for depth, spec in enumerate(c.materialized):
            bid = engine.index.get(spec.key) if spec.key is not None else None
            b = engine.blocks.get(bid) if bid is not None else None
            if b is None:
                out.append(Violation("chains", f"chain entry {depth} is not resident", ctx=cid))
            elif b.depth != depth or cid not in b.holders or not b.indexed:
                out.append(
                    Violation(
                        "chains",
                        f"chain entry {depth} (block {bid}) is not held by its context",
                        bid,
                        cid,
                    )
                )
    return out


def check_no_zombie(engine: Engine) -> list[Violation]:
    """spec I-no-zombie-kv: at a quiescent point no dead block is resident."""
    return [Violation("no-zombie-kv", "dead block resident", block=b) for b in engine.view.dead()]


def check_prefix_closed(engine: Engine) -> list[Violation]:
    """spec I-prefix-closed-residency: every resident full block's parent is resident."""
    # the resident table read directly: a view snapshot per block only to read its key cost
    # this check more than every other structural check together
    # (sorted are the orphans alone, in block order: a sort of every resident block each op
    # was most of this check)
    blocks = engine.blocks
    keys = {b.spec.key for b in blocks.values()}
    orphans = [
        bid
        for bid, b in blocks.items()
        if b.spec.key is not None and b.spec.parent != ROOT_KEY and b.spec.parent not in keys
    ]
    return [
        Violation("prefix-closed-residency", "orphan: parent block not resident", block=bid)
        for bid in sorted(orphans)
    ]
