"""The parametric model of :mod:`checkers.symbolic.parametric`: blocks an uninterpreted Z3 sort,
one state's attributes arrays over it (:class:`PState`), one micro-step of an op with the
policy's declarations inlined (:class:`PStep`), and the two readings of every formula over the
sort (:class:`Domain`: quantified, or ground over a few named blocks). The claims each step can
break and the situations each can make are read from their one definitions (``BLOCK``,
``ORDER``); the proofs over this model are in :mod:`checkers.symbolic.parametric`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import z3

from checkers.invariants import BLOCK, ORDER
from checkers.invariants.inductive import (
    Declared,
    StateTerms,
    prefix_monotone,
    wellformed,
)
from checkers.symbolic.transition import SymBlockTerms
from checkers.symbolic.z3rank import SymBlock, before
from checkers.symbolic.z3util import Z3_LOGIC
from kvmodel.lifecycle import BlockClass

__all__ = ["ACTIONS", "ALL", "BLOCK_SORT", "Domain", "PState", "PStep", "orphan"]

ACTIONS = ("begin", "touch", "evict", "alloc", "hit", "drop", "end")

_CLS = list(BlockClass)
_D, _P, _T = BlockClass.DEAD, BlockClass.PINNED, BlockClass.TEMPORARY

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
            return z3.And(t.q, orphan(t, b, self.w2))
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


def orphan(st: PState, c: Any, p: Any) -> Any:
    """``c`` is resident in ``st`` and its parent ``p`` is not (prefix-closed-residency's
    formula: a full block past the root whose parent key no resident block holds)."""
    return z3.And(st.res[c], st.par(c, p), z3.Not(st.res[p]))


#: the sort of blocks
BLOCK_SORT = _B
