"""Per-query Z3 times: rank-order proofs, BMC at depths 4, 8 and 12, k-induction.
Prints figures; asserts nothing.

    python benchmarks/bench_prove.py [--depths 4,8,12]
"""

from __future__ import annotations

import argparse
import time

from checkers.bmc import bmc, induction, profile
from checkers.fragment import FRAGMENT_INVARIANTS, Fragment
from checkers.z3rank import prove_policy
from kvmodel.policy import resolve_policy

POLICIES = ["lru", "vllm-prefix", "hbm-first", "kvtether", "lachesis-det", "tether-lachesis"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depths", default="4,8,12")
    a = ap.parse_args()
    depths = [int(x) for x in a.depths.split(",")]
    f = Fragment()
    print("rank-order proofs (claimed properties, all feature values):")
    for p in POLICIES:
        t0 = time.perf_counter()
        proofs = prove_policy(resolve_policy(p))
        dt = time.perf_counter() - t0
        print(f"  {p:<16} {len(proofs)} properties  {dt * 1000:8.1f} ms")
    print(f"fragment: {f.contexts} contexts, {f.slots} slots, {f.edits} edit each")
    head = "".join(f"  BMC d={d:<3}" for d in depths)
    print(f"  {'policy':<16} {'invariant':<38}{head}  1-induction")
    for p in POLICIES:
        prof = profile(p, f)
        for inv in FRAGMENT_INVARIANTS:
            cells = []
            for d in depths:
                t0 = time.perf_counter()
                rung, at, _, _ = bmc(prof, f, inv, d)
                dt = time.perf_counter() - t0
                mark = f"V{at}" if rung == "violated" else ("ok" if rung == "bounded" else "?")
                cells.append(f"{dt:6.2f}s {mark:<3}")
            t0 = time.perf_counter()
            ind = induction(prof, f, inv, 1)
            dt = time.perf_counter() - t0
            print(f"  {p:<16} {inv:<38}" + "".join(f"  {c}" for c in cells) + f"  {dt:6.2f}s {ind}")


if __name__ == "__main__":
    main()
