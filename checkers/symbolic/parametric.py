"""Parametric proofs: a declarative policy's claims for any number of contexts, blocks, tiers
and ops (spec/invariants.md §Parametric proofs). The model is in
:mod:`checkers.symbolic.parametric_model`, the run against the executable model in
:mod:`checkers.symbolic.crosscheck`; the proofs, their verdicts and counterexamples here.

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

import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs
import z3

from checkers.invariants.inductive import (
    AXIOMS,
    INDUCTIVE,
    Declared,
    StateTerms,
    declared,
    inductive_applies,
    wellformed,
)
from checkers.symbolic.crosscheck import CROSS_SEEDS, CROSS_TIERS, CrossCheck, cross_validate
from checkers.symbolic.parametric_model import (
    ACTIONS,
    ALL,
    BLOCK_SORT,
    Domain,
    PState,
    PStep,
)
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

_CLASSES = list(BlockClass)

SCOPE = "for all sizes: any number of contexts, blocks per context, tiers and ops"

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
CTIBLOCK_SORTLOCKS = (1, 2, 3)
WITNESSBLOCK_SORTLOCKS = 3


def _step_query(
    claim: str, d: Declared, dom: Domain, tag: str, goal: Callable[[PStep, Any, Any], Any]
) -> tuple[list[Any], PState, PState, PStep, Any]:
    """The formulas of "one step from a well-formed state keeping the invariant, and ``goal``"
    over ``dom``, with the states, the step and the block ``goal`` names."""
    s, t = PState(f"{tag}s", dom), PState(f"{tag}t", dom)
    step = PStep(s, t, tag, d)
    if dom.n is None:
        b, c = z3.Const(f"{tag}.at", BLOCK_SORT), z3.Const(f"{tag}.other", BLOCK_SORT)
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
    for n in CTIBLOCK_SORTLOCKS:
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
        why += f"induction of up to {CTIBLOCK_SORTLOCKS[-1]} blocks)"
        return ParametricAnswer(claim, "unknown", 0.0, why, text, queries=queries)
    # no vacuous proof: some step of the model makes the situation the claim constrains, under
    # this policy's declarations or a witness policy's (a model of WITNESSBLOCK_SORTLOCKS blocks)
    made = False
    for wd in (d, *(declared(w) for w in _WITNESS)):
        dom = Domain(WITNESSBLOCK_SORTLOCKS, "w")
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
    universe = m.get_universe(BLOCK_SORT) or []

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
            row["class"] = (
                _CLASSES[cls].value if isinstance(cls, int) and 0 <= cls < len(_CLASSES) else cls
            )
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
