"""Parametric proofs: a declarative policy's claims for any number of contexts, blocks, tiers
and ops (spec/invariants.md §Parametric proofs).

The fragment rungs (:mod:`checkers.symbolic.bmc`) speak for a few contexts of one block each;
this model speaks for every size. Blocks are an uninterpreted Z3 sort, so a state is a set of
blocks of any size, and each of a block's attributes is an array over that sort: resident, in
flight, its class (L5.2, as the engine's view has it), the features a rank reads, and four marks
the claims need (freed at the op's end without a reclaim, Dead when the op began, holding KV
written as Temporary, indexed). Contexts, messages, chains and tiers do not appear: what an op
does to them is abstracted to what it can do to blocks, which is anything at all (a *havoc* of
every block's class and features), so the model over-approximates every op the trace format
has. What it keeps exact is what the policy declares and the engine enforces:

* a victim is evictable (resident, not in flight, not Pinned; spec M4.1) and the first of the
  evictable blocks of the tiers the allocation may take by the declared rank, ties by id (PP3);
* after each op, the declared reclaim rule frees exactly the resident Dead blocks (or nothing);
* a block written while of a class the declared bypass names is freed by its op and never
  indexed (P8), as is a partial block;
* a block leaves residency only by eviction, reclaim, that end-of-op free, or a rejected
  request's roll-back (M4.5).

A state is one of the engine's between two micro-steps of an op: ``begin`` (the op's effect on
classes and features), ``touch`` (more of it, mid-op), ``evict``, ``alloc``, ``hit`` and
``drop`` (a roll-back) during an inference, and ``end`` (the end-of-op frees and the reclaim),
after which the engine is quiescent. Every state is **well formed**: a resident block not in
flight is Dead exactly when no context holds it, and features lie in their ranges. That and the
four rules above are the model's *axioms* (:data:`~checkers.invariants.inductive.AXIOMS`, each
with what checks it at run time): the Monitor checks well-formedness and the inductive
invariants on every quiescent state of every run (finding ``symbolic-model``), and no proof is
given before :func:`cross_validate` has run the engine under the same check, so a model that
does not describe the engine says so loudly.

Each claim is proved by **1-induction**: its inductive invariant (:data:`INDUCTIVE`, or only the
axioms) holds initially, and from any well-formed state where it holds, one step keeps it and
does not break the claim (:data:`checkers.invariants.BLOCK`, :data:`checkers.invariants.ORDER`:
the same definitions the Monitor evaluates). A failed consecution gives a counterexample to
induction -- a concrete pair of states, found over one to three named blocks that are the whole
sort (:class:`Domain`) -- and the claim falls back to the bounded rungs, never to ``proved``.
Before a ``proved`` is given, a model of three blocks must make the situation the claim
constrains (:meth:`PStep.situation`), under this policy's or a witness policy's declarations;
otherwise the answer is ``unknown``. Quantifiers range over the block
sort only (the verification conditions are EPR but for the arithmetic of the features), and
every query runs under the deterministic ``rlimit``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs
import z3

from checkers.invariants import BLOCK, ORDER
from checkers.invariants.inductive import (
    AXIOMS,
    INDUCTIVE,
    Declared,
    StateTerms,
    declared,
    inductive_applies,
    prefix_monotone,
    wellformed,
)
from checkers.symbolic.transition import SymBlockTerms
from checkers.symbolic.z3rank import SymBlock, before
from checkers.symbolic.z3util import (
    RLIMIT,
    TIMEOUT_MS,
    Z3_LOGIC,
    limited,
    rlimit_count,
    unknown_reason,
)
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Policy, claimed_invariants, resolve_policy

__all__ = [
    "ACTIONS",
    "AXIOMS",
    "CROSS_SEEDS",
    "CROSS_TIERS",
    "INDUCTIVE",
    "NOT_EXPRESSED",
    "PARAMETRIC_CLAIMS",
    "SCOPE",
    "STRUCTURAL",
    "CrossCheck",
    "Declared",
    "ParametricAnswer",
    "StateTerms",
    "cross_validate",
    "declared",
    "inductive_applies",
    "prove_parametric",
    "wellformed",
]

SCOPE = "for all sizes: any number of contexts, blocks per context, tiers and ops"

ACTIONS = ("begin", "touch", "evict", "alloc", "hit", "drop", "end")

_CLS = list(BlockClass)
_D, _P, _T = BlockClass.DEAD, BlockClass.PINNED, BlockClass.TEMPORARY

#: the claims the parametric model expresses (each read from its one definition)
PARAMETRIC_CLAIMS = (
    "no-zombie-kv",
    "free-at-boundary",
    "no-live-eviction-before-dead-reclaim",
    "state-priority-eviction",
    "suspended-mru",
    "pinned-never-evicted",
    "no-eviction-in-flight",
    "reclaim-dead-only",
    "temporary-bypass",
    "prefix-closed-residency",
)

#: the claims it does not, and why: each stays with the fragment rungs, --reach and check
NOT_EXPRESSED: Mapping[str, str] = MappingProxyType(
    {
        "accounting": "free and used counts and write records are the engine's bookkeeping; "
        "the model has sets of blocks, not counters",
        "chains": "the model has no hash chains or contexts",
        "no-stale-hit": "the model has no hash chains or prompts",
        "legal-transitions": "the model havocs every class an op may change, so message "
        "states are not tracked",
        "deterministic-placement": "placement reads segment classes, which the model does not "
        "have (and a place is code)",
        "endurance-budget": "wear is arithmetic over a whole run",
    }
)


#: the declarations a situation may be witnessed under when the policy's own never make it
#: (as the fragment rungs' witness policies: LRU keeps Dead KV, KVTether reclaims and bypasses)
_WITNESS = ("lru", "kvtether")


# ----------------------------------------------------------------------------- the model

_B = z3.DeclareSort("Block")
_ID = z3.Function("block_id", _B, z3.IntSort())
_OF_ID = z3.Function("block_of_id", z3.IntSort(), _B)


def _c(x: BlockClass) -> Any:
    return z3.IntVal(_CLS.index(x))


class Domain:
    """How the model's formulas range over blocks. :data:`ALL` reads them over the block sort
    as it is (quantifiers, array equalities, lambdas): what the proofs ask. :meth:`finite` reads
    the *same* formulas over ``n`` named blocks that are the whole sort (ground conjunctions):
    a model of that reading is a model of the parametric one with ``n`` blocks, which is how a
    witness and a counterexample to induction are found fast (Z3's model search over
    quantified arrays is slow; refuting them is not)."""

    def __init__(self, n: int | None, tag: str = "") -> None:
        self.n = n
        self.blocks = [] if n is None else [z3.Const(f"{tag}e{i}", _B) for i in range(n)]

    def forall(self, name: str, body: Callable[[Any], Any]) -> Any:
        if self.n is None:
            b = z3.Const(name, _B)
            return z3.ForAll([b], body(b))
        return z3.And(*(body(e) for e in self.blocks))

    def exists(self, name: str, body: Callable[[Any], Any]) -> Any:
        if self.n is None:
            b = z3.Const(name, _B)
            return z3.Exists([b], body(b))
        return z3.Or(*(body(e) for e in self.blocks))

    def same(self, x: Any, y: Any) -> Any:
        """Arrays ``x`` and ``y`` agree on every block."""
        if self.n is None:
            return x == y
        return z3.And(*(x[e] == y[e] for e in self.blocks))

    def forall2(self, name: str, body: Callable[[Any, Any], Any]) -> Any:
        """``body`` of every pair of blocks."""
        if self.n is None:
            a, b = z3.Const(f"{name}.a", _B), z3.Const(f"{name}.b", _B)
            return z3.ForAll([a, b], body(a, b))
        return z3.And(*(body(a, b) for a in self.blocks for b in self.blocks))

    def defined(self, x: Any, body: Callable[[Any], Any], name: str) -> Any:
        """Array ``x`` maps every block ``b`` to ``body(b)``."""
        if self.n is None:
            b = z3.Const(name, _B)
            return x == z3.Lambda([b], body(b))
        return z3.And(*(x[e] == body(e) for e in self.blocks))

    def closed(self) -> Any:
        """The named blocks are distinct and the whole sort (a finite reading), else True."""
        if self.n is None:
            return z3.BoolVal(True)
        b = z3.Const("closure", _B)
        return z3.And(
            z3.Distinct(*self.blocks) if self.n > 1 else z3.BoolVal(True),
            z3.ForAll([b], z3.Or(*(b == e for e in self.blocks))),
        )

    def member(self, v: Any) -> Any:
        if self.n is None:
            return z3.BoolVal(True)
        return z3.Or(*(v == e for e in self.blocks))

    def ids_distinct(self) -> Any:
        if self.n is None:
            b = z3.Const("ids.b", _B)
            return z3.ForAll([b], _OF_ID(_ID(b)) == b, patterns=[_ID(b)])
        if self.n == 1:
            return z3.BoolVal(True)
        return z3.Distinct(*(_ID(e) for e in self.blocks))


ALL = Domain(None)


_BOOLS = ("res", "fly", "byp", "dead0", "tmp", "idx")
_INTS = ("cls", "lo", "dp", "tr", "hd")
_REALS = ("la", "st", "at")
_FEATURES = ("lo", "dp", "tr", "hd", "la", "st", "at")


class PState:
    """One state of the parametric model: an array over the block sort per attribute."""

    def __init__(self, tag: str, dom: Domain = ALL) -> None:
        self.tag, self.dom = tag, dom
        self.arr: dict[str, Any] = {}
        for names, sort in (
            (_BOOLS, z3.BoolSort()),
            (_INTS, z3.IntSort()),
            (_REALS, z3.RealSort()),
        ):
            for n in names:
                self.arr[n] = z3.Array(f"{tag}.{n}", _B, sort)
        #: the parent relation, ``par(c, p)`` when ``p`` holds the key ``c`` names as its parent:
        #: an uninterpreted relation (not a function into blocks, nor an array of arrays, each
        #: of which ran every query out of its budget), so the conditions stay in EPR; ``lf``:
        #: ``c`` is partial, so the last of its chain
        self.par = z3.Function(f"{tag}.par", _B, _B, z3.BoolSort())
        self.arr["lf"] = z3.Array(f"{tag}.lf", _B, z3.BoolSort())
        self.q = z3.Bool(f"{tag}.quiescent")
        self.closing = z3.Bool(f"{tag}.closing")

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["arr"][name]
        except KeyError:
            raise AttributeError(name) from None

    def sym(self, b: Any) -> SymBlock:
        """``b`` as z3rank's symbolic block (the rank and the orders read it)."""
        return SymBlock(
            str(b),
            self.cls[b],
            self.la[b],
            self.lo[b],
            self.st[b],
            self.at[b],
            self.dp[b],
            self.tr[b],
            self.hd[b],
            _ID(b),
        )

    def terms(self, b: Any) -> StateTerms:
        return StateTerms(
            self.q,
            self.res[b],
            self.cls[b],
            self.fly[b],
            self.hd[b],
            self.tmp[b],
            self.idx[b],
        )

    def evictable(self, b: Any, allow: Any) -> Any:
        """Spec M4.1, in the tiers ``allow`` admits."""
        return z3.And(self.res[b], z3.Not(self.fly[b]), self.cls[b] != _c(_P), allow(self.tr[b]))

    def block_ok(self, b: Any) -> Any:
        """The well-formedness axiom (:func:`wellformed`) and the features' ranges."""
        return z3.And(
            self.cls[b] >= 0,
            self.cls[b] < len(_CLS),
            self.dp[b] >= 0,
            self.tr[b] >= 0,
            self.hd[b] >= 0,
            self.lo[b] >= -1,
            wellformed(self.terms(b), Z3_LOGIC),
            z3.Implies(z3.Or(self.fly[b], self.byp[b], self.idx[b], self.tmp[b]), self.res[b]),
            z3.Implies(self.q, z3.And(z3.Not(self.fly[b]), z3.Not(self.byp[b]))),
        )

    def pair_ok(self, c: Any, p: Any) -> Any:
        """The prefix-monotone axiom over a resident block ``c`` and its resident parent."""
        return z3.Implies(
            z3.And(self.res[c], self.par(c, p), self.res[p]),
            z3.And(
                c != p,
                prefix_monotone(self.sym(p), self.sym(c), Z3_LOGIC),
                z3.Implies(self.fly[c], self.fly[p]),
            ),
        )

    def wellformed(self) -> Any:
        return z3.And(
            self.dom.forall(f"{self.tag}.wf", self.block_ok),
            self.dom.forall2(f"{self.tag}.wf2", self.pair_ok),
        )

    def initial(self) -> Any:
        return z3.And(
            self.q,
            self.dom.forall(
                f"{self.tag}.init", lambda b: z3.And(*(z3.Not(self.arr[n][b]) for n in _BOOLS))
            ),
        )


class PStep:
    """One micro-step from ``s`` to ``t`` with the policy's declarations inlined (both states
    read over one :class:`Domain`)."""

    def __init__(self, s: PState, t: PState, tag: str, d: Declared) -> None:
        self.s, self.t, self.d = s, t, d
        dom = self.dom = s.dom
        self.kind = z3.Int(f"{tag}.kind")
        self.v = z3.Const(f"{tag}.block", _B)  # the victim, the block written, hit or dropped
        #: the tiers an eviction may take from: every tier for a place that declares none
        #: (BasePolicy's lists them all), any set of tiers for a place that is code
        self.allow: Any = (
            (lambda tier: z3.BoolVal(True))
            if d.places_everywhere
            else z3.Function(f"{tag}.tiers", z3.IntSort(), z3.BoolSort())
        )
        self.w2 = z3.Const(f"{tag}.parent", _B)  # a second block a claim may name
        self.partial = z3.Bool(f"{tag}.partial")
        self.rewrite = z3.Bool(f"{tag}.rewrite")
        self.k = {a: self.kind == i for i, a in enumerate(ACTIONS)}
        v = self.v

        def same(*names: str) -> list[Any]:
            return [dom.same(t.arr[n], s.arr[n]) for n in names]

        def at_v(name: str, value: Any) -> Any:  # as before but at v, which gets ``value``
            return dom.same(t.arr[name], z3.Store(s.arr[name], v, value))

        marks = ("res", "fly", "byp", "tmp", "idx")
        attrs_ = ("cls", *_FEATURES, "lf")
        keep_par = dom.forall2(f"{tag}.par", lambda a, b: t.par(a, b) == s.par(a, b))
        mid = [z3.Not(s.q), z3.Not(t.q), t.closing == s.closing]
        rank_first = dom.forall(
            f"{tag}.rival",
            lambda b: z3.Implies(
                z3.And(s.evictable(b, self.allow), b != v), before(d.rank, s.sym(v), s.sym(b))
            ),
        )
        gone = z3.Or(self.partial, self.in_bypass(t.cls[v]))
        act = {
            # the op's effect on classes and features: anything (they are havoc)
            "begin": z3.And(
                s.q,
                z3.Not(t.q),
                *same(*marks, "lf"),
                keep_par,
                dom.defined(t.dead0, lambda b: z3.And(s.res[b], s.cls[b] == _c(_D)), f"{tag}.d0"),
            ),
            "touch": z3.And(*mid, *same("res", "byp", "tmp", "idx", "dead0", "lf"), keep_par),
            "evict": z3.And(
                *mid,
                s.evictable(v, self.allow),
                rank_first,
                at_v("res", False),
                at_v("idx", False),
                at_v("tmp", False),
                *same("fly", "byp", "dead0", *attrs_),
                keep_par,
            ),
            "alloc": z3.And(
                *mid,
                z3.Not(s.res[v]),
                at_v("res", True),
                at_v("fly", True),
                at_v("byp", gone),
                at_v("idx", z3.Not(gone)),
                at_v("tmp", z3.And(z3.Not(self.rewrite), t.cls[v] == _c(_T))),
                at_v("dead0", False),
                *(at_v(n, t.arr[n][v]) for n in attrs_ if n != "lf"),
                at_v("lf", self.partial),
                # its parent (at most one) is resident and not the partial end of a chain
                dom.forall2(f"{tag}.row", lambda a, b: z3.Or(a == v, t.par(a, b) == s.par(a, b))),
                dom.forall(
                    f"{tag}.up",
                    lambda b: z3.Implies(t.par(v, b), z3.And(s.res[b], z3.Not(s.lf[b]), b != v)),
                ),
                dom.forall2(
                    f"{tag}.one",
                    lambda a, b: z3.Implies(z3.And(t.par(v, a), t.par(v, b)), a == b),
                ),
            ),
            "hit": z3.And(
                *mid,
                s.res[v],
                s.idx[v],
                at_v("fly", True),
                *same("res", "byp", "tmp", "idx", "dead0", *attrs_),
                keep_par,
            ),
            "drop": z3.And(
                *mid,
                s.fly[v],
                *(at_v(n, False) for n in marks),
                *same("dead0", *attrs_),
                keep_par,
                # a roll-back frees what its request wrote, a set closed under children: read
                # as a sequence, children first
                dom.forall(f"{tag}.kid", lambda b: z3.Not(z3.And(s.res[b], s.par(b, v), b != v))),
            ),
            "end": z3.And(
                z3.Not(s.q),
                t.q,
                dom.defined(
                    t.res,
                    lambda b: z3.And(s.res[b], z3.Not(s.byp[b]), z3.Not(self.reclaimed(b))),
                    f"{tag}.r",
                ),
                dom.defined(t.fly, lambda b: z3.BoolVal(False), f"{tag}.f"),
                dom.defined(t.byp, lambda b: z3.BoolVal(False), f"{tag}.y"),
                dom.defined(t.idx, lambda b: z3.And(s.idx[b], t.res[b]), f"{tag}.i"),
                dom.defined(t.tmp, lambda b: z3.And(s.tmp[b], t.res[b]), f"{tag}.m"),
                *same("dead0", "cls", "lf", *(f for f in _FEATURES if f != "hd")),
                keep_par,
                # a block the inference wrote is on its context's chain now
                dom.forall(f"{tag}.h", lambda b: z3.Implies(z3.Not(s.fly[b]), t.hd[b] == s.hd[b])),
            ),
        }
        self.cons = z3.And(
            self.kind >= 0,
            self.kind < len(ACTIONS),
            dom.member(v),
            dom.member(self.w2),
            *(z3.Implies(self.k[a], act[a]) for a in ACTIONS),
        )

    def in_bypass(self, cls: Any) -> Any:
        return z3.Or(
            z3.BoolVal(False), *(cls == _c(c) for c in sorted(self.d.bypass, key=_CLS.index))
        )

    def reclaimed(self, b: Any) -> Any:
        """The declared reclaim frees ``b`` at this ``end``."""
        s = self.s
        if not self.d.reclaims_dead:
            return z3.BoolVal(False)
        return z3.And(s.res[b], z3.Not(s.byp[b]), s.cls[b] == _c(_D))

    # -- what the claims read, from their one definitions

    def violated(self, claim: str, b: Any) -> Any:
        """``claim`` is broken by this step (or in its target state), at block ``b``."""
        s, t, k, v = self.s, self.t, self.k, self.v
        if claim in ORDER:
            return z3.And(
                k["evict"],
                s.evictable(b, self.allow),
                ORDER[claim](s.sym(b), s.sym(v), Z3_LOGIC),
            )
        if claim == "no-eviction-in-flight":
            return z3.And(k["evict"], s.fly[v])
        if claim == "no-zombie-kv":
            return z3.And(t.q, BLOCK[claim](t.terms(b), Z3_LOGIC))
        if claim == "free-at-boundary":
            terms = SymBlockTerms(
                resident=t.res[b], state=t.cls[b], was_dead=s.dead0[b], closing=s.closing
            )
            return z3.And(k["end"], BLOCK[claim](terms, Z3_LOGIC))
        if claim == "pinned-never-evicted":
            evicted = SymBlockTerms(removed=True, removed_state=s.cls[v])
            reclaimed = SymBlockTerms(removed=self.reclaimed(b), removed_state=s.cls[b])
            return z3.Or(
                z3.And(k["evict"], BLOCK[claim](evicted, Z3_LOGIC)),
                z3.And(k["end"], BLOCK[claim](reclaimed, Z3_LOGIC)),
            )
        if claim == "reclaim-dead-only":
            terms = SymBlockTerms(reclaimed=self.reclaimed(b), removed_state=s.cls[b])
            return z3.And(k["end"], BLOCK[claim](terms, Z3_LOGIC))
        if claim == "temporary-bypass":
            written = SymBlockTerms(
                written=z3.And(z3.Not(self.partial), z3.Not(self.rewrite)),
                written_state=t.cls[v],
                bypassed=self.in_bypass(t.cls[v]),
            )
            hit = SymBlockTerms(hit=True, temporary_kv=s.tmp[v])
            return z3.Or(
                z3.And(k["alloc"], BLOCK[claim](written, Z3_LOGIC)),
                z3.And(k["hit"], BLOCK[claim](hit, Z3_LOGIC)),
            )
        if claim == "prefix-closed-residency":
            return z3.And(t.q, _orphan(t, b, self.w2))
        raise ValueError(f"{claim!r} is not expressed by the parametric model")

    def situation(self, claim: str, b: Any, c: Any) -> Any:
        """The situation ``claim`` constrains made by this step (blocks ``b``, ``c``): where no
        step can make it, a proof of the claim says nothing (issue 62 item 1)."""
        s, t, k, v = self.s, self.t, self.k, self.v
        if claim in ORDER:  # an eviction choosing between two blocks the invariant orders
            return z3.And(
                k["evict"],
                s.evictable(b, self.allow),
                s.evictable(c, self.allow),
                ORDER[claim](s.sym(b), s.sym(c), Z3_LOGIC),
            )
        if claim == "no-eviction-in-flight":
            return z3.And(k["evict"], s.fly[b])
        if claim in ("no-zombie-kv", "free-at-boundary"):  # a resident block dies
            return z3.And(
                s.res[b], t.res[b], s.cls[b] != _c(_D), t.cls[b] == _c(_D), k["begin"], t.closing
            )
        if claim == "pinned-never-evicted":  # an eviction beside a Pinned block
            return z3.And(k["evict"], s.res[b], s.cls[b] == _c(_P))
        if claim == "reclaim-dead-only":
            return z3.And(k["end"], self.reclaimed(b))
        if claim == "temporary-bypass":
            return z3.And(k["alloc"], t.cls[v] == _c(_T), z3.Not(self.partial))
        if claim == "prefix-closed-residency":  # an eviction that may take a block or its parent
            return z3.And(
                k["evict"], s.evictable(b, self.allow), s.par(b, c), s.evictable(c, self.allow)
            )
        raise ValueError(claim)


# ----------------------------------------------------------------------------- the proofs

#: claims every policy the model reads has by the engine's rules alone (as the fragment's
#: structural rungs): proved, but a proof of the engine's axioms, not of the policy's choices
STRUCTURAL: Mapping[str, str] = MappingProxyType(
    {
        "pinned-never-evicted": "the engine offers no Pinned victim and a declared reclaim "
        "frees only Dead blocks (axioms evictable, declared-reclaim), whatever the policy",
        "no-eviction-in-flight": "the engine offers no victim in flight (axiom evictable), "
        "whatever the policy",
        "reclaim-dead-only": "a declared reclaim frees only Dead blocks (axiom "
        "declared-reclaim), whatever the policy",
    }
)


@attrs.frozen
class ParametricAnswer:
    """One claim's parametric verdict: ``proved`` (for all sizes), ``not inductive`` (with the
    counterexample to induction: the claim falls back to the bounded rungs), or ``unknown``
    (``reason``). ``situation`` names the situation a proof was shown to cover."""

    invariant: str
    rung: str  # proved | not inductive | unknown
    seconds: float
    reason: str = ""
    inductive_invariant: str = ""
    situation: str = ""
    cti: dict[str, Any] | None = None
    queries: int = 0
    rlimit_units: int = 0
    #: quiescent states of the executable model checked against the model's axioms and
    #: inductive invariants before the proof was given (:func:`cross_validate`)
    cross_checked: int = 0

    @property
    def scope(self) -> str:
        return SCOPE if self.rung == "proved" else "none"

    @property
    def structural(self) -> str | None:
        """Why a ``proved`` holds by the engine's rules for any policy the model reads."""
        return STRUCTURAL.get(self.invariant) if self.rung == "proved" else None

    @property
    def method(self) -> str:
        if self.rung == "unknown":
            return "none"
        return (
            "1-induction over the parametric model (blocks an uninterpreted sort): initiation "
            "and consecution of the inductive invariant, every state well formed"
        )

    def render(self) -> str:
        what = {
            "proved": "proved for all sizes",
            "not inductive": "not inductive (falls back to the bounded rungs)",
            "unknown": f"unknown ({self.reason})",
        }[self.rung]
        line = f"{self.invariant:<38} {what:<34} {self.seconds:7.2f} s"
        if self.rung == "proved":
            line += f"\n    invariant: {self.inductive_invariant}; covers {self.situation}; "
            line += f"its rules kept on {self.cross_checked:,} executable states"
        if self.structural:
            line += f"\n    structural: {self.structural}"
        if self.cti is not None:
            line += "\n    counterexample to induction: " + _cti_text(self.cti)
        return line


def _invariant_text(claim: str) -> str:
    extra = {
        "no-zombie-kv": "at every quiescent state no resident block is Dead",
        "temporary-bypass": "no block holding KV written as Temporary is indexed",
        "prefix-closed-residency": "in every state, mid-op too, every resident block's parent "
        "is resident and not partial, and only partial blocks are freed at an op's end",
    }.get(claim)
    return "the axioms" + (f" and: {extra}" if extra else "")


_SITUATION_TEXT = {
    "no-live-eviction-before-dead-reclaim": "an eviction choosing between dead or expired and "
    "live KV",
    "state-priority-eviction": "an eviction choosing between blocks of two ordered classes",
    "suspended-mru": "an eviction choosing between Suspended blocks suspended at different times",
    "no-eviction-in-flight": "an eviction while blocks are in flight",
    "no-zombie-kv": "a resident block that dies",
    "free-at-boundary": "a closing op that kills a resident block",
    "pinned-never-evicted": "an eviction beside a Pinned block",
    "reclaim-dead-only": "a reclaim",
    "temporary-bypass": "a Temporary block written",
    "prefix-closed-residency": "an eviction that may take a block or its parent",
}


def _orphan(st: PState, c: Any, p: Any) -> Any:
    """``c`` is resident in ``st`` and its parent ``p`` is not (prefix-closed-residency's
    formula: a full block past the root whose parent key no resident block holds)."""
    return z3.And(st.res[c], st.par(c, p), z3.Not(st.res[p]))


def _inv(claim: str, st: PState) -> Any:
    """The claim's inductive invariant (beyond well-formedness) over every block of ``st``."""
    if claim == "prefix-closed-residency":
        # the claim itself in every state (mid-op too), no parent the partial end of its chain,
        # and what an op's end frees is partial (the model is asked only without a bypass)
        return z3.And(
            st.dom.forall2(
                f"{st.tag}.inv",
                lambda c, p: z3.Implies(
                    z3.And(st.res[c], st.par(c, p)), z3.And(st.res[p], z3.Not(st.lf[p]))
                ),
            ),
            st.dom.forall(f"{st.tag}.inv1", lambda b: z3.Implies(st.byp[b], st.lf[b])),
        )
    pred = INDUCTIVE.get(claim)
    if pred is None:
        return z3.BoolVal(True)
    return st.dom.forall(f"{st.tag}.inv", lambda b: pred(st.terms(b), Z3_LOGIC))


def _solver(rlimit: int, timeout_ms: int) -> z3.Solver:
    return limited(z3.Solver(), rlimit=rlimit, timeout_ms=timeout_ms)


def _check(solver: z3.Solver, *fs: Any) -> tuple[Any, z3.Solver]:
    solver.add(*fs)
    return solver.check(), solver


def prove_parametric(
    policy: str | Policy,
    claims: Iterable[str] | None = None,
    *,
    rlimit: int = RLIMIT,
    timeout_ms: int = TIMEOUT_MS,
) -> list[ParametricAnswer]:
    """Each of ``claims`` (default: what the policy claims) proved for all sizes, shown not
    inductive with a counterexample to induction, or ``unknown`` with the reason."""
    pol = resolve_policy(policy)
    names = sorted(claimed_invariants(pol)) if claims is None else list(claims)
    d = declared(pol)
    out = []
    for name in names:
        units, t0 = rlimit_count(), time.perf_counter()
        a = _prove_one(d, name, rlimit, timeout_ms)
        out.append(
            attrs.evolve(a, seconds=time.perf_counter() - t0, rlimit_units=rlimit_count() - units)
        )
    if any(a.rung == "proved" for a in out):
        t0 = time.perf_counter()
        closure = any(a.rung == "proved" and a.invariant == _CLOSED for a in out)
        key = (type(pol).__module__, type(pol).__qualname__, d, closure)
        if key not in _CROSS_CHECKED:  # (the runs depend on the class and its declarations)
            _CROSS_CHECKED[key] = cross_validate(pol, closure=closure)
        dt = time.perf_counter() - t0
        out = [_after_cross_check(a, _CROSS_CHECKED[key], dt) for a in out]
    return out


_CROSS_CHECKED: dict[tuple[str, str, Declared, bool], CrossCheck] = {}
_CLOSED = "prefix-closed-residency"


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


def _after_cross_check(a: ParametricAnswer, cc: CrossCheck, dt: float) -> ParametricAnswer:
    """A ``proved`` stands only if the executable model kept the model's axioms and invariants
    on every state the cross-check reached; else the symbolic model is wrong, and says so."""
    if a.rung != "proved":
        return a
    a = attrs.evolve(a, seconds=a.seconds + dt, cross_checked=cc.states)
    if cc.left is None:
        return a
    why = f"the executable model leaves the parametric model's rules: {cc.left}"
    return attrs.evolve(a, rung="unknown", reason=why)


#: the finite readings a counterexample to induction is looked for in, and a witness (blocks)
CTI_BLOCKS = (1, 2, 3)
WITNESS_BLOCKS = 3


def _step_query(
    claim: str, d: Declared, dom: Domain, tag: str, goal: Callable[[PStep, Any, Any], Any]
) -> tuple[list[Any], PState, PState, PStep, Any]:
    """The formulas of "one step from a well-formed state keeping the invariant, and ``goal``"
    over ``dom``, with the states, the step and the block ``goal`` names."""
    s, t = PState(f"{tag}s", dom), PState(f"{tag}t", dom)
    step = PStep(s, t, tag, d)
    if dom.n is None:
        b, c = z3.Const(f"{tag}.at", _B), z3.Const(f"{tag}.other", _B)
    else:
        b, c = dom.blocks[0], dom.blocks[min(1, dom.n - 1)]
    fs = [
        dom.closed(),
        dom.ids_distinct(),
        s.wellformed(),
        t.wellformed(),
        _inv(claim, s),
        step.cons,
        goal(step, b, c),
    ]
    return fs, s, t, step, b


def _bad(claim: str) -> Callable[[PStep, Any, Any], Any]:
    return lambda st, b, c: z3.Or(z3.Not(_inv(claim, st.t)), st.violated(claim, b))


def _prove_one(d: Declared, claim: str, rlimit: int, timeout_ms: int) -> ParametricAnswer:
    if claim in NOT_EXPRESSED:
        return ParametricAnswer(claim, "unknown", 0.0, f"not expressed: {NOT_EXPRESSED[claim]}")
    if claim not in PARAMETRIC_CLAIMS:
        return ParametricAnswer(claim, "unknown", 0.0, "not expressed by the parametric model")
    if d.unsupported is not None:
        return ParametricAnswer(claim, "unknown", 0.0, f"outside the model: {d.unsupported}")
    if claim == "prefix-closed-residency" and not d.places_everywhere:
        why = (
            "its place is code: the tiers an eviction may take from are not declared, and "
            "evicting a parent from one tier while its child stays in another orphans it"
        )
        return ParametricAnswer(claim, "unknown", 0.0, why)
    if claim == "prefix-closed-residency" and d.bypass:
        why = "it bypasses blocks, and the model does not follow what is written after one"
        return ParametricAnswer(claim, "unknown", 0.0, why)
    text = _invariant_text(claim)
    queries = 0
    # initiation: the empty, quiescent engine satisfies the invariant
    s0 = PState("init")
    r, solver = _check(
        _solver(rlimit, timeout_ms), s0.initial(), s0.wellformed(), z3.Not(_inv(claim, s0))
    )
    queries += 1
    if r != z3.unsat:
        why = "the initial state " + ("breaks it" if r == z3.sat else unknown_reason(solver))
        return ParametricAnswer(claim, "unknown", 0.0, why, text, queries=queries)
    # consecution: one step from any well-formed state keeping it. A small counterexample to
    # induction is looked for first over a few named blocks (Z3 finds models of ground
    # formulas at once, of quantified arrays slowly); then the sort itself is asked, where
    # only unsat -- the proof -- is quick
    for n in CTI_BLOCKS:
        fs, s, t, step, b = _step_query(claim, d, Domain(n, "c"), f"c{n}", _bad(claim))
        r, solver = _check(_solver(rlimit, timeout_ms), *fs)
        queries += 1
        if r == z3.sat:
            cti = _decode(solver.model(), s, t, step, b)
            return ParametricAnswer(claim, "not inductive", 0.0, "", text, cti=cti, queries=queries)
    fs, s, t, step, b = _step_query(claim, d, ALL, "a", _bad(claim))
    r, solver = _check(_solver(rlimit, timeout_ms), *fs)
    queries += 1
    if r == z3.sat:
        cti = _decode(solver.model(), s, t, step, b)
        return ParametricAnswer(claim, "not inductive", 0.0, "", text, cti=cti, queries=queries)
    if r == z3.unknown:
        why = f"{unknown_reason(solver)} in the consecution query (no counterexample to "
        why += f"induction of up to {CTI_BLOCKS[-1]} blocks)"
        return ParametricAnswer(claim, "unknown", 0.0, why, text, queries=queries)
    # no vacuous proof: some step of the model makes the situation the claim constrains, under
    # this policy's declarations or a witness policy's (a model of WITNESS_BLOCKS blocks)
    made = False
    for wd in (d, *(declared(w) for w in _WITNESS)):
        dom = Domain(WITNESS_BLOCKS, "w")
        fs, *_ = _step_query(claim, wd, dom, "w", lambda st, b, c: st.situation(claim, b, c))
        r, solver = _check(_solver(rlimit, timeout_ms), *fs)
        queries += 1
        if r == z3.sat:
            made = True
            break
    situation = _SITUATION_TEXT[claim]
    if not made:
        why = f"the parametric model cannot make {situation}: that it is proved is no evidence"
        return ParametricAnswer(claim, "unknown", 0.0, why, text, queries=queries)
    return ParametricAnswer(claim, "proved", 0.0, "", text, situation, queries=queries)


# ----------------------------------------------------------------------------- counterexamples


def _decode(m: z3.ModelRef, s: PState, t: PState, step: PStep, b: Any) -> dict[str, Any]:
    """A counterexample to induction as data: the step and each block of the model's universe
    in both states (the blocks Z3 chose; every other block of any size is alike)."""
    universe = m.get_universe(_B) or []

    def val(x: Any) -> Any:
        v = m.eval(x, model_completion=True)
        if z3.is_true(v) or z3.is_false(v):
            return z3.is_true(v)
        if z3.is_int_value(v):
            return v.as_long()
        return str(v)

    def state(st: PState) -> dict[str, Any]:
        blocks = {}
        for i, blk in enumerate(universe):
            res = val(st.res[blk])
            row: dict[str, Any] = {"resident": res}
            cls = val(st.cls[blk])
            row["class"] = _CLS[cls].value if isinstance(cls, int) and 0 <= cls < len(_CLS) else cls
            for n in ("fly", "byp", "tmp", "idx", "hd", "la", "st"):
                row[n] = val(st.arr[n][blk])
            blocks[f"b{i}"] = row
        return {"quiescent": val(st.q), "blocks": blocks}

    kind = val(step.kind)
    name = {blk.sexpr(): f"b{i}" for i, blk in enumerate(universe)}
    return {
        "step": ACTIONS[kind] if isinstance(kind, int) and 0 <= kind < len(ACTIONS) else kind,
        "block": name.get(m.eval(step.v, model_completion=True).sexpr(), "?"),
        "at": name.get(m.eval(b, model_completion=True).sexpr(), "?"),
        "before": state(s),
        "after": state(t),
    }


def _cti_text(cti: Mapping[str, Any]) -> str:
    def show(st: Mapping[str, Any]) -> str:
        rows = [
            f"{n}:{r['class']}"
            + (f"(suspended at {r['st']})" if r["class"] == "suspended" else "")
            + ("" if r["resident"] else "(gone)")
            for n, r in st["blocks"].items()
            if r["resident"] or n in (cti["block"], cti["at"])
        ]
        return ("quiescent " if st["quiescent"] else "mid-op ") + (" ".join(rows) or "(empty)")

    return (
        f"{cti['step']}({cti['block']}) from [{show(cti['before'])}] "
        f"to [{show(cti['after'])}], broken at {cti['at']}"
    )
