"""Bounded model checking and k-induction with Z3 over the harness fragment.

The symbolic transition system is the executable model restricted to
:class:`~checkers.symbolic.fragment.Fragment` (``C`` contexts of one block each, one tier of ``K``
slots, at most ``E`` edits per context; actions ``infer``/``edit``/``close``/``pin``/``unpin``),
with the policy **inlined**: its declarative rank chooses the victim (the victim ranks no later than
any candidate), and its declared reclaim rule -- none, or every Dead block after every op
(:func:`profile`, checked against the code) -- frees blocks after each action. The symbolic
states and steps are in :mod:`checkers.symbolic.transition`.

* :func:`bmc` unrolls the transition relation one depth at a time into one incremental solver
  and asks, under an **assumption literal** for that depth (no push/pop), whether the invariant
  fails there; the first satisfiable depth is the shortest counterexample.
* :func:`induction` proves an invariant for all depths: ``k`` consecutive steps from *any*
  well-formed state where it holds (pairwise distinct states: simple paths) cannot break it at
  step ``k + 1``. Well-formedness is itself checked inductive first.
* :func:`prove` climbs the rungs per invariant: **violated** (with the decoded trace, which
  replays to the same violation in the executable model), **proved** by k-induction,
  **bounded** to depth k, or **unknown** (timeout, or a policy outside the fragment). A timeout
  is never reported as proved, and no rung above violated stands unless an exhaustive search of
  the executable model over the same fragment (depth 5 by default) agrees.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import attrs
import z3

from checkers.invariants.inductive import declared
from checkers.search.coverage import WITNESS_POLICIES, Witnesses
from checkers.symbolic.fragment import (
    FRAGMENT_INVARIANTS,
    Action,
    Fragment,
    Shortest,
    explore,
)
from checkers.symbolic.transition import PolicyProfile, State, Step, zombie
from checkers.symbolic.z3util import RLIMIT, TIMEOUT_MS, limited, rlimit_count, unknown_reason
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import (
    Policy,
    declared_rank,
    resolve_policy,
)

__all__ = [
    "Answer",
    "PolicyProfile",
    "bmc",
    "induction",
    "manifest",
    "profile",
    "prove",
    "rank_counterexample",
]


def profile(policy: str | Policy, fragment: Fragment | None = None) -> PolicyProfile:
    """Read the policy's fragment behaviour from its data: the rank
    (:func:`~kvmodel.policy.declared_rank`) and the reclaim rule
    (:func:`~kvmodel.policy.declared_reclaim`), and the classes it bypasses
    (:func:`~kvmodel.policy.declared_bypass`; the fragment has no Temporary block, so none may
    be bypassed). Each is what the engine runs: it sorts by the rank, ``BasePolicy.on_op``
    applies the rule, and a placement that disagrees with the declared bypass is refused. So
    inlining them is exact at every depth; an eviction order, an ``on_op`` or a bypass decided
    by code is outside the fragment. (``fragment`` is accepted for callers; the profile no
    longer depends on it.)"""
    d = declared(resolve_policy(policy))
    if d.unsupported is not None:
        return PolicyProfile(d.name, unsupported=d.unsupported)
    if d.bypass - {BlockClass.TEMPORARY}:  # the fragment writes no Temporary block
        return PolicyProfile(d.name, unsupported="it bypasses blocks that are not Temporary")
    return PolicyProfile(d.name, d.rank, reclaims_dead=d.reclaims_dead)


# ---------------------------------------------------------------- queries


#: invariants that no symbolic state can break, whatever the policy: their proof is the model's
#: construction, not the policy's merit (issue 13). The executable model's exhaustive search
#: (``cross_depth``) is what tests them; they are printed as structural, never as plain proofs.
STRUCTURAL_IN_FRAGMENT: dict[str, str] = {
    "pinned-never-evicted": (
        "the symbolic model never offers a Pinned block as a victim and reclaims only Dead "
        "blocks; only the executable search (to depth 5 here; to a fixpoint with --reach) "
        "tests the policy"
    ),
    "accounting": (
        "checked as used <= slots, which well-formedness already ensures; free + used = capacity "
        "and writes = alloc records are checked by kvmodel check and --reach, not here"
    ),
}


@attrs.frozen
class Answer:
    """One invariant's verdict from :func:`prove`: its ``rung`` (``violated``, ``proved``,
    ``bounded`` or ``unknown``), the depth it was reached at, the time, a violating ``trace``
    of fragment actions, and ``reason`` (why a rung is ``unknown``). :meth:`scope` says what a
    ``proved`` speaks for (this fragment, not every size)."""

    invariant: str
    rung: str  # violated | proved | bounded | unknown
    depth: int
    seconds: float
    trace: tuple[Action, ...] = ()
    reason: str = ""
    #: the solver's work for this answer: Z3 queries made, and resource units spent (Z3's
    #: deterministic step count, which ``rlimit`` bounds: the same on any machine)
    queries: int = 0
    rlimit_units: int = 0

    @property
    def method(self) -> str:
        """How the rung was reached, and the invariant a proof used."""
        if self.rung == "proved":
            return (
                f"{self.depth}-induction of the invariant itself, strengthened by the fragment's "
                "well-formedness (checked inductive first) and simple paths"
            )
        if self.rung in ("bounded", "violated"):
            return f"bounded model checking to depth {self.depth}"
        return "none"

    @property
    def structural(self) -> str | None:
        """Why a ``proved``/``bounded`` rung holds by the symbolic model's construction (so
        only the executable search, to ``cross_depth``, really tested it), or None."""
        if self.rung in ("proved", "bounded"):
            return STRUCTURAL_IN_FRAGMENT.get(self.invariant)
        return None

    def scope(self, f: Fragment) -> str:
        """What this answer speaks for, as the field states a verdict's scope (issue 62 item
        4): a k-induction proof holds at every depth but only of the fragment's sizes -- never
        "for all sizes", which no rung here proves."""
        sizes = (
            f"the fragment of {f.contexts} contexts of one block each, {f.slots} slots in one "
            f"tier, {f.edits} edit(s) each"
        )
        return {
            "proved": f"every depth of {sizes}; not for all sizes",
            "bounded": f"up to depth {self.depth} of {sizes}",
            "violated": f"a counterexample of depth {self.depth} in {sizes}",
            "unknown": "none",
        }[self.rung]

    def render(self) -> str:
        what = {
            "violated": f"violated at depth {self.depth}",
            "proved": f"proved by {self.depth}-induction",
            "bounded": f"holds to depth {self.depth} (bounded)",
            "unknown": f"unknown ({self.reason})",
        }[self.rung]
        line = f"{self.invariant:<38} {what:<34} {self.seconds:7.2f} s"
        if self.structural:
            line += f"\n    structural: {self.structural}"
        if self.trace:
            line += "\n    " + " ; ".join(str(a) for a in self.trace)
        return line


class Unrolled:
    """The transition system unrolled once per policy and fragment, shared by every invariant's
    queries: its states and steps are the same Z3 terms whichever invariant is checked, so they
    are built once (building them, every pair of blocks' rank order among them, was a third of
    a ``prove``'s time when each invariant rebuilt them)."""

    def __init__(self, prof: PolicyProfile, f: Fragment) -> None:
        self.prof, self.f = prof, f
        self._states: dict[str, list[State]] = {}
        self._steps: dict[tuple[str, str], list[Step]] = {}

    def states(self, tag: str, n: int) -> list[State]:
        """States ``0 .. n-1`` named by ``tag``."""
        got = self._states.setdefault(tag, [])
        while len(got) < n:
            got.append(State(self.f, len(got), tag))
        return got[:n]

    def steps(self, tag: str, step_tag: str, n: int) -> list[Step]:
        """Steps ``1 .. n`` between the states named by ``tag``, named by ``step_tag``."""
        states = self.states(tag, n + 1)
        got = self._steps.setdefault((tag, step_tag), [])
        while len(got) < n:
            i = len(got) + 1
            got.append(Step(self.f, states[i - 1], states[i], i, step_tag, self.prof))
        return got[:n]


def bmc(
    prof: PolicyProfile,
    f: Fragment,
    invariant: str,
    depth: int,
    *,
    timeout_ms: int = TIMEOUT_MS,
    rlimit: int = RLIMIT,
    unrolled: Unrolled | None = None,
) -> tuple[str, int, tuple[Action, ...], str]:
    """("violated", d, actions, "") at the shortest failing depth d, ("bounded", depth, (), "")
    when none to ``depth``, or ("unknown", d, (), why) when depth d ran out of its budget
    (``why``: "resource limit", or "timeout" -- the wall-clock safety net). ``unrolled``: the
    system's states and steps, shared with other invariants' queries."""
    u = unrolled or Unrolled(prof, f)
    solver = limited(z3.Solver(), rlimit=rlimit, timeout_ms=timeout_ms)
    solver.add(u.states("s", 1)[0].initial())
    steps: list[Step] = []
    for d in range(1, depth + 1):
        step = u.steps("s", "a", d)[d - 1]
        steps.append(step)
        solver.add(step.cons)
        lit = z3.Bool(f"check{d}")
        solver.add(z3.Implies(lit, step.violated(invariant)))
        r = solver.check(lit)
        if r == z3.sat:
            m = solver.model()
            return "violated", d, tuple(s.action(m) for s in steps), ""
        if r == z3.unknown:
            return "unknown", d, (), unknown_reason(solver)
        solver.add(z3.Not(step.violated(invariant)))  # known to hold here: helps deeper depths
    return "bounded", depth, (), ""


def induction(
    prof: PolicyProfile,
    f: Fragment,
    invariant: str,
    k: int,
    *,
    timeout_ms: int = TIMEOUT_MS,
    rlimit: int = RLIMIT,
    unrolled: Unrolled | None = None,
) -> str:
    """ "proved" if the invariant is k-inductive (with simple paths), "no" if not, or "unknown".
    ``unrolled``: the system's states and steps, shared with other invariants' queries."""
    u = unrolled or Unrolled(prof, f)
    solver = limited(z3.Solver(), rlimit=rlimit, timeout_ms=timeout_ms)
    states = u.states("i", k + 2)
    for st in states:
        solver.add(st.wellformed())
    for i in range(1, k + 2):
        step = u.steps("i", "b", i)[i - 1]
        solver.add(step.cons)
        solver.add(step.violated(invariant) if i == k + 1 else z3.Not(step.violated(invariant)))
        if invariant == "no-zombie-kv" and i == 1:
            solver.add(z3.Not(zombie(states[0])))  # a state invariant holds in state 0 too
    for i in range(len(states)):
        for j in range(i + 1, len(states)):
            solver.add(
                z3.Or(
                    *(x != y for x, y in zip(states[i].vector(), states[j].vector(), strict=True))
                )
            )
    r = solver.check()
    if r == z3.unsat:
        return "proved"
    return "no" if r == z3.sat else "unknown"


def _wellformed_is_inductive(
    prof: PolicyProfile, f: Fragment, timeout_ms: int, rlimit: int
) -> bool:
    solver = limited(z3.Solver(), rlimit=rlimit, timeout_ms=timeout_ms)
    p, s = State(f, 0, "w"), State(f, 1, "w")
    solver.add(p.wellformed(), Step(f, p, s, 1, "w", prof).cons, z3.Not(s.wellformed()))
    init = State(f, 0, "z")
    ok_init = z3.Solver()
    ok_init.add(init.initial(), z3.Not(init.wellformed()))
    return bool(solver.check() == z3.unsat and ok_init.check() == z3.unsat)


def prove(
    policy: str | Policy,
    invariants: Iterable[str] = FRAGMENT_INVARIANTS,
    *,
    fragment: Fragment | None = None,
    depth: int = 8,
    max_k: int = 3,
    timeout_s: float = TIMEOUT_MS / 1000,
    cross_depth: int = 5,
    rlimit: int = RLIMIT,
) -> list[Answer]:
    """Per invariant: the highest rung reached (see the module docstring), corroborated by the
    exhaustive search of the executable model to ``cross_depth`` (:func:`_corroborate`). Each
    Z3 query gets ``rlimit`` resource units (deterministic: the same rungs on any machine) and
    ``timeout_s`` of wall time as a safety net (checkers/symbolic/z3util.py)."""
    f = fragment or Fragment()
    symbolic = _prove_symbolic(policy, f, invariants, depth, max_k, timeout_s, rlimit)
    scoped = _rank_scope(policy, symbolic, int(timeout_s * 1000), rlimit)
    return _corroborate(policy, f, scoped, cross_depth)


def _rank_scope(
    policy: str | Policy, answers: list[Answer], timeout_ms: int, rlimit: int
) -> list[Answer]:
    """An eviction-order invariant holds in the fragment only over the classes the fragment
    makes evictable (Dead, Expired, Suspended: it has no Temporary block and no evictable Active
    one). So its rung above violated stands only if the rank keeps the order for *all* feature
    values (:mod:`checkers.symbolic.z3rank`); where the rank breaks it for a pair of classes the
    fragment never puts side by side, holding here is no evidence, and the answer is
    ``unknown``, naming the pairs (spec/invariants.md §Proofs)."""
    from checkers.symbolic.z3rank import PROPERTY_OF_CLAIM, order_breaks

    rank = declared_rank(resolve_policy(policy))
    out = []
    for a in answers:
        prop = PROPERTY_OF_CLAIM.get(a.invariant)
        if rank is None or prop is None or a.rung not in ("proved", "bounded"):
            out.append(a)
            continue
        t0 = time.perf_counter()
        pairs = order_breaks(rank, prop, timeout_ms=timeout_ms, rlimit=rlimit)
        dt = time.perf_counter() - t0
        if not pairs:
            out.append(attrs.evolve(a, seconds=a.seconds + dt))
            continue
        shown = "; ".join(f"{first.value} before {second.value}" for first, second in pairs)
        reason = (
            f"{a.rung} in the fragment, but the rank breaks this order for some feature values "
            f"(evicting {shown}), classes the fragment never makes evictable side by side; "
            "kvmodel check tests it"
        )
        out.append(Answer(a.invariant, "unknown", 0, a.seconds + dt, reason=reason))
    return out


def _corroborate(
    policy: str | Policy, f: Fragment, answers: list[Answer], depth: int
) -> list[Answer]:
    """No rung above ``violated`` stands against the executable model. The symbolic model
    inlines what :func:`profile` read off the policy by probing to depth 3; a policy whose code
    does something else later (an idle-timeout reclaim), or whose decisions the engine refuses
    (a double free), falls outside it. So the executable model is searched exhaustively to
    ``depth``. A violation it finds is reported as such (its path replays). If it finds one the
    symbolic model missed, or sees a refused decision or a crash, the symbolic model does not
    describe this policy: every other rung above violated becomes ``unknown`` -- never
    ``proved``."""
    offline = callable(getattr(resolve_policy(policy), "prepare", None))
    if depth <= 0 or offline or all(a.rung == "violated" for a in answers):
        # (an offline policy plans from a whole trace: the step-wise search cannot run it)
        return answers
    t0 = time.perf_counter()
    names = [a.invariant for a in answers]
    found = explore(policy, f, depth, names)
    witnesses = _fragment_witnesses(found, f, depth, names)
    dt = time.perf_counter() - t0
    why = ""
    if found.stopped is not None:
        why = f"the engine refused a decision of the policy at depth {found.stopped[0]}"
    if found.capped is not None:
        # (what it found before is still reported; what it did not reach is not corroborated)
        why = why or f"the executable model's search stopped {found.capped}"
    for a in answers:
        hit = found.failing.get(a.invariant)
        if hit is not None and (a.rung != "violated" or hit[0] < a.depth):
            why = why or f"the executable model breaks {a.invariant} at depth {hit[0]}"
    out = []
    for a in answers:
        hit = found.failing.get(a.invariant)
        if hit is not None and (a.rung != "violated" or hit[0] < a.depth):
            reason = "found by the executable model's exhaustive search, not by the symbolic one"
            out.append(Answer(a.invariant, "violated", hit[0], a.seconds + dt, hit[1], reason))
        elif a.rung in ("proved", "bounded") and why:
            reason = f"outside the fragment: {why}"
            out.append(Answer(a.invariant, "unknown", 0, a.seconds + dt, reason=reason))
        elif a.rung in ("proved", "bounded") and (lack := witnesses.missing(a.invariant)):
            reason = (
                f"the fragment cannot make {lack} (its executable model, searched to depth "
                f"{depth} under this policy and {', '.join(WITNESS_POLICIES)}, never did): "
                f"that it {(a.rung == 'proved' and 'is proved') or 'holds'} there is no evidence"
            )
            out.append(Answer(a.invariant, "unknown", 0, a.seconds + dt, reason=reason))
        else:
            out.append(attrs.evolve(a, seconds=a.seconds + dt))
    return out


_FRAGMENT_WITNESSES: dict[tuple[Fragment, int, tuple[str, ...], str], Witnesses] = {}


def _fragment_witnesses(found: Shortest, f: Fragment, depth: int, names: list[str]) -> Witnesses:
    """What the fragment can make (spec invariants.md §Proofs, vacuity): the situations the
    policy's own search saw, joined with the witness policies' searches of the same fragment
    (each searched once per fragment, depth and invariants, kept for the process)."""
    assert found.witnesses is not None
    out = Witnesses(tuple(names), set(found.witnesses.seen))
    for p in WITNESS_POLICIES:
        if out.missing_any() is None:
            break
        key = (f, depth, tuple(names), p)
        if key not in _FRAGMENT_WITNESSES:
            w = explore(p, f, depth, names).witnesses
            assert w is not None
            _FRAGMENT_WITNESSES[key] = w
        out.seen |= _FRAGMENT_WITNESSES[key].seen
    return out


def _prove_symbolic(
    policy: str | Policy,
    f: Fragment,
    invariants: Iterable[str],
    depth: int,
    max_k: int,
    timeout_s: float,
    rlimit: int,
) -> list[Answer]:
    prof = profile(policy, f)
    ms = int(timeout_s * 1000)
    names = list(invariants)
    if prof.unsupported is not None:
        return [
            Answer(n, "unknown", 0, 0.0, reason=f"outside the fragment: {prof.unsupported}")
            for n in names
        ]
    wf_ok = _wellformed_is_inductive(prof, f, ms, rlimit)
    unrolled = Unrolled(prof, f)
    out = []
    for name in names:
        units = rlimit_count()
        answer, queries = _prove_one(prof, f, name, depth, max_k, ms, rlimit, wf_ok, unrolled)
        out.append(attrs.evolve(answer, queries=queries, rlimit_units=rlimit_count() - units))
    return out


def _prove_one(
    prof: PolicyProfile,
    f: Fragment,
    name: str,
    depth: int,
    max_k: int,
    ms: int,
    rlimit: int,
    wf_ok: bool,
    unrolled: Unrolled,
) -> tuple[Answer, int]:
    """One invariant's rung, and the Z3 queries it took."""
    t0 = time.perf_counter()
    rung, d, trace, why = bmc(prof, f, name, depth, timeout_ms=ms, rlimit=rlimit, unrolled=unrolled)
    queries = d  # one BMC query per depth reached
    if rung == "violated":
        return Answer(name, "violated", d, time.perf_counter() - t0, trace), queries
    if rung == "unknown":
        dt = time.perf_counter() - t0
        return Answer(name, "unknown", d, dt, reason=f"{why} at depth {d}"), queries
    proved_at = 0
    if wf_ok:
        for k in range(1, min(max_k, depth) + 1):
            queries += 1
            r = induction(prof, f, name, k, timeout_ms=ms, rlimit=rlimit, unrolled=unrolled)
            if r == "proved":
                proved_at = k
                break
    dt = time.perf_counter() - t0
    if proved_at:
        return Answer(name, "proved", proved_at, dt), queries
    return Answer(name, "bounded", depth, dt), queries


def rank_counterexample(
    policy: str | Policy, prop: str, *, fragment: Fragment | None = None, depth: int = 8
) -> tuple[str, tuple[Action, ...]] | None:
    """A violated rank-order property (checkers.symbolic.z3rank) made concrete: the invariant whose
    eviction order it is, and the shortest fragment trace on which the executable model makes
    that wrong eviction -- or None if the fragment cannot show it."""
    from checkers.symbolic.z3rank import PROPERTY_OF_CLAIM

    f = fragment or Fragment()
    invariant = next((inv for inv, p in PROPERTY_OF_CLAIM.items() if p == prop), None)
    prof = profile(policy, f)
    if invariant is None or prof.unsupported is not None:
        return None
    rung, _, trace, _ = bmc(prof, f, invariant, depth)
    return (invariant, trace) if rung == "violated" else None


def manifest(policies: Iterable[str], depth: int = 6) -> str:
    """The expected-rung manifest (checkers/symbolic/expected_proofs.toml) for ``policies``."""
    out = [
        "# Expected rungs of `kvmodel prove` over the default fragment (3 contexts, 2 slots,",
        "# 1 edit; BMC to depth 6, then k-induction up to k = 3), as `rung:depth` (depth = the",
        "# shortest failing depth, or the induction k). Rungs hold *in the fragment*: a mutant",
        "# whose bug needs forks, temporaries or longer chains is proved here and caught by",
        "# `kvmodel check`; an eviction order the rank breaks between classes the fragment",
        "# never makes evictable side by side is `unknown`. Regenerate:",
        "#   python -m checkers.symbolic.bmc > checkers/symbolic/expected_proofs.toml",
        "",
    ]
    for p in policies:
        out.append(f'["{p}"]')
        for a in prove(p, depth=depth):
            val = a.rung if a.rung == "unknown" else f"{a.rung}:{a.depth}"
            out.append(f'"{a.invariant}" = "{val}"')
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    from checkers.search.mutants import MUTANTS
    from kvmodel.policy import registered_policies

    print(manifest([*registered_policies(), *MUTANTS]), end="")
