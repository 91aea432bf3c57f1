"""Catch rate of the mutant zoo under the main job, as a user runs it. Prints; asserts nothing.

For every mutant in :data:`checkers.search.mutants.MUTANTS` this runs what ``kvmodel check MUTANT``
runs (every invariant, the ``ci`` profile: the machine and the random walks on a swarm of
engines, Hypothesis shrinking then delta debugging, seed 0) and prints whether the invariant the
mutant breaks was reported, how long the search took to first see it, the wall time of the whole
check (shrinking every violated invariant included), which search found it and the length of the
shrunk counterexample; then, for the policy mutants and the engine mutants
(:data:`checkers.search.engine_mutants.ENGINE_MUTANTS`, engine bugs under KVTether) apart, the
catch rate and the median and max of both times.

    python benchmarks/bench_mutants.py [--profile ci] [--seed 0] [MUTANT ...]
"""

from __future__ import annotations

import argparse
import statistics
import time

from checkers.search.driver import PROFILES
from checkers.search.engine_mutants import ENGINE_MUTANTS
from checkers.search.mutants import MUTANTS
from checkers.search.outside_mutants import SCOPE_NEEDED
from checkers.search.report import check_policies
from checkers.search.scope import WalkScope


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="ci", choices=sorted(PROFILES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("only", nargs="*", help="substrings of mutant names to run")
    a = ap.parse_args()
    print(f"kvmodel check MUTANT --profile {a.profile} --seed {a.seed} (all invariants)")
    print(f"  {'mutant':<34} {'invariant':<38} {'found':>7} {'check':>8}  result")
    rows: dict[str, list[tuple[bool, float | None, float]]] = {"policy": [], "engine": []}
    for path, inv in MUTANTS.items():
        name = path.split(":")[1]
        if a.only and not any(s in name for s in a.only):
            continue
        t0 = time.perf_counter()
        # (a mutant outside the default scope is checked as a user would: --walk-ops,
        # --tier-blocks)
        scope = SCOPE_NEEDED.get(path, WalkScope())
        [report] = check_policies([path], profile=a.profile, seed=a.seed, walk_scope=scope)
        dt = time.perf_counter() - t0
        c = report.result.found.get(inv)
        after = report.result.stats.found_after.get(inv)
        rows["engine" if path in ENGINE_MUTANTS else "policy"].append((c is not None, after, dt))
        got = f"caught by {c.found_by}, {len(c.ops)} ops" if c else "MISSED"
        first = f"{after:6.2f}s" if after is not None else "      -"
        print(f"  {name:<34} {inv:<38} {first} {dt:7.2f}s  {got}", flush=True)
    for kind, got_rows in rows.items():
        if not got_rows:
            continue
        found_s = [r[1] for r in got_rows if r[1] is not None]
        check_s = [r[2] for r in got_rows]
        print(f"{kind} mutants: caught {sum(r[0] for r in got_rows)}/{len(got_rows)}")
        if found_s:
            print(
                f"  time to first violation: median {statistics.median(found_s):.2f} s, "
                f"max {max(found_s):.2f} s"
            )
        print(
            f"  time per check (search + shrinking): median {statistics.median(check_s):.2f} s, "
            f"max {max(check_s):.2f} s"
        )


if __name__ == "__main__":
    main()
