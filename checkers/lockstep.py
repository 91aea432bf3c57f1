"""Lockstep differential testing: drive an implementation side by side with the reference.

An implementation provides one method, ``apply(index, op) -> records`` (:class:`Implementation`):
apply trace op ``index`` and return the observation records it produced for that op (spec T4,
the minimum in spec/invariants.md §Oracle). :func:`run_lockstep` feeds every op to it and to the
incremental oracle (:class:`~checkers.oracle.Conformance`, nondeterminism-aware) and stops at the
first divergence. :func:`differential` searches Hypothesis-generated agent traces for one that
diverges and lets Hypothesis shrink it by re-running both sides, so the trace it returns is a
real, minimal run of the implementation.

    from checkers.lockstep import differential
    result = differential(MyCache, "vllm-prefix", config)
    assert result.ok, result.render()

:class:`EngineImplementation` wraps the reference engine under any policy as an implementation
(the reference against itself, or a mutant, in the tests). The pytest plugin
(:mod:`checkers.pytest_plugin`) exposes :func:`differential` as the ``kvmodel_lockstep`` fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
from hypothesis import HealthCheck, find, settings
from hypothesis.errors import NoSuchExample
from hypothesis.strategies import SearchStrategy

from checkers.harness import engine_for
from checkers.oracle import Conformance, OracleVerdict
from checkers.strategies import agent_traces
from kvmodel.config import EngineConfig
from kvmodel.observations import observation_to_json
from kvmodel.policy import Policy, resolve_policy
from kvmodel.trace import Op, Trace, dumps_op

__all__ = [
    "EngineImplementation",
    "Implementation",
    "LockstepResult",
    "differential",
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


@attrs.frozen
class LockstepResult:
    verdict: OracleVerdict
    #: the (shrunk) trace the implementation diverged on; None when it never did
    trace: Trace | None = None
    #: traces tried by the search (1 for a single run)
    examples: int = 1

    @property
    def ok(self) -> bool:
        return self.verdict.verdict == "OK"

    def render(self) -> str:
        if self.trace is None:
            return f"OK: no divergence in {self.examples} trace(s)"
        lines = [f"diverged on a trace of {len(self.trace.ops)} ops:"]
        lines += [f"  {i:>3} {dumps_op(op)}" for i, op in enumerate(self.trace.ops)]
        return "\n".join([*lines, self.verdict.render()])


def run_lockstep(
    trace: Trace, make_impl: Factory, policy: str | Policy, config: EngineConfig
) -> OracleVerdict:
    """One trace, op by op; the first divergence, or OK. An implementation that raises on a
    valid op has diverged (ILLEGAL, "crashed"); records naming another op are ILLEGAL too."""
    conf = Conformance(policy, config)
    impl = make_impl(config)
    for i, op in enumerate(trace.ops):
        try:
            records = [dict(r) for r in impl.apply(i, op)]
        except Exception as e:  # the implementation's crash is a finding
            return OracleVerdict("ILLEGAL", i, f"the implementation crashed: {e!r}")
        stray = [r for r in records if r.setdefault("op", i) != i]
        if stray:
            return OracleVerdict("ILLEGAL", i, f"a record names op {stray[0]['op']}, not {i}")
        if any(not isinstance(r.get("kind"), str) for r in records):
            return OracleVerdict("ILLEGAL", i, "a record without a 'kind'")
        verdict = conf.step(i, op, records)
        if verdict is not None:
            return verdict
    return OracleVerdict("OK")


def differential(
    make_impl: Factory,
    policy: str | Policy,
    config: EngineConfig,
    *,
    max_examples: int = 100,
    max_actions: int = 30,
    traces: SearchStrategy[Trace] | None = None,
) -> LockstepResult:
    """Search traces (default: :func:`~checkers.strategies.agent_traces`) for a divergence and
    shrink it. Deterministic (derandomized search)."""
    tried = 0

    def diverges(trace: Trace) -> bool:
        nonlocal tried
        tried += 1
        return run_lockstep(trace, make_impl, policy, config).verdict != "OK"

    opts = settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    try:
        strategy = traces if traces is not None else agent_traces(max_actions)
        found = find(strategy, diverges, settings=opts)
    except NoSuchExample:
        return LockstepResult(OracleVerdict("OK"), None, tried)
    verdict = run_lockstep(found, make_impl, policy, config)
    if verdict.op is not None:  # the ops after the divergence play no part in it
        found = Trace(found.header, found.ops[: verdict.op + 1])
    return LockstepResult(verdict, found, tried)
