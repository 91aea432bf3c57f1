"""Which part of KVTether carries its gain, per workload (spec/policies.md, kvtether, "MRU
within Suspended"): the task cost of KVTether and of the policy-space points that change one
rule -- the order within Suspended (MRU, LRU, none) and the reclaim (eager, none = dead-first)
-- against LRU, with Belady's beside, on one tier of F x the workload's footprint (spec E8).
Also prints how the workload's contexts wait, which decides whether MRU within Suspended is
the right direction: the gap from an inference's end to its context's next inference, split by
whether the context was waiting on a tool or on the user. Asserts nothing.

    python benchmarks/bench_kvtether_ablation.py [--presets tau-bench-fit,mini-swe-agent-fit]
        [--capacity 0.25,0.5] [--sessions 24] [--seed 0]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import attrs
import numpy as np

from kvmodel.io.trace import Append, Infer, Trace
from kvmodel.messages import Role
from kvmodel.policy import Reclaim
from kvmodel.replay import replay
from kvmodel.studies.compare import capacity_config
from kvmodel.studies.metrics import compute_metrics
from kvmodel.workloads import PRESETS, generate_agentic
from policies.space import Candidate

#: (label, policy): KVTether is the space's default point; each variant changes one rule
_K = Candidate()
VARIANTS: tuple[tuple[str, str], ...] = (
    ("kvtether (susp MRU, eager)", "kvtether"),
    ("susp LRU", attrs.evolve(_K, suspended="lru").path),
    ("susp none (plain LRU)", attrs.evolve(_K, suspended="none").path),
    ("dead-first (reclaim none)", attrs.evolve(_K, reclaim=Reclaim.NONE).path),
    ("dead-first + susp LRU", attrs.evolve(_K, reclaim=Reclaim.NONE, suspended="lru").path),
    ("belady (offline)", "belady"),
    ("mori", "mori"),
)


def waits(trace: Trace) -> tuple[list[float], list[float]]:
    """The gaps from each inference's end to its context's next inference, split into waits on
    a tool (the first message appended in between is a tool's) and waits on the user."""
    end: dict[str, float] = {}
    first_role: dict[str, Role | None] = {}
    tool: list[float] = []
    user: list[float] = []
    for op in trace.ops:
        if isinstance(op, Append) and op.ctx in end and first_role.get(op.ctx) is None:
            first_role[op.ctx] = op.messages[0].role if op.messages else None
        elif isinstance(op, Infer):
            if op.ctx in end:
                gap = op.t - end[op.ctx]
                (tool if first_role.get(op.ctx) == Role.TOOL else user).append(gap)
            end[op.ctx] = op.t + op.duration
            first_role[op.ctx] = None
    return tool, user


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="tau-bench-fit,mini-swe-agent-fit,multi-agent")
    ap.add_argument("--capacity", default="0.25,0.5", help="fractions of the footprint (E8)")
    ap.add_argument("--sessions", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    for name in a.presets.split(","):
        params = attrs.evolve(PRESETS[name], sessions=a.sessions, seed=a.seed)
        trace = generate_agentic(params)
        tool, user = waits(trace)
        n = len(tool) + len(user)
        med = {k: float(np.median(v)) if v else 0.0 for k, v in (("tool", tool), ("user", user))}
        print(
            f"{name}: {n} waits, {len(user) / max(n, 1):.0%} on the user (median "
            f"{med['user']:.0f} s), the rest on tools (median {med['tool']:.1f} s)"
        )
        for f in (float(x) for x in a.capacity.split(",")):
            config, (_, foot, blocks) = capacity_config(trace, f)
            lru = compute_metrics(replay(trace, "lru", config)).cost_usd
            print(f"  {f:g}x footprint ({blocks:,} of {foot:,} blocks), task cost vs lru:")
            for label, policy in VARIANTS:
                m = compute_metrics(replay(trace, policy, config))
                print(f"    {label:<28}{m.cost_usd / lru - 1:+7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
