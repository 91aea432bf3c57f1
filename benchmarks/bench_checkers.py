"""Stateful-search throughput and time to catch each mutant. Prints figures; asserts nothing.

    python benchmarks/bench_checkers.py [--profile ci]
"""

from __future__ import annotations

import argparse
import time

from checkers.invariants import INVARIANTS
from checkers.search.mutants import MUTANTS
from checkers.search.stateful import (
    PROFILES,
    SearchStats,
    check_config,
    make_machine,
    run_machine,
    search,
    search_settings,
)
from kvmodel.policy import registered_policies, resolve_policy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="ci", choices=sorted(PROFILES))
    a = ap.parse_args()
    examples, steps = PROFILES[a.profile]
    print(f"stateful machine, all {len(INVARIANTS)} invariants monitored, profile {a.profile} "
          f"({examples} examples x {steps} steps):")
    for p in registered_policies():
        if callable(getattr(resolve_policy(p), "prepare", None)):
            continue  # offline policies are searched over traces, not machine steps
        st = SearchStats()
        machine = make_machine(p, list(INVARIANTS), config=check_config(), stats=st)
        t0 = time.perf_counter()
        run_machine(machine, search_settings(examples, steps), 0)
        dt = time.perf_counter() - t0
        print(f"  {p:<16} {st.steps / dt:8.0f} steps/s  ({st.steps} steps, {dt:.2f} s)")
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


if __name__ == "__main__":
    main()
