"""The parametric proofs' inductive invariants and axioms, written once beside the claims
(spec/invariants.md §Parametric proofs): :mod:`checkers.symbolic.parametric` reads them as Z3
terms over a block sort of any size, the :class:`~checkers.invariants.Monitor` evaluates them on
every quiescent state of a run (finding ``symbolic-model``). No Z3 here: a checked replay loads
none."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from checkers.invariants.predicates import BLOCK, Logic
from kvmodel.lifecycle import BLOCK_CLASS_PRIORITY, BlockClass
from kvmodel.policy import (
    BasePolicy,
    RankTerm,
    Reclaim,
    declared_bypass,
    declared_rank,
    declared_reclaim,
    moves,
    resolve_policy,
)

__all__ = [
    "AXIOMS",
    "INDUCTIVE",
    "Declared",
    "StateTerms",
    "declared",
    "inductive_applies",
    "prefix_monotone",
    "wellformed",
]

_D, _T, _SUSP = BlockClass.DEAD, BlockClass.TEMPORARY, BlockClass.SUSPENDED


@attrs.frozen
class StateTerms:
    """What the inductive invariants and the well-formedness axiom read of one block in one
    state: the Monitor builds it from the engine (concrete values), the proofs from the
    parametric state (Z3 terms)."""

    quiescent: Any = True  # between two ops
    resident: Any = False
    state: Any = None  # its class
    in_flight: Any = False
    holders: Any = 0  # how many contexts hold it
    temporary_kv: Any = False  # it holds KV written as Temporary
    indexed: Any = False  # its key maps to it in the prefix index


def wellformed(b: StateTerms, lg: Logic) -> Any:
    """The axiom every state satisfies (spec L5.2): a resident block not in flight is Dead
    exactly when no context holds it."""
    return lg.any_(
        lg.not_(b.resident),
        b.in_flight,
        (b.holders == 0) == lg.is_(b.state, _D),
    )


#: claim -> its inductive invariant, one predicate ``holds(block, logic)`` over
#: :class:`StateTerms` (a claim not here needs the axioms alone). The Monitor evaluates it on
#: every quiescent state of a run where :func:`inductive_applies`; the proofs, on every state.
INDUCTIVE: Mapping[str, Callable[[Any, Logic], Any]] = MappingProxyType(
    {
        "no-zombie-kv": lambda b, lg: lg.not_(lg.all_(b.quiescent, BLOCK["no-zombie-kv"](b, lg))),
        "temporary-bypass": lambda b, lg: lg.not_(lg.all_(b.temporary_kv, b.indexed)),
    }
)


def inductive_applies(policy: object, claim: str) -> bool:
    """Whether ``claim``'s inductive invariant is inductive under ``policy``'s declarations:
    no-zombie-kv under the declared reclaim of every Dead block, temporary-bypass under a
    declared bypass of Temporary KV. Where it applies, a run that leaves it is a model that
    does not describe the engine (a test pins that the proofs agree)."""
    d = declared(policy)
    if d.unsupported is not None:
        return False
    if claim == "no-zombie-kv":
        return d.reclaims_dead
    if claim == "temporary-bypass":
        return _T in d.bypass
    return False


#: class -> the classes of no lower priority (L5.2)
_AT_LEAST = {
    x: tuple(y for y in BlockClass if BLOCK_CLASS_PRIORITY[x] <= BLOCK_CLASS_PRIORITY[y])
    for x in BlockClass
}


def prefix_monotone(p: Any, c: Any, lg: Logic) -> Any:
    """The axiom relating a resident block ``c`` to its resident parent ``p`` (spec: Parametric
    proofs): every inference that used ``c`` used ``p`` (prefix dependency, P1), so ``c`` is
    deeper, used no later, held by no more contexts, of no higher class (L5.2), suspended no
    earlier when both are Suspended, and written no earlier. Read with the features of
    :class:`~kvmodel.view.BlockInfo` (``holders`` a count), as Z3 terms or concrete values."""
    return lg.all_(
        c.depth > p.depth,
        c.last_access <= p.last_access,
        c.last_op <= p.last_op,
        c.holders <= p.holders,
        c.alloc_time >= p.alloc_time,
        lg.any_(
            *(
                lg.all_(lg.is_(c.state, x), lg.any_(*(lg.is_(p.state, y) for y in above)))
                for x, above in _AT_LEAST.items()
            )
        ),
        lg.any_(
            lg.not_(lg.all_(lg.is_(c.state, _SUSP), lg.is_(p.state, _SUSP))),
            lg.not_(lg.later(p.suspend_time, c.suspend_time)),
        ),
    )


#: the rules the model takes from the engine, each checked at run time (spec: Parametric proofs)
AXIOMS: Mapping[str, str] = MappingProxyType(
    {
        "well-formed": "a resident block not in flight is Dead exactly when no context holds "
        "it (Monitor, every op: finding symbolic-model)",
        "rank-first": "a victim is the rank's first evictable block of the tiers the "
        "allocation may take (Monitor, every eviction: finding engine-contract)",
        "evictable": "a victim is resident, not in flight and not Pinned (the engine refuses "
        "any other: policy-protocol)",
        "declared-reclaim": "after every op the declared rule frees exactly the resident Dead "
        "blocks, or nothing (BasePolicy.on_op; a changed declaration is refused)",
        "declared-bypass": "a block written of a bypassed class is freed by its op and never "
        "indexed (a placement against the declaration is refused)",
        "frees": "a block leaves residency only by eviction, reclaim, its op's end (bypassed "
        "or partial) or a roll-back (spec M4.5)",
        "hits": "a hit names a resident, indexed block (B5), and a bypassed or partial block is "
        "never indexed (Monitor: the temporary-bypass inductive invariant, finding "
        "symbolic-model)",
        "prefix-monotone": "a resident block and its resident parent: the child deeper, used "
        "no later, held by no more contexts, of no higher class, suspended no earlier, written "
        "no earlier; a child in flight has its parent in flight (prove's cross-check, every "
        "pair of every state)",
        "writes": "a full block is written while its parent is resident, a partial block ends "
        "its chain, a roll-back frees a set closed under children (B2, B6, P7.7; prove's "
        "cross-check: prefix closure on every state)",
        "placement": "a policy whose place is BasePolicy's lists every tier, so its evictions "
        "may take from any tier (M4; a place that is code declares nothing here)",
    }
)


@attrs.frozen
class Declared:
    """What the model reads of a policy; ``unsupported`` says why it cannot."""

    name: str
    rank: tuple[RankTerm, ...] = ()
    reclaims_dead: bool = False
    bypass: frozenset[BlockClass] = frozenset()
    unsupported: str | None = None
    #: its place is BasePolicy's (every tier, in configuration order): an eviction may take
    #: from any tier. False for a place that is code, whatever it does
    places_everywhere: bool = False


def declared(policy: object) -> Declared:
    """The policy's declarations, or why no symbolic model can read it (this one test serves
    the parametric model and the fragment's, :func:`checkers.symbolic.bmc.profile`): an
    eviction order, reclaim or bypass that is code, a policy that plans from the whole trace,
    brings its own engine, moves KV between tiers (no symbolic model has copies), or ranks by
    ``suspend_time`` outside Suspended (where no block has one)."""
    pol = resolve_policy(policy)  # type: ignore[arg-type]
    name = pol.name
    rank = declared_rank(pol)
    if rank is None:
        why = (
            "its eviction order is code, not a rank"
            if getattr(pol, "rank", ())
            else "it has no declarative rank"
        )
        return Declared(name, unsupported=why)
    if getattr(pol, "engine_class", None) is not None:
        return Declared(name, unsupported="it brings its own engine")
    if callable(getattr(pol, "prepare", None)):
        return Declared(name, unsupported="it plans from the whole trace (offline)")
    if moves(pol):
        return Declared(name, unsupported="it moves KV between tiers (the model has no copies)")
    for t in rank:
        if t.feature == "suspend_time" and not (t.only is not None and t.only <= {_SUSP}):
            return Declared(name, unsupported="its rank reads suspend_time outside Suspended")
    rule = declared_reclaim(pol)
    if rule is None:
        return Declared(name, unsupported="its reclaim rule is code (on_op is overridden)")
    bypass = declared_bypass(pol)
    if bypass is None:
        return Declared(
            name, unsupported="its bypass rule is code (place is overridden without bypasses)"
        )
    own = getattr(pol, "__dict__", {})
    everywhere = type(pol).place is BasePolicy.place and "place" not in own
    return Declared(
        name, tuple(rank), rule is Reclaim.DEAD, frozenset(bypass), places_everywhere=everywhere
    )
