"""A policy space written as data (kvmodel issue 17; spec/policies.md §Policy space).

A :class:`Candidate` is a value: an eviction rank, a reclaim rule, a bypass rule and a
placement rule, each chosen from a small grammar. It becomes a policy two ways, both read from
the same value: :meth:`Candidate.policy` builds a :class:`~kvmodel.policy.BasePolicy` subclass
whose rank, ``reclaim`` and ``bypasses`` are that data (so ``kvmodel prove`` inlines exactly what
runs), and :meth:`Candidate.source` prints it as a module that ``kvmodel check`` and ``prove``
accept by import path.

The grammar::

    rank      = state(Dead, Expired, <live order>)      live order: a permutation of
              [ suspend_time, only Suspended, MRU|LRU ]             Temporary, Suspended, Active
              [ tier ]                                  first tier first (HBM-first eviction)
              last_access LRU|MRU
              depth  tail-first
    reclaim   = Reclaim.DEAD | Reclaim.NONE
    bypass    = {Temporary} | {}
    placement = configuration order (HBM first) | Lachesis segment classes
              | Lachesis segment classes + its predictive path (workers admitted to HBM by
                predicted lifetime from the spawn record)

Dead and Expired always rank first: the search's safety gate requires
no-live-eviction-before-dead-reclaim, and no candidate that breaks it by construction is worth
a slot. Everything else the gate checks (prefix-closed residency, for one, which an MRU recency
or a tier-first rank can break) is left for the checkers to find.
"""

from __future__ import annotations

import functools
import itertools
import json
import textwrap
from collections.abc import Iterator
from typing import Any, Literal

import attrs

from kvmodel.lifecycle import BlockClass
from kvmodel.policy import STRUCTURAL_CLAIMS, BasePolicy, Placement, RankTerm, Reclaim
from kvmodel.view import ModelView, NewBlock
from policies.lachesis import Lachesis, LachesisDet

__all__ = ["GATE_CLAIMS", "LIVE", "Candidate", "candidates", "distance", "neighbours"]

_C = BlockClass

#: the live classes whose eviction order a candidate chooses
LIVE: tuple[BlockClass, ...] = (_C.TEMPORARY, _C.SUSPENDED, _C.ACTIVE)

#: what every candidate on the frontier must pass, whatever else it claims (issue 17 item 3)
GATE_CLAIMS: frozenset[str] = frozenset(
    {
        "no-zombie-kv",
        "no-live-eviction-before-dead-reclaim",
        "pinned-never-evicted",
        "prefix-closed-residency",
        "reclaim-dead-only",
    }
)

Within = Literal["mru", "lru", "none"]
Recency = Literal["lru", "mru"]
Placing = Literal["hbm-first", "segments", "predictive"]


@attrs.frozen
class Candidate:
    """One point of the space. ``name`` is derived from the value, so two equal candidates
    have one name and a name read back gives the candidate (:meth:`parse`)."""

    live: tuple[BlockClass, ...] = LIVE
    suspended: Within = "mru"
    tier_first: bool = False
    recency: Recency = "lru"
    reclaim: Reclaim = Reclaim.DEAD
    bypass_temporary: bool = True
    placement: Placing = "hbm-first"

    def __attrs_post_init__(self) -> None:
        if sorted(c.value for c in self.live) != sorted(c.value for c in LIVE):
            raise ValueError(f"live must order {[c.value for c in LIVE]} (got {self.live})")

    # ------------------------------------------------------------------ reading the value

    @property
    def name(self) -> str:
        live = "".join(c.value[0] for c in self.live)  # t, s, a
        return (
            f"d-{live}-s{self.suspended}-{'tier-' if self.tier_first else ''}{self.recency}"
            f"-{self.reclaim.value}-{'bypass' if self.bypass_temporary else 'keep'}"
            f"-{self.placement}"
        )

    @property
    def behaviour(self) -> Candidate:
        """The candidate that behaves as this one, Temporary first in its live order (the order
        of Suspended and Active kept). No evictable block is ever Temporary (spec lifecycle.md
        L5.4), so where Temporary stands in a rank is unobservable: a candidate and its
        behaviour replay every trace to one observation log (a test pins it), and the search
        scores one of them (spec policies.md, §Policy space)."""
        rest = tuple(c for c in self.live if c is not _C.TEMPORARY)
        return attrs.evolve(self, live=(_C.TEMPORARY, *rest))

    @classmethod
    def parse(cls, name: str) -> Candidate:
        """The candidate a :attr:`name` names (a ``ValueError`` naming what is wrong)."""
        for c in candidates():
            if c.name == name:
                return c
        raise ValueError(f"not a candidate of the policy space: {name!r}")

    @property
    def class_name(self) -> str:
        """The policy class's name: ``policies.space:<class_name>`` resolves it."""
        return "Candidate_" + self.name.replace("-", "_")

    @property
    def path(self) -> str:
        return f"{__name__}:{self.class_name}"

    def rank(self) -> tuple[RankTerm, ...]:
        terms = [RankTerm("state", order=(_C.DEAD, _C.EXPIRED, *self.live))]
        if self.suspended != "none":
            terms.append(
                RankTerm(
                    "suspend_time",
                    descending=self.suspended == "mru",
                    only=frozenset({_C.SUSPENDED}),
                )
            )
        if self.tier_first:
            terms.append(RankTerm("tier"))
        terms.append(RankTerm("last_access", descending=self.recency == "mru"))
        terms.append(RankTerm("depth", descending=True))
        return tuple(terms)

    def claims(self) -> frozenset[str]:
        """What the candidate claims: the gate's invariants, and those its data is built for
        (the checkers decide whether it keeps them)."""
        out = set(STRUCTURAL_CLAIMS | GATE_CLAIMS | {"free-at-boundary"})
        if self.live == LIVE:
            out.add("state-priority-eviction")
        if self.suspended == "mru":
            out.add("suspended-mru")
        if self.bypass_temporary:
            out.add("temporary-bypass")
        if self.placement != "hbm-first":
            out.add("deterministic-placement")
        return frozenset(out)

    def bypasses(self) -> frozenset[BlockClass]:
        return frozenset({_C.TEMPORARY}) if self.bypass_temporary else frozenset()

    # ------------------------------------------------------------------ as a policy

    def policy(self) -> BasePolicy:
        """A fresh policy instance whose rank, reclaim and bypass rules are this value."""
        return _policy_class(self)()

    def source(self, provenance: str = "") -> str:
        """A module defining the candidate as class ``Discovered`` (``module:Discovered``)."""
        live = ", ".join(f"_C.{c.name}" for c in self.live)
        terms = []
        for t in self.rank()[1:]:
            args = [json.dumps(t.feature)]
            if t.descending:
                args.append("descending=True")
            if t.only is not None:
                args.append("only=frozenset({" + ", ".join(f"_C.{c.name}" for c in t.only) + "})")
            terms.append(f"        RankTerm({', '.join(args)}),")
        base = _BASES[self.placement].__name__
        text = provenance.strip() or f"The policy space's candidate {self.name}."
        doc = "\n\n".join(
            textwrap.fill(par, 96, break_on_hyphens=False) for par in text.split("\n\n")
        )
        claims = "\n".join(f"            {json.dumps(c)}," for c in sorted(self.claims()))
        bypass = "frozenset({_C.TEMPORARY})" if self.bypass_temporary else "frozenset()"
        lines = [
            f'"""{doc}\n"""',
            "",
            "from __future__ import annotations",
            "",
            "from typing import ClassVar",
            "",
            "from kvmodel.lifecycle import BlockClass",
            "from kvmodel.policy import "
            + ("BasePolicy, " if base == "BasePolicy" else "")
            + "Placement, RankTerm, Reclaim",
            "from kvmodel.view import ModelView, NewBlock",
            *([f"from policies.lachesis import {base}"] if base != "BasePolicy" else []),
            "",
            '__all__ = ["Discovered"]',
            "",
            "_C = BlockClass",
            f"_BYPASS: frozenset[BlockClass] = {bypass}",
            "",
            "",
            f"class Discovered({base}):",
            '    name: ClassVar[str] = "discovered"',
            "    #: the point of the policy space (policies/space.py) this policy is",
            f"    point: ClassVar[str] = {json.dumps(self.name)}",
            "    rank: ClassVar[tuple[RankTerm, ...]] = (",
            f'        RankTerm("state", order=(_C.DEAD, _C.EXPIRED, {live})),',
            *terms,
            "    )",
            f"    reclaim: ClassVar[Reclaim | None] = Reclaim.{self.reclaim.name}",
            "    bypasses: ClassVar[frozenset[BlockClass] | None] = _BYPASS",
            f"    compares_times_only: ClassVar[bool] = {self.placement != 'predictive'}",
            "    claims: ClassVar[frozenset[str]] = frozenset(",
            "        {",
            claims,
            "        }",
            "    )",
            "",
            "    def place(self, view: ModelView, block: NewBlock) -> Placement:",
            "        tiers = super().place(view, block).tiers",
            "        return Placement(tiers, bypass=block.state in _BYPASS)",
            "",
        ]
        return "\n".join(lines)


#: the policy class each placement rule is built on
_BASES: dict[str, type[BasePolicy]] = {
    "hbm-first": BasePolicy,
    "segments": LachesisDet,
    "predictive": Lachesis,
}


@functools.cache
def _policy_class(c: Candidate) -> type[BasePolicy]:
    base = _BASES[c.placement]
    bypass = c.bypasses()

    def place(self: BasePolicy, view: ModelView, block: NewBlock) -> Placement:
        tiers = base.place(self, view, block).tiers
        return Placement(tiers, bypass=block.state in bypass)

    body: dict[str, Any] = {
        "name": f"discovered:{c.name}",
        "rank": c.rank(),
        "reclaim": c.reclaim,
        "bypasses": bypass,
        # place reads the block's classes only, but the predictive path reads spawn times
        "compares_times_only": c.placement != "predictive",
        "claims": c.claims(),
        "candidate": c,
        "place": place,
        "__module__": __name__,
    }
    return type(c.class_name, (base,), body)


#: the live orders, KVTether's first
_ORDERS: tuple[tuple[BlockClass, ...], ...] = tuple(
    sorted(itertools.permutations(LIVE), key=lambda o: (o != LIVE, [c.value for c in o]))
)


def candidates() -> Iterator[Candidate]:
    """Every candidate, in a fixed order (smallest departures from KVTether's data first)."""
    every = [
        Candidate(live, within, tier, recency, reclaim, bypass, placing)
        for live in _ORDERS
        for within in ("mru", "none", "lru")
        for tier in (False, True)
        for recency in ("lru", "mru")
        for reclaim in (Reclaim.DEAD, Reclaim.NONE)
        for bypass in (True, False)
        for placing in ("hbm-first", "segments", "predictive")
    ]
    yield from sorted(every, key=lambda c: (distance(c, Candidate()), c.name))


def distance(a: Candidate, b: Candidate) -> int:
    """How many of the space's dimensions two candidates differ in."""
    return sum(getattr(a, f.name) != getattr(b, f.name) for f in attrs.fields(Candidate))


def neighbours(c: Candidate) -> list[Candidate]:
    """The candidates one dimension away, in a fixed order."""
    return [o for o in candidates() if distance(o, c) == 1]


@functools.cache
def _classes() -> dict[str, Candidate]:
    return {c.class_name: c for c in candidates()}


def __getattr__(attr: str) -> type[BasePolicy]:
    """``policies.space:<class name>`` names any candidate by import path (``kvmodel check``,
    ``prove``, worker processes and pickle all resolve policies that way)."""
    c = _classes().get(attr)
    if c is None:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
    return _policy_class(c)
