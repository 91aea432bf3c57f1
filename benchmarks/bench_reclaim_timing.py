"""KVTether's reclaim timing, both readings (spec/policies.md, kvtether, "when Dead KV goes"):
eager reclaim (``kvtether``) against dead-first eviction (the policy-space point with the same
rank and no reclaim). Prints the table the spec quotes; asserts nothing.

    python benchmarks/bench_reclaim_timing.py [--hbm 1024,2048,4096] [--seed 0]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import attrs

from kvmodel.config import default_config
from kvmodel.replay import replay
from kvmodel.studies.metrics import compute_metrics
from kvmodel.workloads import PRESETS, generate_agentic

DEAD_FIRST = "policies.space:Candidate_d_tsa_smru_lru_none_bypass_hbm_first"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hbm", default="1024,2048,4096", help="HBM sizes in blocks (HBF: 4x)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sessions", type=int, help="sessions per preset (default: the preset's)")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.hbm.split(",")]
    print("dead-first over eager (kvtether): input cost, task cost, HBF writes; zombie block-s")
    for name in ("single-agent", "multi-agent"):
        params = attrs.evolve(PRESETS[name], seed=a.seed)
        if a.sessions:
            params = attrs.evolve(params, sessions=a.sessions)
        trace = generate_agentic(params)
        for hbm in sizes:
            config = default_config(hbm_blocks=hbm, hbf_blocks=4 * hbm)
            eager = compute_metrics(replay(trace, "kvtether", config))
            late = compute_metrics(replay(trace, DEAD_FIRST, config))
            writes = late.writes.get("hbf", 0) / max(eager.writes.get("hbf", 0), 1)
            print(
                f"  {name:<13} hbm {hbm:>5}: input {late.input_cost_usd / eager.input_cost_usd:.3f}"
                f"  cost {late.cost_usd / eager.cost_usd:.3f}  hbf writes {writes:.2f}"
                f"  zombie {late.zombie_block_seconds:,.0f}"
                f" (eager {eager.zombie_block_seconds:,.0f})"
                f"  rejected {late.rejected}/{eager.rejected}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
