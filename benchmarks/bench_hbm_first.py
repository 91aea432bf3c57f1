"""Does HBM turn over under `hbm-first`? (spec/policies.md, hbm-first, "HBM turnover"). Prints,
per split of the compare presets, each policy's block writes and evictions per tier and HBM's
share of the writes; asserts nothing.

    python benchmarks/bench_hbm_first.py [--sessions 4] [--turns 3] [--scale 0.005]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kvmodel.replay import replay
from kvmodel.studies.presets import hardware_config
from kvmodel.workloads import AgenticParams, generate_agentic


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.005)
    ap.add_argument("--splits", default="1/7,2/6,3/5,4/4")
    a = ap.parse_args(argv)
    trace = generate_agentic(AgenticParams(seed=0, sessions=a.sessions, turns=a.turns))
    print("split  policy         HBM blocks  HBM writes  HBM evictions  HBF writes  HBM share")
    for split in a.splits.split(","):
        config = hardware_config(split, "llama-4-maverick", scale=a.scale)
        hbm, hbf = (t.name for t in config.tiers)
        for policy in ("hbm-first", "lachesis-det"):
            s = replay(trace, policy, config, observe=False).summary
            total = sum(s.writes.values()) or 1
            print(
                f"{split:<6} {policy:<14} {config.tiers[0].blocks:>10} {s.writes[hbm]:>11}"
                f" {s.evictions[hbm]:>14} {s.writes[hbf]:>11} {s.writes[hbm] / total:>10.1%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
