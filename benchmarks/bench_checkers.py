"""Checker throughput -- the stateful machine's steps/s and ops/s, the raw-op explorer's ops/s,
both with every invariant and the contract comparison monitored -- and the time for the stateful
search alone to catch each mutant. Prints figures; asserts nothing.

    python benchmarks/bench_checkers.py [--profile ci] [--policies lru,kvtether] [--no-mutants]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from checkers.invariants import INVARIANTS
from checkers.search.mutants import MUTANTS
from checkers.search.stateful import (
    PROFILES,
    WALKS,
    SearchStats,
    check_config,
    make_machine,
    run_machine,
    search,
    search_settings,
)
from checkers.search.walk import run_walk
from kvmodel.policy import registered_policies, resolve_policy


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="ci", choices=sorted(PROFILES))
    ap.add_argument("--policies", help="comma-separated (default: every registered policy)")
    ap.add_argument("--no-mutants", action="store_true", help="throughput only")
    a = ap.parse_args(argv)
    policies = a.policies.split(",") if a.policies else registered_policies()
    examples, steps = PROFILES[a.profile]
    print(
        f"stateful machine, all {len(INVARIANTS)} invariants monitored, profile {a.profile} "
        f"({examples} examples x {steps} steps):"
    )
    for p in policies:
        if callable(getattr(resolve_policy(p), "prepare", None)):
            continue  # offline policies are searched over traces, not machine steps
        st = SearchStats()
        machine = make_machine(p, list(INVARIANTS), config=check_config(), stats=st)
        t0 = time.perf_counter()
        run_machine(machine, search_settings(examples, steps), 0)
        dt = time.perf_counter() - t0
        print(
            f"  {p:<16} {st.steps / dt:8.0f} steps/s  {sum(st.ops.values()) / dt:8.0f} ops/s"
            f"  ({st.steps} steps, {dt:.2f} s)"
        )
    p = "lru" if "lru" in policies else policies[0]
    print(
        f"where a step's time goes ({p}; the same seed, each layer added in turn; the "
        "eviction-time invariants read the contract model, so they come with it):"
    )
    for label, invariants, contract in (
        ("engine + Hypothesis", [], False),
        ("+ the invariants", list(INVARIANTS), False),
        ("+ the contract model", list(INVARIANTS), True),
    ):
        st = SearchStats()
        machine = make_machine(p, invariants, config=check_config(), stats=st, contract=contract)
        t0 = time.perf_counter()
        run_machine(machine, search_settings(examples, steps), 0)
        dt = time.perf_counter() - t0
        print(f"  {label:<22} {st.steps / dt:8.0f} steps/s  ({st.steps} steps, {dt:.2f} s)")
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
