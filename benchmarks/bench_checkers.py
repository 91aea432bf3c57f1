"""Checker throughput -- the stateful machine's steps/s and ops/s, the raw-op explorer's ops/s,
both with every invariant and the contract comparison monitored -- and the time for the stateful
search alone to catch each mutant. Prints figures; asserts nothing.

    python benchmarks/bench_checkers.py [--profile ci] [--seeds 4] [--policies lru,kvtether]
        [--no-mutants]

The machine's figures are over ``--seeds`` search seeds (total steps over total time): one
seed's examples can be several times heavier than another's (more sessions open at once), so a
single seed's rate says as much about that seed as about the checker.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from checkers.invariants import INVARIANTS
from checkers.search.driver import PROFILES, WALKS, search
from checkers.search.mutants import MUTANTS
from checkers.search.stateful import (
    SearchStats,
    check_config,
    make_machine,
    run_machine,
    search_settings,
)
from checkers.search.walk import run_walk
from kvmodel.io.trace import Op
from kvmodel.policy import registered_policies, resolve_policy


def timed(machine: type[RuleBasedStateMachine], examples: int, steps: int, seeds: int) -> float:
    """Seconds to run ``machine`` once per search seed ``0 .. seeds - 1``."""
    t0 = time.perf_counter()
    for seed in range(seeds):
        run_machine(machine, search_settings(examples, steps), seed)
    return time.perf_counter() - t0


def hypothesis_floor(examples: int, steps: int, seeds: int) -> tuple[int, float]:
    """Hypothesis's own cost per step on this machine now (the issue's anchor, ~5,000 steps/s):
    a machine of one rule drawing one integer that does nothing, under the search's settings.
    Machine speed here drifts by up to 30% within minutes: the checked machine's figures are
    read against this one, measured in the same run."""
    count = [0]

    class Trivial(RuleBasedStateMachine):
        @rule(x=st.integers(0, 7))
        def step(self, x: int) -> None:
            count[0] += 1

    dt = timed(Trivial, examples, steps, seeds)
    return count[0], dt


def harness_only(policy: str, stats: SearchStats) -> type[RuleBasedStateMachine]:
    """The checked machine's rules and draws, its ops built by the harness and never applied
    (no engine, no monitor): what Hypothesis and the harness cost on their own."""
    base = make_machine(policy, [], config=check_config(), stats=stats, contract=False)

    class HarnessOnly(base):  # type: ignore[misc,valid-type]
        def _apply(self, ops: list[Op]) -> None:
            pass

    return HarnessOnly


def goal_budget(harness: float, step: dict[str, float], ops_per_step: float) -> str:
    """What 2,000 steps/s leaves each layer, in microseconds, from the layers' seconds a step
    (``harness``: the harness alone; ``step``: with the engine, the invariants and the contract
    model added in turn) and the checked machine's ops a step. The harness's figure is taken on
    its own examples (applying nothing, it has no pressure to target), so the split is close, not
    exact."""
    us = 1e6
    per_op = (us * (1 / 2000 - harness)) / ops_per_step
    engine = us * (step["+ the invariants"] - harness) / ops_per_step
    contract = us * (step["+ the contract model"] - step["+ the invariants"]) / ops_per_step
    return (
        f"  the goal, 2,000 steps/s, is 500 us a step: the harness takes {us * harness:.0f}, "
        f"leaving {per_op:.0f} us for each of a step's {ops_per_step:.1f} ops; the engine and "
        f"the invariants take {engine:.0f} us an op, the contract model {contract:.0f} more "
        f"(within the goal: {per_op - engine:.0f})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="ci", choices=sorted(PROFILES))
    ap.add_argument("--policies", help="comma-separated (default: every registered policy)")
    ap.add_argument("--no-mutants", action="store_true", help="throughput only")
    ap.add_argument("--seeds", type=int, default=4, help="search seeds per machine figure")
    a = ap.parse_args(argv)
    policies = a.policies.split(",") if a.policies else list(registered_policies())
    examples, steps = PROFILES[a.profile]
    print(
        f"stateful machine, all {len(INVARIANTS)} invariants monitored, profile {a.profile} "
        f"({examples} examples x {steps} steps), seeds 0-{a.seeds - 1}:"
    )
    for p in policies:
        if callable(getattr(resolve_policy(p), "prepare", None)):
            continue  # offline policies are searched over traces, not machine steps
        st = SearchStats()
        machine = make_machine(p, list(INVARIANTS), config=check_config(), stats=st)
        dt = timed(machine, examples, steps, a.seeds)
        print(
            f"  {p:<16} {st.steps / dt:8.0f} steps/s  {sum(st.ops.values()) / dt:8.0f} ops/s"
            f"  ({st.steps} steps, {dt:.2f} s)"
        )
    p = "lru" if "lru" in policies else policies[0]
    print(
        f"where a step's time goes ({p}; the same seeds, each layer added in turn; the "
        "eviction-time invariants read the contract model, so they come with it):"
    )
    n, dt = hypothesis_floor(examples, steps, a.seeds)
    floor = n / dt
    print(f"  {'Hypothesis alone':<22} {floor:8.0f} steps/s  ({n} steps, {dt:.2f} s; a "
          "trivial machine: one rule, one integer)")  # fmt: skip
    st_ = SearchStats()
    dt = timed(harness_only(p, st_), examples, steps, a.seeds)
    print(f"  {'+ the harness':<22} {st_.steps / dt:8.0f} steps/s  ({st_.steps} steps, "
          f"{dt:.2f} s; ops built, none applied)")  # fmt: skip
    harness = dt / st_.steps
    step: dict[str, float] = {}  # seconds a step, each layer
    for label, invariants, contract in (
        ("+ the engine", [], False),
        ("+ the invariants", list(INVARIANTS), False),
        ("+ the contract model", list(INVARIANTS), True),
    ):
        st = SearchStats()
        machine = make_machine(p, invariants, config=check_config(), stats=st, contract=contract)
        dt = timed(machine, examples, steps, a.seeds)
        step[label] = dt / st.steps
        print(f"  {label:<22} {st.steps / dt:8.0f} steps/s  ({st.steps} steps, {dt:.2f} s)")
    print(f"  a checked step costs {floor / (st.steps / dt):.1f} trivial steps (the goal, "
          f"2,000 steps/s at a floor of ~5,000, is 2.5)")  # fmt: skip
    print(goal_budget(harness, step, sum(st.ops.values()) / st.steps))
    walks = WALKS[a.profile]
    print(f"raw-op explorer (random walks, every invariant monitored), {walks} walks:")
    for p in policies:
        t0 = time.perf_counter()
        n = sum(run_walk(p, list(INVARIANTS), 0, i, None).length for i in range(walks))
        dt = time.perf_counter() - t0
        print(f"  {p:<16} {n / dt:8.0f} ops/s  ({n} ops, {dt:.2f} s)")
    if a.no_mutants:
        return 0
    print(
        "time for the stateful search alone to catch each mutant (exploration + Hypothesis "
        "shrink + delta debugging); MISSED here is not missed by kvmodel check, which adds "
        "random walks and the contract self-check (tests/test_checkers.py: every mutant caught):"
    )
    for path, inv in MUTANTS.items():
        t0 = time.perf_counter()
        r = search(path, [inv], max_examples=examples, steps=steps)
        dt = time.perf_counter() - t0
        c = r.found.get(inv)
        got = f"caught, {len(c.ops)} ops" if c else "MISSED"
        print(f"  {path.split(':')[1]:<22} {inv:<38} {dt:6.2f} s  {got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
