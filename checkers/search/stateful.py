"""A Hypothesis stateful machine over the harness primitives, generic over the policy.

The machine is thin (STYLE §9): each rule asks the :class:`~checkers.search.builder.HarnessBuilder`
for the ops of one agent action and applies them through the :class:`~checkers.invariants.Monitor`;
there is one ``@invariant`` per invariant the machine fails on, and its body only reads the
monitor. Tiers are small (a dozen blocks) so that pressure, evictions and rejections are
common.

:func:`checkers.search.driver.search` runs it (with the walks and the contract traces) for
``kvmodel check``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from checkers.invariants import FINDINGS, Monitor
from checkers.invariants.replay import engine_for
from checkers.invariants.structural import Violation
from checkers.search.builder import HarnessBuilder
from checkers.search.coverage import TARGETS, SearchStats
from checkers.search.pool import fixed_constants
from checkers.search.strategies import durations, picks, tokens, ttls, waits
from checkers.search.swarm import check_config, swarm_configs
from kvmodel.config import EngineConfig
from kvmodel.io.trace import Op, op_name
from kvmodel.policy import resolve_policy

__all__ = [
    "RULES",
    "Record",
    "SearchStats",
    "check_config",
    "make_machine",
    "run_machine",
    "search_settings",
]

#: what a search records of a first violation: the invariant, the ops up to it, the violation
#: and the engine configuration it happened on
Record = Callable[[str, Sequence[Op], Violation, EngineConfig], None]


#: after new input, usually run the context (the harness's next request): its duration, or None
#: for no inference; running is drawn first. Three in four run, each for its own time -- the
#: harness clock moves with its inferences, so holders of shared KV are suspended at different
#: times (spec/invariants.md, "The harness clock moves with its inferences")
go_on = st.sampled_from([0.5, None, 2.0, 0.0])
#: destructive actions happen in about a quarter of the draws of their rule
rarely = st.sampled_from([False, False, True])

RULES = (
    "start_session",
    "user",
    "observe",
    "infer",
    "turn_end",
    "spawn",
    "ret",
    "compact",
    "fork",
    "replace",
    "remove",
    "pin",
    "unpin",
    "close",
    "end_session",
    "wait",
)


def make_machine(
    policy: str,
    invariants: Iterable[str],
    *,
    config: EngineConfig | None,
    fail_on: frozenset[str] = frozenset(),
    record: Record | None = None,
    stats: SearchStats | None = None,
    contract: bool = True,
) -> type[RuleBasedStateMachine]:
    """A machine class for ``policy``; it fails on the invariants in ``fail_on`` and reports
    every first violation of any monitored invariant to ``record``. ``config=None`` is a swarm
    search: each example draws its engine from :func:`checkers.search.swarm.swarm_configs`. Every
    example targets pressure (Hypothesis ``target``: evictions, rejections, spills, dead
    blocks resident), so the search climbs towards the states where policies differ.
    ``contract=False`` runs no contract model (:class:`~checkers.invariants.monitor.Monitor`):
    for measuring its cost, never for a search whose verdict is reported."""
    monitored = tuple(invariants)
    st_ = stats if stats is not None else SearchStats(rule_names=RULES)
    configs = st.just(config) if config is not None else swarm_configs()

    class Machine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self._setup(config or check_config())
            self.b = HarnessBuilder()
            self.halted = False
            self.reported: set[str] = set()
            st_.examples += 1

        def _setup(self, cfg: EngineConfig) -> None:
            self.config = cfg
            self.engine = engine_for(resolve_policy(policy), cfg)
            self.monitor = Monitor(self.engine, monitored, contract=contract)

        @initialize(cfg=configs)
        def engine_config(self, cfg: EngineConfig) -> None:
            """The example's engine: drawn first, before any op."""
            self._setup(cfg)

        def _ensure_session(self) -> None:
            """Every action needs an agent: start one if none is running (Hypothesis's swarm
            testing often disables ``start_session`` for a whole example)."""
            if not self.b.ctxs and not self.halted:
                self._apply(self.b.start_session(0, pin=True, ttl=None))

        def _run(self, name: str, ops: list[Op]) -> None:
            if self.halted:  # (a rule's later actions, after one that stopped the run)
                return
            st_.rules[name] += 1
            st_.steps += 1
            self._apply(ops)

        def _apply(self, ops: list[Op]) -> None:
            if self.halted:
                return
            for op in ops:
                if not self.monitor.apply(op):
                    self.halted = True
                    break
                st_.ops[op_name(op)] += 1
            if record is not None:
                for v in self.monitor.violations:
                    if v.invariant not in self.reported:
                        self.reported.add(v.invariant)
                        n = (v.op + 1) if v.op is not None else len(self.b.ops)
                        record(v.invariant, list(self.b.ops[:n]), v, self.config)

        @precondition(lambda self: not self.halted)
        @rule(variant=st.integers(0, 5), pin=st.booleans(), ttl=ttls)
        def start_session(self, variant: int, pin: bool, ttl: float | None) -> None:
            self._run("start_session", self.b.start_session(variant, pin, ttl))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks, n=tokens, temporary=st.booleans(), go=go_on)
        def user(self, pick: int, n: int, temporary: bool, go: float | None) -> None:
            self._ensure_session()
            self._run("user", self.b.user(pick, n, temporary))
            if go is not None:
                self._apply(self.b.infer_last(4, False, go))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks, n=tokens, temporary=st.booleans(), go=go_on)
        def observe(self, pick: int, n: int, temporary: bool, go: float | None) -> None:
            self._ensure_session()
            self._run("observe", self.b.observe(pick, n, temporary))
            if go is not None:
                self._apply(self.b.infer_last(4, False, go))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks, reasoning=st.integers(0, 12), answer=st.booleans(), d=durations)
        def infer(self, pick: int, reasoning: int, answer: bool, d: float) -> None:
            self._ensure_session()
            self._run("infer", self.b.infer(pick, reasoning, answer, d))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks)
        def turn_end(self, pick: int) -> None:
            self._ensure_session()
            self._run("turn_end", self.b.turn_end(pick))

        @precondition(lambda self: not self.halted)
        @rule(
            pick=picks,
            reviewer=st.booleans(),
            tools=st.integers(0, 4),
            n=tokens,
            go=go_on,
            fanout=st.integers(1, 3),
        )
        def spawn(
            self, pick: int, reviewer: bool, tools: int, n: int, go: float | None, fanout: int
        ) -> None:
            """Spawn ``fanout`` sub-agents at once (a lead fanning out work)."""
            self._ensure_session()
            for i in range(fanout):
                self._run("spawn", self.b.spawn(pick, reviewer, tools + i, n))
                if go is not None:  # each sub-agent starts working at once
                    self._apply(self.b.infer_last(4, False, go))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks, go=go_on)
        def ret(self, pick: int, go: float | None) -> None:
            self._ensure_session()
            self._run("ret", self.b.ret(pick))
            if go is not None:
                self._apply(self.b.infer_last(4, False, go))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks, d=durations)
        def compact(self, pick: int, d: float) -> None:
            self._ensure_session()
            self._run("compact", self.b.compact(pick, d))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks, upto=st.integers(0, 8))
        def fork(self, pick: int, upto: int) -> None:
            self._ensure_session()
            self._run("fork", self.b.fork(pick, upto))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks, index=st.integers(0, 8), n=tokens, go=go_on)
        def replace(self, pick: int, index: int, n: int, go: float | None) -> None:
            """An edit in the middle (e.g. an old observation shortened), usually followed by
            the context's next inference."""
            self._ensure_session()
            self._run("replace", self.b.replace(pick, index, n))
            if go is not None:
                self._apply(self.b.infer_last(4, False, go))

        @precondition(lambda self: not self.halted)
        @rule(confirm=rarely, pick=picks, index=st.integers(0, 8), count=st.integers(0, 3))
        def remove(self, confirm: bool, pick: int, index: int, count: int) -> None:
            self._ensure_session()
            if not confirm:
                return
            self._run("remove", self.b.remove(pick, index, count))

        @precondition(lambda self: not self.halted)
        @rule(pick=picks, a=st.integers(0, 8), b=st.integers(0, 8), ttl=ttls)
        def pin(self, pick: int, a: int, b: int, ttl: float | None) -> None:
            self._ensure_session()
            self._run("pin", self.b.pin(pick, a, b, ttl))

        @precondition(lambda self: not self.halted)
        @rule(confirm=st.booleans(), pick=picks)
        def unpin(self, confirm: bool, pick: int) -> None:
            self._ensure_session()
            if not confirm:
                return
            self._run("unpin", self.b.unpin(pick))

        @precondition(lambda self: not self.halted)
        @rule(confirm=rarely, pick=picks)
        def close(self, confirm: bool, pick: int) -> None:
            self._ensure_session()
            if not confirm:
                return
            self._run("close", self.b.close(pick))

        @precondition(lambda self: not self.halted)
        @rule(confirm=rarely, pick=picks)
        def end_session(self, confirm: bool, pick: int) -> None:
            if not confirm:
                return
            self._run("end_session", self.b.end_session(pick))

        def teardown(self) -> None:
            cov = st_.observe(self.engine, self.b.ops)
            st_.keep_sample(self.b.ops, self.config, cov["evictions"])
            for label in TARGETS:
                target(float(cov[label]), label=label)
            if self.halted:
                return
            # end-of-run invariants (endurance-budget) are judged once the run is over
            self.monitor.at_end()
            self._apply([])
            for name in fail_on:
                v = self.monitor.first(name)
                if v is not None:
                    raise AssertionError(f"{policy} violates {name}: {v.message}")

        @rule(dt=waits)
        def wait(self, dt: float | None) -> None:
            """Always enabled (so a halted run can still make progress); time passes, or
            (``None``) runs to the next TTL pin deadline (:meth:`HarnessBuilder.advance`)."""
            if not self.halted:
                self._run("wait", self.b.advance(dt))

    def make_check(name: str) -> Callable[[Any], None]:
        def check(self: Any) -> None:
            v = self.monitor.first(name)
            if v is not None and name in fail_on:
                raise AssertionError(f"{policy} violates {name}: {v.message}")

        check.__name__ = f"inv_{name.replace('-', '_')}"
        return invariant()(check)

    # an @invariant only for what the machine fails on: the monitor records every first
    # violation of the others itself (``record``), and Hypothesis calls each invariant after
    # every step, so a check that can never raise is a cost and nothing else
    for name in (*monitored, *FINDINGS):
        if name in fail_on:
            setattr(Machine, f"inv_{name.replace('-', '_')}", make_check(name))
    Machine.__name__ = f"Machine_{policy.replace('-', '_').replace(':', '_').replace('.', '_')}"
    return Machine


def search_settings(max_examples: int, steps: int) -> settings:
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
        report_multiple_bugs=False,
    )


def run_machine(machine: type[RuleBasedStateMachine], s: settings, seed: int) -> bool:
    """Run the machine as a Hypothesis test; True if it failed (a counterexample was found)."""
    from hypothesis.stateful import get_state_machine_test

    # get_state_machine_test is run_state_machine_as_test without the call, so a seed applies.
    # Older Hypothesis releases leave it unannotated: a typed alias keeps mypy --strict quiet on
    # both (an ignore comment would be "unused" on the annotated ones)
    make_test: Callable[..., Callable[[], None]] = get_state_machine_test
    test = hypothesis_seed(seed)(make_test(machine, settings=s))
    try:
        with fixed_constants():
            test()
    except (AssertionError, Flaky):  # Flaky: the policy behaved differently on a rerun
        return True
    return False
