"""Rank-order proofs with Z3: a declarative rank key, translated once, proved for all features.

A policy whose eviction order is a :class:`~kvmodel.policy.RankTerm` tuple is run by sorting
(the engine) and, here, translated into an SMT formula over two symbolic blocks ``a`` and ``b``
(every feature a free variable, constrained only by what the model guarantees). An ordering
property "under premise P, a is evicted before b" is **proved** when ``P(a, b) ∧ ¬before(a, b)``
is unsatisfiable, and **violated** with the concrete feature values of a model otherwise. A
timeout is reported as ``unknown``, never as proved.

Scope: ordering properties of the rank itself (spec/invariants.md: the eviction-order part of
no-live-eviction-before-dead-reclaim, state-priority-eviction, suspended-mru). Bounded model
checking and k-induction of the engine over a harness fragment are in :mod:`checkers.symbolic.bmc`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import z3

from checkers.invariants import ORDER
from checkers.symbolic.z3util import RLIMIT, TIMEOUT_MS, Z3_LOGIC, limited
from kvmodel.lifecycle import BLOCK_CLASS_PRIORITY, BlockClass
from kvmodel.policy import Policy, RankTerm, claimed_invariants, declared_rank

__all__ = [
    "PROPERTIES",
    "Proof",
    "SymBlock",
    "before",
    "order_breaks",
    "prove_policy",
    "prove_rank",
]

_CLASSES = list(BlockClass)
_LIVE = (BlockClass.TEMPORARY, BlockClass.SUSPENDED, BlockClass.ACTIVE)
_PRIO = BLOCK_CLASS_PRIORITY


@attrs.frozen
class SymBlock:
    """A symbolic evictable block: one Z3 variable per feature of ``BlockInfo``."""

    name: str
    state: Any
    last_access: Any
    last_op: Any
    suspend_time: Any
    alloc_time: Any
    depth: Any
    tier: Any
    holders: Any
    id: Any

    @classmethod
    def fresh(cls, name: str) -> SymBlock:
        return cls(
            name,
            z3.Int(f"{name}.state"),
            z3.Real(f"{name}.last_access"),
            z3.Int(f"{name}.last_op"),
            z3.Real(f"{name}.suspend_time"),
            z3.Real(f"{name}.alloc_time"),
            z3.Int(f"{name}.depth"),
            z3.Int(f"{name}.tier"),
            z3.Int(f"{name}.holders"),
            z3.Int(f"{name}.id"),
        )

    def is_(self, c: BlockClass) -> Any:
        return self.state == _CLASSES.index(c)

    def wellformed(self) -> Any:
        """What the model guarantees of any evictable block (never Pinned, spec M4.1)."""
        return z3.And(
            self.state >= 0,
            self.state < len(_CLASSES),
            z3.Not(self.is_(BlockClass.PINNED)),
            self.depth >= 0,
            self.tier >= 0,
            self.holders >= 0,
            self.id >= 0,
            self.last_op >= -1,
            # dead blocks have no holder; live ones at least one
            (self.holders == 0) == self.is_(BlockClass.DEAD),
        )


def _term(t: RankTerm, b: SymBlock) -> Any:
    if t.feature == "state":
        v: Any = z3.IntVal(len(t.order))
        for i in reversed(range(len(t.order))):
            v = z3.If(b.is_(t.order[i]), z3.IntVal(i), v)
    else:
        v = {
            "last_access": b.last_access,
            "last_op": b.last_op,
            "suspend_time": b.suspend_time,
            "alloc_time": b.alloc_time,
            "depth": b.depth,
            "tier": b.tier,
            "holders": b.holders,
        }[t.feature]
    if t.descending:
        v = -v
    if t.only is not None:
        v = z3.If(z3.Or(*(b.is_(c) for c in t.only)), v, 0)
    return v


def before(rank: Sequence[RankTerm], a: SymBlock, b: SymBlock) -> Any:
    """``a`` is evicted before ``b``: lexicographically smaller key, ties by smaller id."""
    terms = [(_term(t, a), _term(t, b)) for t in rank] + [(a.id, b.id)]
    out: Any = z3.BoolVal(False)
    for ka, kb in reversed(terms):
        out = z3.Or(ka < kb, z3.And(ka == kb, out))
    return out


#: property name -> premise P(a, b) under which a must go before b
#: the claimed invariant whose eviction order each property is
PROPERTY_OF_CLAIM = {
    "no-live-eviction-before-dead-reclaim": "dead-before-live",
    "state-priority-eviction": "class-priority",
    "suspended-mru": "mru-within-suspended",
}


def _property(invariant: str) -> Callable[[SymBlock, SymBlock], Any]:
    return lambda a, b: ORDER[invariant](a, b, Z3_LOGIC)


#: property -> "``a`` must be evicted before ``b``" over two symbolic evictable blocks: the
#: invariant's one definition (:data:`checkers.invariants.ORDER`) read as Z3 terms
PROPERTIES: dict[str, Callable[[SymBlock, SymBlock], Any]] = {
    prop: _property(inv) for inv, prop in PROPERTY_OF_CLAIM.items()
}


@attrs.frozen
class Proof:
    prop: str
    rung: str  # "proved" | "violated" | "unknown"
    seconds: float
    counterexample: dict[str, dict[str, str]] | None = None


def prove_rank(
    rank: Sequence[RankTerm],
    prop: str,
    *,
    timeout_ms: int = TIMEOUT_MS,
    rlimit: int = RLIMIT,
    classes: tuple[BlockClass, BlockClass] | None = None,
) -> Proof:
    """Prove one property of a rank. ``suspend_time`` is modelled as defined for Suspended
    blocks only (where the engine always has it), so a term may use it only under
    ``only`` ⊆ {Suspended}; anything else is refused rather than proved unsoundly.
    ``classes`` restricts ``a`` and ``b`` to one class each."""
    import time

    for t in rank:
        if t.feature == "suspend_time" and not (
            t.only is not None and t.only <= {BlockClass.SUSPENDED}
        ):
            raise ValueError("suspend_time outside only={suspended} is not modelled")

    a, b = SymBlock.fresh("a"), SymBlock.fresh("b")
    s = limited(z3.Solver(), rlimit=rlimit, timeout_ms=timeout_ms)
    s.add(
        a.wellformed(),
        b.wellformed(),
        a.id != b.id,
        PROPERTIES[prop](a, b),
        z3.Not(before(rank, a, b)),
    )
    if classes is not None:
        s.add(a.is_(classes[0]), b.is_(classes[1]))
    t0 = time.perf_counter()
    r = s.check()
    dt = time.perf_counter() - t0
    if r == z3.unsat:
        return Proof(prop, "proved", dt)
    if r == z3.sat:
        m = s.model()
        cex = {}
        for blk in (a, b):
            vals = {}
            for f in attrs.fields(SymBlock):
                if f.name == "name":
                    continue
                v = m.eval(getattr(blk, f.name), model_completion=True)
                vals[f.name] = _CLASSES[v.as_long()].value if f.name == "state" else str(v)
            cex[blk.name] = vals
        return Proof(prop, "violated", dt, cex)
    return Proof(prop, "unknown", dt)


def order_breaks(
    rank: Sequence[RankTerm], prop: str, *, timeout_ms: int = TIMEOUT_MS, rlimit: int = RLIMIT
) -> list[tuple[BlockClass, BlockClass]]:
    """The class pairs ``(first, second)`` for which the rank may evict a ``first`` block before
    a ``second`` one against ``prop`` (violated, or not shown to hold within the budget); empty
    when the rank keeps the order for all feature values."""
    out: list[tuple[BlockClass, BlockClass]] = []
    evictable = [c for c in _CLASSES if c is not BlockClass.PINNED]
    for ca in evictable:
        for cb in evictable:
            p = prove_rank(rank, prop, timeout_ms=timeout_ms, rlimit=rlimit, classes=(ca, cb))
            if p.rung != "proved":
                out.append((cb, ca))  # a must go first; the rank may take b first
    return out


def prove_policy(
    policy: Policy,
    props: Sequence[str] | None = None,
    *,
    timeout_ms: int = TIMEOUT_MS,
    rlimit: int = RLIMIT,
) -> list[Proof]:
    """Prove the ordering properties a rank policy claims (or ``props``). A policy whose
    ``eviction_order`` is code (even if it also declares a ``rank``) has no rank to prove: what
    it evicts is not what the rank says (:func:`kvmodel.policy.declared_rank`)."""
    rank = declared_rank(policy)
    if rank is None:
        why = "its eviction order is code" if getattr(policy, "rank", ()) else "it has no rank"
        raise ValueError(f"policy {policy.name!r} has no declarative rank to prove: {why}")
    if props is None:
        claims = claimed_invariants(policy)
        props = [PROPERTY_OF_CLAIM[c] for c in sorted(claims) if c in PROPERTY_OF_CLAIM]
    return [prove_rank(rank, p, timeout_ms=timeout_ms, rlimit=rlimit) for p in props]
