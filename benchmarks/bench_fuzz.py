"""The mutation fuzzer's campaign (checkers/search/fuzz.py): inputs/s and outcome counts per target,
and every failure (crash, hang, output left behind after an error, an error without a message)
with the input index that reproduces it. Prints figures; asserts nothing.

    python benchmarks/bench_fuzz.py [--inputs 20000] [--seed 0] [--keep DIR] [--argv]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from checkers.search.fuzz import argv_campaign, campaign


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="write failing inputs here")
    ap.add_argument("--argv", action="store_true", help="random command lines instead")
    a = ap.parse_args()
    c = argv_campaign(a.inputs, a.seed) if a.argv else campaign(a.inputs, a.seed, keep=a.keep)
    print(f"{c.inputs} inputs in {c.seconds:.1f} s: {c.inputs / c.seconds:.0f} inputs/s")
    kinds = sorted({k for per in c.counts.values() for k in per})
    print(f"  {'target':<22}" + "".join(f"{k:>12}" for k in kinds))
    for t, per in c.counts.items():
        print(f"  {t:<22}" + "".join(f"{per.get(k, 0):>12}" for k in kinds))
    print(f"failures: {len(c.failures)}")
    for f in c.failures:
        print(f"  {f.kind} {f.target}: {f.detail}")


if __name__ == "__main__":
    main()
