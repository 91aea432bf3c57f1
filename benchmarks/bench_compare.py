"""Wall time of the full paper-style comparison sweep. Prints figures; asserts nothing.

Run it as

    python benchmarks/bench_compare.py [--sessions 8]
"""

from __future__ import annotations

import argparse
import time

import attrs

from kvmodel.config import default_config
from kvmodel.studies.compare import compare
from kvmodel.studies.presets import SPLITS
from kvmodel.workloads import PRESETS, generate_agentic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=8)
    a = ap.parse_args()
    trace = generate_agentic(attrs.evolve(PRESETS["multi-agent"], sessions=a.sessions))
    t0 = time.perf_counter()
    cmp = compare(
        trace,
        default_config(hbm_blocks=256, hbf_blocks=1024),
        splits=list(SPLITS),
        model="llama-4-maverick",
        scale=0.005,
        progress=False,
    )
    dt = time.perf_counter() - t0
    runs = len(cmp.cache) + sum(len(r) for r in cmp.placement.values())
    print(
        f"full sweep: {len(trace.ops)} ops x {runs} replays in {dt:.1f} s "
        f"({dt / runs:.2f} s per replay)"
    )
    print(cmp.render())


if __name__ == "__main__":
    main()
