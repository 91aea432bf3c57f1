"""Checked replay: apply ops to an engine under the invariant :class:`Monitor` (the one monitor
replay, the searches and the oracle share), and the nondeterminism check of two replays."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from checkers.invariants.monitor import Monitor
from checkers.invariants.structural import Violation
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import TraceError
from kvmodel.io.observations import Observation, observation_to_json
from kvmodel.io.trace import Op, Trace, TraceHeader
from kvmodel.policy import Policy, resolve_policy

__all__ = ["CheckRun", "RefusedTraceError", "check_ops", "engine_for", "nondeterminism"]


def engine_for(policy: Policy, config: EngineConfig) -> Engine:
    """The engine a policy runs on. A policy may bring an ``engine_class`` (the mutant zoo plants
    engine bugs this way); everything else runs on the reference :class:`Engine`."""
    cls: type[Engine] = getattr(policy, "engine_class", Engine)
    return cls(config, policy)


class RefusedTraceError(RuntimeError):
    """A generated trace, valid input by construction, was refused by the engine: a bug in the
    generator or in the engine under test. Raised out of the search (not an AssertionError,
    which a Hypothesis search reads as a find): a search that checked the trace only up to the
    refused op would pass in silence."""


@attrs.frozen
class CheckRun:
    """The outcome of checking one op sequence."""

    violations: tuple[Violation, ...]
    engine: Engine
    applied: int  # ops applied before the run stopped
    trace_error: TraceError | None = None
    #: the ops after which the contract model compared the engine's whole state (every op's
    #: figures and message states are compared; contract.whole_state_due picks these)
    compared_whole: int = 0

    def first(self, invariant: str) -> Violation | None:
        return next((v for v in self.violations if v.invariant == invariant), None)

    def require_accepted(self, ops: Sequence[Op], what: str) -> None:
        """For a run of generated ``ops`` (``what`` names them): raise :class:`RefusedTraceError` if
        the engine refused one as bad input."""
        if self.trace_error is not None:
            op = ops[self.applied] if self.applied < len(ops) else None
            name = type(op).__name__ if op is not None else "the trace"
            raise RefusedTraceError(
                f"{what}: op {self.applied} ({name}) was refused as bad input: {self.trace_error}"
            )


def check_ops(
    ops: Sequence[Op],
    policy: str | Policy,
    config: EngineConfig,
    invariants: Iterable[str],
    *,
    stop_at: str | None = None,
    endurance_years: float = 5.0,
    contract: bool = True,
    tick: Callable[[], None] | None = None,
    stream: Callable[[Sequence[Observation]], None] | None = None,
) -> CheckRun:
    """Apply ``ops`` with a :class:`Monitor`; stop at the first violation of ``stop_at`` (if
    given), at a refused policy decision, or at an op the model rejects as bad input.
    ``contract=False``: without the contract model (:data:`~checkers.invariants.monitor.
    READS_CONTRACT` says what then goes unjudged), never for a verdict. ``tick``: called after
    each op applied (a progress bar's step). ``stream``: given each op's records after the op,
    which the engine's log then forgets (a long trace's checked replay holds none of them)."""
    pol = resolve_policy(policy)
    engine = engine_for(pol, config)
    mon = Monitor(engine, invariants, endurance_years=endurance_years, contract=contract)
    went_on, refused = _prepare(mon, pol, ops, config)
    if refused is not None:
        return CheckRun((), engine, 0, refused)
    if not went_on:
        return CheckRun(tuple(mon.violations), engine, 0)
    applied = 0
    for op in ops:
        seen = len(engine.log)
        try:
            went_on = mon.apply(op)
        except TraceError as e:
            return CheckRun(tuple(mon.violations), engine, applied, e)
        finally:
            if stream is not None:
                stream(engine.log.since(seen))
                engine.log.forget()
        applied += 1
        if tick is not None:
            tick()
        if not went_on:
            return CheckRun(tuple(mon.violations), engine, applied)
        if stop_at is not None and mon.first(stop_at) is not None:
            return CheckRun(tuple(mon.violations), engine, applied, None, mon.compared_whole)
    mon.at_end()
    return CheckRun(tuple(mon.violations), engine, applied, None, mon.compared_whole)


def _prepare(
    mon: Monitor, pol: Policy, ops: Sequence[Op], config: EngineConfig
) -> tuple[bool, TraceError | None]:
    """A policy's ``prepare`` (an offline policy reads the trace first), if it has one: whether
    the run goes on, and the trace error that refused it."""
    prepare = getattr(pol, "prepare", None)
    if not callable(prepare):
        return True, None
    try:  # (the policy's own code: a finding, never a lost run)
        return mon.call_policy(
            "prepare", lambda: prepare(Trace(TraceHeader(), tuple(ops)), config)
        ), None
    except TraceError as e:
        return False, e


def nondeterminism(
    ops: Sequence[Op],
    policy: str,
    config: EngineConfig,
    *,
    runs: int = 3,
    tick: Callable[[], None] | None = None,
) -> Violation | None:
    """Replay ``ops`` ``runs`` times, each with a fresh policy and engine; a
    ``nondeterministic`` finding at the first op whose records differ between two replays (a
    policy that breaks ties by ``id()``, set order or a clock), else None. ``tick``: called after
    each op of each replay.

    The replays go in lockstep, op by op, and each op's records are compared and then
    forgotten, so a long trace holds ``runs`` engines' states, not their logs (three logs of a
    million records were most of a long ``replay --check``'s memory). The replays are built
    one after another, as separate runs would be, so a policy that keeps state across runs
    (itself the finding) still shows it."""
    # no invariant and no contract model: only the logs are compared, and the monitor's
    # checks never change what the engine does (the contract model was most of the time of a
    # `replay --check` and of a finding's replays in a search)
    ongoing: list[tuple[Monitor, list[int]]] = []
    for _ in range(runs):
        pol = resolve_policy(policy)
        engine = engine_for(pol, config)
        mon = Monitor(engine, [], contract=False)
        went_on, refused = _prepare(mon, pol, ops, config)
        ongoing.append((mon, [0 if went_on and refused is None else -1]))
    counted = 0  # records compared so far (the first run's)
    for i, op in enumerate(ops):
        step: list[list[Observation] | None] = []
        for mon, state in ongoing:
            if state[0] < 0:
                step.append(None)
                continue
            log = mon.engine.log
            seen = len(log)
            try:
                went_on = mon.apply(op)
            except TraceError:
                went_on = False
            step.append(list(log.since(seen)))
            log.forget()
            if not went_on:
                state[0] = -1
            if tick is not None:
                tick()
        first = step[0]
        for other in step[1:]:
            # records compared as objects (cheap), then, only where those differ, as the log's
            # JSON says them, which decides (a NaN field is unequal to itself as an object)
            if other != first and _as_json(other) != _as_json(first):
                a, b = _as_json(first) or [], _as_json(other) or []
                k = next(
                    (j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                    min(len(a), len(b)),
                )
                return Violation(
                    "nondeterministic",
                    f"two replays of the same trace differ at record {counted + k} (op {i}): "
                    f"{_brief(a, k)} vs {_brief(b, k)}",
                    op=i,
                )
        counted += len(first or [])
        if all(state[0] < 0 for _, state in ongoing):
            break
    return None


def _as_json(records: list[Observation] | None) -> list[dict[str, Any]] | None:
    return None if records is None else [observation_to_json(o) for o in records]


def _brief(log: Sequence[dict[str, Any]], k: int) -> str:
    if k >= len(log):
        return "no record"
    r = log[k]
    return " ".join(str(r[f]) for f in ("kind", "block", "tier") if f in r)
