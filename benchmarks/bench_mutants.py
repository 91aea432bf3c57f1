"""Catch rate of the mutant zoo under the main job, as a user runs it. Prints; asserts nothing.

For every mutant in :data:`checkers.mutants.MUTANTS` this runs what ``kvmodel check MUTANT``
runs (every invariant, the ``ci`` profile, Hypothesis shrinking then delta debugging, seed 0)
and prints whether the invariant the mutant breaks was reported, the wall time of the whole
check, and the length of the shrunk counterexample; then the catch rate, median and max time.

    python benchmarks/bench_mutants.py [--profile ci] [--seed 0]
"""

from __future__ import annotations

import argparse
import statistics
import time

from checkers.mutants import MUTANTS
from checkers.report import check_policies
from checkers.stateful import PROFILES


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="ci", choices=sorted(PROFILES))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(f"kvmodel check MUTANT --profile {a.profile} --seed {a.seed} (all invariants)")
    times: list[float] = []
    caught = 0
    for path, inv in MUTANTS.items():
        t0 = time.perf_counter()
        [report] = check_policies([path], profile=a.profile, seed=a.seed)
        dt = time.perf_counter() - t0
        times.append(dt)
        c = report.result.found.get(inv)
        caught += c is not None
        got = f"caught, {len(c.ops):3d} ops" if c else "MISSED"
        print(f"  {path.split(':')[1]:<22} {inv:<38} {dt:7.2f} s  {got}")
    print(
        f"caught {caught}/{len(MUTANTS)}; time per check: median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s"
    )


if __name__ == "__main__":
    main()
