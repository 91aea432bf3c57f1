"""What Lachesis's predictive path earns (spec/policies.md §lachesis, "Measured"): per workload
(the multi-agent preset without and with reviewers), split and scale, each placement's HBF block
writes, their ratio over HBM-first's (the paper's HBF lifetime ratio: lifetime is inverse to
writes), the predictive path's margin over the deterministic one, and the share of the
reviewers' KV that reaches HBF. Prints figures; asserts nothing.

    python benchmarks/bench_predictive.py [--scales 0.005,0.05] [--splits 1/7,2/6,3/5,4/4]

Paper (Lachesis §5.3-5.4): the deterministic path 1.11-2.00x over HBM-first on the multi-agent
trace; the predictive path adds 1.33-1.54x with reviewers and 1.05-1.14x without; reviewers'
KV reaches flash at 45-95% without the predictive path and 2-25% under Lachesis.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import attrs

from kvmodel.io.observations import AllocObs
from kvmodel.messages import AgentKind
from kvmodel.replay import replay
from kvmodel.studies.presets import hardware_config
from kvmodel.workloads.agentic import PRESETS, generate_agentic

POLICIES = ("hbm-first", "lachesis-det", "lachesis")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="0.005,0.05")
    ap.add_argument("--splits", default="1/7,2/6,3/5,4/4")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    print(
        "workload            scale  split  HBM blk   HBF writes: hbm-first  det     lachesis"
        "   det/hf  lach/hf  lach/det   reviewer KV to HBF: det  lachesis"
    )
    for workload in ("multi-agent", "multi-agent-review"):
        trace = generate_agentic(attrs.evolve(PRESETS[workload], seed=a.seed))
        for scale in (float(x) for x in a.scales.split(",")):
            for split in a.splits.split(","):
                config = hardware_config(split, "llama-4-maverick", scale=scale)
                hbf = config.tiers[-1].name
                writes: dict[str, int] = {}
                to_flash: dict[str, float | None] = {}
                for policy in POLICIES:
                    r = replay(trace, policy, config)
                    writes[policy] = r.summary.writes[hbf]
                    agent = {c: x.agent for c, x in r.engine.contexts.items()}
                    tiers = [
                        o.tier
                        for o in r.engine.log
                        if isinstance(o, AllocObs) and agent[o.ctx] is AgentKind.REVIEWER
                    ]
                    to_flash[policy] = tiers.count(hbf) / len(tiers) if tiers else None
                hf, det, lach = (max(writes[p], 1) for p in POLICIES)
                share = "  ".join(
                    "    -" if to_flash[p] is None else f"{to_flash[p]:5.1%}" for p in POLICIES[1:]
                )
                print(
                    f"{workload:<19} {scale:<6} {split:<6} {config.tiers[0].blocks:>7}"
                    f"   {writes['hbm-first']:>19} {writes['lachesis-det']:>7}"
                    f" {writes['lachesis']:>8}   {hf / det:6.2f}x {hf / lach:7.2f}x"
                    f" {det / lach:8.2f}x   {share:>27}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
