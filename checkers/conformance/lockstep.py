"""Lockstep differential testing: drive an implementation side by side with the reference.

An implementation provides one method, ``apply(index, op) -> records`` (:class:`Implementation`):
apply trace op ``index`` and return the observation records it produced for that op (spec T4,
the minimum in spec/invariants.md §Oracle). :func:`run_lockstep` feeds every op to it and to the
incremental oracle (:class:`~checkers.conformance.oracle.Conformance`, nondeterminism-aware) and
stops at the first divergence. :func:`differential` searches Hypothesis-generated agent traces for
one that diverges and lets Hypothesis shrink it by re-running both sides, so the trace it returns
is a real, minimal run of the implementation.

    from checkers.conformance.lockstep import differential
    result = differential(MyCache, "vllm-prefix", config)
    assert result.ok, result.render()

:class:`EngineImplementation` wraps the reference engine under any policy as an implementation
(the reference against itself, or a mutant, in the tests). The pytest plugin
(:mod:`checkers.conformance.pytest_plugin`) exposes :func:`differential` as the
``kvmodel_lockstep`` fixture.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
from hypothesis import HealthCheck, find, settings
from hypothesis.errors import NoSuchExample
from hypothesis.strategies import SearchStrategy

from checkers.conformance.adapters import check_declared, refuse_undeclared, within
from checkers.conformance.oracle import Conformance, OracleVerdict
from checkers.invariants.deadline import HUNG, OpHung, op_deadline
from checkers.invariants.nversion import contract_refusal
from checkers.invariants.replay import RefusedTraceError, engine_for
from checkers.search.pool import fixed_constants
from checkers.search.strategies import agent_traces
from kvmodel.config import EngineConfig
from kvmodel.errors import is_interrupt
from kvmodel.io.observations import observation_to_json
from kvmodel.io.trace import Op, Trace, dumps_op
from kvmodel.policy import Policy, resolve_policy

__all__ = [
    "EngineImplementation",
    "Implementation",
    "LockstepResult",
    "differential",
    "implemented",
    "run_lockstep",
]


class Implementation(Protocol):
    """What an implementation under test provides."""

    def apply(self, index: int, op: Op) -> Sequence[Mapping[str, Any]]:
        """Apply trace op ``index``; return its observation records (``op`` may be omitted)."""
        ...


#: builds a fresh implementation for one run, from the engine configuration it must honour
Factory = Callable[[EngineConfig], Implementation]


class EngineImplementation:
    """The reference engine under ``policy``, as an :class:`Implementation`."""

    def __init__(self, policy: str | Policy, config: EngineConfig) -> None:
        self.engine = engine_for(resolve_policy(policy), config)

    def apply(self, index: int, op: Op) -> list[dict[str, Any]]:
        seen = len(self.engine.log)
        self.engine.apply(op)
        return [observation_to_json(o) for o in self.engine.log.since(seen)]


#: what a lockstep search counts of the implementation's records (its coverage)
COUNTED = ("evict", "reject", "hit", "alloc", "free", "bypass", "copy", "load", "drop-copy")
#: the movement records among them, shown only for an implementation that moves KV
MOVES = ("copy", "load", "drop-copy")


@attrs.frozen
class LockstepResult:
    verdict: OracleVerdict
    #: the (shrunk) trace the implementation diverged on; None when it never did
    trace: Trace | None = None
    #: traces tried by the search (1 for a single run)
    examples: int = 1
    #: what the implementation did over every trace tried: ops, and records by kind
    #: (``evict``, ``reject``, ...): a search that never evicted has not tested eviction
    coverage: Mapping[str, int] = attrs.field(factory=dict)
    #: the divergent trace is 1-minimal (no single op can be removed and still diverge)
    one_minimal: bool = False

    @property
    def ok(self) -> bool:
        return self.verdict.verdict == "OK"

    def coverage_line(self) -> str:
        c = self.coverage
        moved = any(c.get(k) for k in MOVES)
        kinds = [k for k in COUNTED if moved or k not in MOVES]
        parts = [f"{c.get('ops', 0)} ops"] + [f"{k} {c.get(k, 0)}" for k in kinds]
        line = "coverage: " + ", ".join(parts)
        if not c.get("evict") and not c.get("reject"):
            line += " -- warning: no eviction or rejection, eviction order untested"
        return line

    def render(self) -> str:
        if self.trace is None and self.verdict.verdict != "OK":
            return self.verdict.render()
        if self.trace is None:
            return f"OK: no divergence in {self.examples} trace(s)\n{self.coverage_line()}"
        lines = [f"diverged on a trace of {len(self.trace.ops)} ops:"]
        lines += [f"  {i:>3} {dumps_op(op)}" for i, op in enumerate(self.trace.ops)]
        return "\n".join([*lines, self.verdict.render(), self.coverage_line()])


def run_lockstep(
    trace: Trace,
    make_impl: Factory,
    policy: str | Policy,
    config: EngineConfig,
    coverage: Counter[str] | None = None,
    *,
    allow: Sequence[str] = (),
) -> OracleVerdict:
    """One trace, op by op; the first divergence, or OK. An implementation that raises on a
    valid op has diverged (ILLEGAL, "crashed"); records naming another op are ILLEGAL too; one
    that cannot be built for ``config`` gets UNKNOWN (nothing was compared). ``coverage`` (if
    given) counts the ops applied and the implementation's records by kind; ``allow``: the
    oracle's opt-in admissible variants."""
    conf = Conformance(policy, config, allow=allow)
    try:
        impl = make_impl(config)
    except BaseException as e:  # e.g. a one-tier engine given a two-tier config
        if is_interrupt(e):
            raise
        return OracleVerdict("UNKNOWN", None, f"the implementation could not be built: {e!r}")
    declared = implemented(impl)
    if declared is not None:
        # an undeclared op is never fed to it, never skipped: what followed would be invented
        refuse_undeclared(trace, declared)
    for i, op in enumerate(trace.ops):
        try:
            with op_deadline(impl):
                records = [dict(r) for r in impl.apply(i, op)]
        except OpHung as e:  # a hang is a finding too, under the checkers' op deadline
            return OracleVerdict("ILLEGAL", i, f"the implementation {HUNG} {e.seconds:g} s")
        except BaseException as e:  # the implementation's crash (SystemExit too) is a finding
            if is_interrupt(e):
                raise
            return OracleVerdict("ILLEGAL", i, f"the implementation crashed: {e!r}")
        if coverage is not None:
            coverage["ops"] += 1
            coverage.update(str(r.get("kind")) for r in records if r.get("kind") in COUNTED)
        stray = [r for r in records if r.setdefault("op", i) != i]
        if stray:
            return OracleVerdict("ILLEGAL", i, f"a record names op {stray[0]['op']}, not {i}")
        if any(not isinstance(r.get("kind"), str) for r in records):
            return OracleVerdict("ILLEGAL", i, "a record without a 'kind'")
        verdict = conf.step(i, op, records)
        if verdict is not None:
            return verdict
    return OracleVerdict("OK")


def implemented(impl: object) -> frozenset[str] | None:
    """What an implementation declares it implements (its ``implements``: op names and trace
    features, :data:`~checkers.conformance.adapters.CAPABILITIES`); None when it declares
    nothing, i.e. everything (the reference engine)."""
    have = getattr(impl, "implements", None)
    return None if have is None else check_declared(have, type(impl).__name__)


def _within(
    strategy: SearchStrategy[Trace], declared: frozenset[str] | None
) -> SearchStrategy[Trace]:
    return strategy if declared is None else strategy.map(lambda t: within(t, declared))


def _refusal(trace: Trace) -> str | None:
    """Why ``trace`` is not valid input (the contract model's judgement,
    :func:`~checkers.invariants.nversion.contract_refusal`); None if it is."""
    why = contract_refusal(trace.ops)
    return None if why is None else f"op {why[0]} ({type(trace.ops[why[0]]).__name__}): {why[1]}"


def differential(
    make_impl: Factory,
    policy: str | Policy,
    config: EngineConfig,
    *,
    max_examples: int = 100,
    max_actions: int = 30,
    traces: SearchStrategy[Trace] | None = None,
    shrink_budget: int = 1000,
    allow: Sequence[str] = (),
) -> LockstepResult:
    """Search traces for a divergence and shrink it: Hypothesis first, then delta debugging
    (a random walk shrinks only that way). The default traces are agent traces
    (:func:`~checkers.search.strategies.agent_traces`) and swarm random walks
    (:func:`~checkers.search.walk.random_walks`: every op kind, long prompts, sharing, switched-off
    ops), half the examples each, so that a small engine is under pressure. Deterministic
    (derandomized search). The result counts what the implementation did (evictions,
    rejections, ...) over every trace tried."""
    from checkers.search.shrink import op_groups, shrink
    from checkers.search.walk import random_walks

    tried = 0
    coverage: Counter[str] = Counter()
    try:
        declared = implemented(make_impl(config))
    except BaseException as e:  # no trace can say anything: the verdict, not a crash of the search
        if is_interrupt(e):
            raise
        why = f"the implementation could not be built: {e!r}"
        return LockstepResult(OracleVerdict("UNKNOWN", None, why), None, 0, {})

    def run(trace: Trace, cov: Counter[str] | None = None) -> OracleVerdict:
        return run_lockstep(trace, make_impl, policy, config, cov, allow=allow)

    def diverges(trace: Trace) -> bool:
        nonlocal tried
        tried += 1
        why = _refusal(trace)
        if why is not None:  # not the implementation's divergence: the generator's bug
            raise RefusedTraceError(f"a generated trace is not valid input: {why}")
        return run(trace, coverage).verdict != "OK"

    # the default: walks for half the examples, then agent traces for the rest -- two searches,
    # not one_of(agents, walks), which Hypothesis resolved to agent traces for 83 of 100
    # (the default traces are generated within what the implementation declares it
    # implements; given traces must already be: run_lockstep refuses an undeclared op)
    searches: list[tuple[SearchStrategy[Trace], int]] = (
        [(traces, max_examples)]
        if traces is not None
        else [
            (_within(random_walks(4 * max_actions), declared), (max_examples + 1) // 2),
            (_within(agent_traces(max_actions), declared), max_examples // 2),
        ]
    )
    found: Trace | None = None
    for strategy, n in searches:
        if n <= 0:
            continue
        opts = settings(
            max_examples=n,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        try:
            with fixed_constants():
                found = find(strategy, diverges, settings=opts)
            break
        except NoSuchExample:
            continue
    if found is None:
        return LockstepResult(OracleVerdict("OK"), None, tried, dict(coverage))
    verdict = run(found)
    header = found.header
    if verdict.op is not None:  # the ops after the divergence play no part in it
        found = Trace(header, found.ops[: verdict.op + 1])

    def still(ops: Sequence[Op]) -> bool:
        cand = Trace(header, tuple(ops))
        # a shortened trace must still be valid input, or the implementation's refusal of it
        # would pass for a divergence
        return _refusal(cand) is None and run(cand).verdict != "OK"

    small, minimal = shrink(found.ops, still, budget=shrink_budget, groups=op_groups)
    found = Trace(header, tuple(small))
    verdict = run(found)
    return LockstepResult(verdict, found, tried, dict(coverage), minimal)
