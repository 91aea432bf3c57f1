"""What ``kvmodel check`` runs for one policy: :func:`search`.

An *exploration* run of the stateful machine (:mod:`checkers.search.stateful`; a trace-level
search for an offline policy) records the first violation of every invariant without stopping,
then random walks (:mod:`checkers.search.walk`) and, for the reference engine's self-check,
random traces against the contract model; each violated invariant then gets a *targeted* run
that fails on it, so Hypothesis shrinks the counterexample, and delta debugging over the trace
(replay as the test) shortens it further, to 1-minimality.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import partial
from typing import TypeVar

import attrs
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis import target
from hypothesis.errors import Flaky

from checkers.invariants import FINDINGS, INVARIANTS
from checkers.invariants.deadline import HUNG
from checkers.invariants.monitor import READS_CONTRACT
from checkers.invariants.replay import check_ops, nondeterminism
from checkers.invariants.structural import Violation
from checkers.search.coverage import TARGETS, SearchStats
from checkers.search.pool import fixed_constants
from checkers.search.scope import DEFAULT_SCOPE, WalkScope
from checkers.search.shrink import (
    numbered,
    op_groups,
    shrink,
    shrink_clock,
    shrink_engine,
    shrink_scale,
    shrink_values,
)
from checkers.search.stateful import RULES, Record, make_machine, run_machine, search_settings
from checkers.search.swarm import check_config, swarm_configs
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import is_interrupt
from kvmodel.io.trace import Op, Trace
from kvmodel.policy import resolve_policy
from kvmodel.studies.sweep import executor

__all__ = [
    "CONTRACT_TRACES",
    "PROFILES",
    "WALKS",
    "Counterexample",
    "SearchResult",
    "search",
]

_T = TypeVar("_T")

#: Settings profiles: (max_examples, steps per example).
PROFILES: dict[str, tuple[int, int]] = {"dev": (30, 25), "ci": (100, 30), "thorough": (600, 60)}
#: random walks per profile (after the machine; ``--budget`` adds more)
WALKS: dict[str, int] = {"dev": 50, "ci": 200, "thorough": 2000}
#: random traces on which the policy's engine is compared with the contract (engine-contract)
CONTRACT_TRACES: dict[str, int] = {"dev": 4, "ci": 12, "thorough": 100}


@attrs.frozen
class Counterexample:
    invariant: str
    ops: tuple[Op, ...]
    violation: Violation
    hypothesis_ops: int  # length after Hypothesis's shrinking (before delta debugging)
    one_minimal: bool
    #: the engine the trace fails on (a swarm search draws one per example)
    config: EngineConfig = attrs.field(factory=lambda: check_config())
    #: which search found it first: "machine" (Hypothesis) or "walk" (random walk)
    found_by: str = "machine"
    #: the value pass ended within its budget: no message can lose a token, no time, duration
    #: or TTL take a simpler value, and still fail (False: not shrunk, or the budget ran out)
    value_minimal: bool = False


@attrs.frozen
class SearchResult:
    policy: str
    invariants: tuple[str, ...]
    found: dict[str, Counterexample]
    stats: SearchStats
    #: the checker's own crashes, one line each (the phase, the exception): a bug in the
    #: checker, reported beside what the search had already found, never instead of it
    checker_errors: tuple[str, ...] = ()


class _Guard:
    """Runs the phases of a search so that a crash in one (a bug in the checker, or a generator
    refused by the engine) is recorded and the search goes on to report what it has: a finding
    already seen is never lost to a later crash (spec/invariants.md, Findings)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def run(self, phase: str, fn: Callable[[], _T]) -> _T | None:
        try:
            return fn()
        except BaseException as e:
            if is_interrupt(e):
                raise
            self.errors.append(f"{phase}: {type(e).__name__}: {e}")
            return None


def _search_traces(
    policy: str,
    invariants: Sequence[str],
    cfg: EngineConfig | None,
    max_examples: int,
    steps: int,
    seed: int,
    record: Record,
    stats: SearchStats,
    *,
    fail: bool = False,
) -> bool:
    """Trace-level search (for offline policies): draw whole traces, check each by replay."""
    from hypothesis import given

    from checkers.search.strategies import agent_traces

    @search_settings(max_examples, steps)
    @given(agent_traces(max_actions=steps), st.just(cfg) if cfg is not None else swarm_configs())
    def run(trace: Trace, c: EngineConfig) -> None:
        stats.examples += 1
        stats.steps += len(trace.ops)
        stats.count_ops(trace.ops)
        result = check_ops(trace.ops, policy, c, invariants)
        result.require_accepted(trace.ops, f"a generated trace under {policy}")
        cov = stats.observe(result.engine, trace.ops[: result.applied])
        stats.keep_sample(trace.ops, c, cov["evictions"])
        for label in TARGETS:
            target(float(cov[label]), label=label)
        for v in result.violations:
            # the whole trace, not a prefix: an offline policy's plan depends on the future
            record(v.invariant, trace.ops, v, c)
        if fail and result.violations:
            raise AssertionError(result.violations[0].message)

    try:
        with fixed_constants():
            hypothesis_seed(seed)(run)()
    except (AssertionError, Flaky):  # Flaky: the policy behaved differently on a rerun
        return True
    return False


@attrs.frozen
class _First:
    ops: list[Op]
    violation: Violation
    config: EngineConfig
    found_by: str
    #: a walk's clock scale, undone first when shrinking (1: none)
    clock_scale: int = 1


def search(
    policy: str,
    invariants: Iterable[str],
    *,
    config: EngineConfig | None = None,
    max_examples: int = 60,
    steps: int = 30,
    seed: int = 0,
    shrink_budget: int = 1500,
    hypothesis_shrink: bool | Collection[str] = True,
    walks: int = 0,
    walk_seconds: float | None = None,
    jobs: int = 1,
    contract_traces: int = 0,
    scheduler: str | None = None,
    walk_scope: WalkScope = DEFAULT_SCOPE,
) -> SearchResult:
    """Search for counterexamples to each invariant under ``policy`` (see the module docstring).

    ``config=None`` is a swarm search (each example and walk draws its engine); a config fixes
    it. After the machine, ``walks`` random walks (:mod:`checkers.search.walk`) run, and more
    until ``walk_seconds`` have passed since the search began, on ``jobs`` processes (or in
    rounds of ``jobs`` chunks on the Dask scheduler at ``scheduler``), each within
    ``walk_scope`` (longer walks reach later clocks and fuller engines, larger tiers the bugs
    that need more blocks: spec/invariants.md, the search's scope). The finds are then shrunk
    there too, one invariant per task, merged in the serial order (the result is the serial
    one).
    ``hypothesis_shrink=False`` skips the targeted Hypothesis runs and delta-debugs the failing
    prefix directly: several times faster, usually a little longer result; a collection of
    names runs them for those invariants only (``kvmodel check``: the claimed ones and the
    findings).
    ``contract_traces`` random traces check the policy's engine against the contract on ample
    memory (the ``engine-contract`` finding,
    :func:`checkers.search.engine_check.engine_self_check`).
    """
    from checkers.search import walk

    names = tuple(invariants)
    offline = callable(getattr(resolve_policy(policy), "prepare", None))
    stats = SearchStats(rule_names=() if offline else RULES)
    first: dict[str, _First] = {}

    t0 = time.monotonic()

    def explore(inv: str, ops: Sequence[Op], v: Violation, c: EngineConfig) -> None:
        if inv not in first:
            first[inv] = _First(list(ops), v, c, "machine")
            stats.found_after[inv] = time.monotonic() - t0

    def on_find(f: walk.WalkFind) -> None:
        if f.invariant not in first:
            first[f.invariant] = _First(list(f.ops), f.violation, f.config, "walk", f.clock_scale)
            stats.found_after[f.invariant] = time.monotonic() - t0

    guard = _Guard()
    if offline:
        # an offline policy must see the whole trace first: search over traces, not steps
        guard.run(
            "the trace search",
            lambda: _search_traces(
                policy, names, config, max_examples, steps, seed, explore, stats
            ),
        )
    else:
        machine = make_machine(policy, names, config=config, record=explore, stats=stats)
        guard.run(
            "the stateful machine",
            lambda: run_machine(machine, search_settings(max_examples, steps), seed),
        )
    if walks or walk_seconds:
        guard.run(
            "the random walks",
            lambda: walk.explore(
                policy,
                names,
                seed=seed,
                walks=walks,
                # the budget counts from the search's start: the machine's time is spent from it
                seconds=None
                if walk_seconds is None
                else max(0.0, walk_seconds - (time.monotonic() - t0)),
                jobs=jobs,
                config=config,
                stats=stats,
                on_find=on_find,
                scheduler=scheduler,
                scope=walk_scope,
            ),
        )

    if "nondeterministic" not in first and stats.sample and stats.sample_config is not None:
        sample, sample_config = stats.sample, stats.sample_config
        v = guard.run(
            "the determinism check", lambda: nondeterminism(sample, policy, sample_config)
        )
        if v is not None:
            first["nondeterministic"] = _First(
                list(stats.sample), v, stats.sample_config, "machine"
            )

    found: dict[str, Counterexample] = {}
    todo = [n for n in (*names, *FINDINGS) if n in first]
    shrink_settings = _Shrink(config, max_examples, steps, seed, shrink_budget, offline)
    tasks = [
        (
            policy,
            inv,
            first[inv],
            hypothesis_shrink if isinstance(hypothesis_shrink, bool) else inv in hypothesis_shrink,
            shrink_settings,
        )
        for inv in todo
    ]
    if len(tasks) > 1 and (jobs > 1 or scheduler is not None):
        # each invariant's counterexample is shrunk on its own (a deterministic function of its
        # find): in parallel, merged below in the serial order, so the result is the serial one
        with executor(jobs, scheduler) as pool:
            futures = [pool.submit(_shrink_one, *t) for t in tasks]
            shrunk = [
                guard.run(f"shrinking {t[1]}", fut.result) or _unshrunk(t[1], t[2])
                for t, fut in zip(tasks, futures, strict=True)
            ]
    else:
        shrunk = [
            guard.run(f"shrinking {t[1]}", partial(_shrink_one, *t)) or _unshrunk(t[1], t[2])
            for t in tasks
        ]
    for inv, (c, replayed) in zip(todo, shrunk, strict=True):
        if replayed:
            found[inv] = c
        else:  # the find did not replay: a nondeterminism finding, the first one kept
            found.setdefault("nondeterministic", c)
    if contract_traces and "engine-contract" not in found:
        from checkers.search.engine_check import engine_self_check

        engine_class = getattr(resolve_policy(policy), "engine_class", Engine)
        t_check = time.monotonic()
        sc = guard.run(
            "the engine self-check",
            lambda: engine_self_check(engine_class, traces=contract_traces, seed=seed),
        )
        if sc is not None:
            stats.found_after["engine-contract"] = t_check - t0
            found["engine-contract"] = Counterexample(
                "engine-contract",
                sc.ops,
                sc.violation,
                sc.original_length,
                sc.one_minimal,
                sc.config,
                "self-check",
            )
        stats.contract_traces += contract_traces
    return SearchResult(policy, names, found, stats, tuple(guard.errors))


def _unshrunk(inv: str, f: _First) -> tuple[Counterexample, bool]:
    """A find whose shrinking crashed, as it was found: reported unshrunk, not lost."""
    return Counterexample(
        inv, tuple(f.ops), f.violation, len(f.ops), False, f.config, f.found_by
    ), True


@attrs.frozen
class _Shrink:
    """What shrinking every find of one search shares."""

    config: EngineConfig | None
    max_examples: int
    steps: int
    seed: int
    budget: int
    offline: bool


def _shrink_one(
    policy: str, inv: str, f: _First, use_hypothesis: bool, s: _Shrink
) -> tuple[Counterexample, bool]:
    """The counterexample of ``inv``'s find ``f``: Hypothesis's targeted run (``use_hypothesis``,
    a find of the machine), then delta debugging to 1-minimality; and whether the find replayed
    (False: the counterexample is a ``nondeterministic`` finding's, the find's trace replaying
    differently or not failing again)."""
    cfg = f.config
    if HUNG in f.violation.message:
        return _unshrunk(inv, f)  # (every try of a shrinker would wait out the op deadline)
    if inv == "nondeterministic":
        return _shrink_nondeterminism(policy, f, s.budget), True
    last: list[tuple[list[Op], EngineConfig]] = []

    def keep(name: str, ops: Sequence[Op], v: Violation, c: EngineConfig) -> None:
        if name == inv:
            last.append((list(ops), c))

    ops = f.ops
    monitored = [inv] if inv in INVARIANTS else []
    if not use_hypothesis or f.found_by == "walk":
        pass  # delta debugging alone, from the failing prefix
    elif s.offline:
        if (
            _search_traces(
                policy, [inv], s.config, s.max_examples, s.steps, s.seed, keep, SearchStats(),
                fail=True,
            )
            and last
        ):  # fmt: skip
            ops, cfg = last[-1]
    else:
        # the targeted run monitors only its invariant: cheaper examples, faster shrinking
        targeted = make_machine(
            policy,
            [inv],
            config=s.config,
            fail_on=frozenset({inv}),
            record=keep,
            stats=SearchStats(),
        )
        if run_machine(targeted, search_settings(s.max_examples, s.steps), s.seed) and last:
            ops, cfg = last[-1]  # Hypothesis replays the shrunk example last
    h_len = len(ops)

    # a try judges its invariant alone: the contract model follows it only if the invariant
    # reads the model (the rest judge the same without it, and on an engine of hundreds of
    # blocks the model is most of a try: ByteDepthLRU's shrink 51 s -> 9 s, the same trace).
    # The counterexample found is replayed with the model (below)
    contract = inv in READS_CONTRACT

    def fails_on(cand: Sequence[Op], c: EngineConfig) -> bool:
        run = check_ops(cand, policy, c, monitored, stop_at=inv, contract=contract)
        return run.trace_error is None and run.first(inv) is not None

    # a counterexample must replay, the same way every time: otherwise the policy (or
    # engine) is nondeterministic or keeps state across runs -- a finding, never a crash
    odd = nondeterminism(ops, policy, cfg)
    if odd is None and fails_on(ops, cfg):
        small, minimal = shrink(ops, partial(fails_on, c=cfg), budget=s.budget, groups=op_groups)
        values = False  # (a finding keeps its values)
        if f.clock_scale > 1 and inv in INVARIANTS:  # a walk's clock scale undone
            small = shrink_clock(small, f.clock_scale, partial(fails_on, c=cfg))
        while inv in INVARIANTS:
            # a drawn engine is shrunk too, then the trace again on the smaller engine, to a
            # fixpoint (a shorter trace may fail on a smaller engine still); only then the
            # numbers in the ops, and the trace and engine again if they changed: deleting an
            # op comes first, for a smaller message can keep an op the fault no longer needs
            # (spec/invariants.md, Counterexamples). A finding keeps its engine and values,
            # whose refusals and crashes smaller ones could trade for others
            before = (cfg, small)
            if s.config is None:
                small, cfg = shrink_scale(small, cfg, fails_on)  # a walk's token scale undone
                cfg = shrink_engine(cfg, partial(fails_on, small))[0]
            if (cfg, small) == before:
                small, values = shrink_values(small, partial(fails_on, c=cfg), budget=s.budget)
                if small == before[1]:
                    break
            small, minimal = shrink(
                small, partial(fails_on, c=cfg), budget=s.budget, groups=op_groups
            )
        if inv in INVARIANTS:
            # ids numbered from 1 in order of appearance, kept only if the trace still fails
            named = numbered(small)
            if named != small and fails_on(named, cfg):
                small = named
        final = check_ops(small, policy, cfg, monitored, stop_at=inv).first(inv)
        if final is not None:
            return Counterexample(
                inv, tuple(small), final, h_len, minimal, cfg, f.found_by, values
            ), True
    v = odd or Violation(
        "nondeterministic",
        f"the {inv} violation seen in the search does not replay from its trace "
        "(state kept across runs?)",
    )
    return _shrink_nondeterminism(policy, _First(ops, v, cfg, f.found_by), s.budget), False


def _shrink_nondeterminism(policy: str, f: _First, budget: int) -> Counterexample:
    """Shorten a trace whose replays differ, keeping them different (when they do)."""
    cfg = f.config

    def differs(cand: Sequence[Op]) -> bool:
        return nondeterminism(cand, policy, cfg) is not None

    if not differs(f.ops):
        return Counterexample(
            "nondeterministic", tuple(f.ops), f.violation, len(f.ops), False, cfg, f.found_by
        )
    small, minimal = shrink(f.ops, differs, budget=budget, groups=op_groups)
    final = nondeterminism(small, policy, cfg) or f.violation
    return Counterexample(
        "nondeterministic", tuple(small), final, len(f.ops), minimal, cfg, f.found_by
    )
