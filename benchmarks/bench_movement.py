"""Does moving KV down while an agent waits pay, and at what flash wear (spec/movement.md)?

On agent workloads with tool waits, each policy's cost against LRU dropping on eviction and
against its own family's drop baseline, on two
tiers: HBM of C x the workload's footprint (spec E8) and below it a flash tier (HBF: 100,000
P/E cycles, write amplification 1.02, 2 MiB blocks) of ``--below`` x the footprint, read at
``--read-gbps``. Every policy keeps its primaries in HBM, so the only use of the flash tier is
for copies:

* ``lru-drop`` / ``kvtether-drop`` -- LRU and KVTether on HBM alone (no copies: the baselines);
* ``lru-offload`` -- write-through of every block (vLLM's offloading connector, LMCache);
* ``lru-demote`` -- write-back: a live victim copied down as it is evicted (HiCache);
* ``kvtether-offload`` -- KVTether demoting only Suspended victims (a context waiting on its
  tool or sub-agent), dropping Dead KV in every tier;
* ``belady`` -- the offline reference: HBM and HBF as one pool read in place (every block kept
  anywhere is reusable, at the price of a hit), evicting the block used furthest in the future.
  What any policy that keeps KV in these two tiers could reuse at best, if Belady's order is
  the best one (it is not proved so here: a reference, not a bound);
* the **lower bound**: the same workload with unbounded memory (nothing evicted or refused, so
  every reuse is a hit). No policy on any memory costs less: each block is computed at least
  once, a hit or a load is priced as cached input (spec MV4) and a refusal as a full recompute
  (E3). Each row says how far above it the policy is.

Workloads: the ``mini-swe-agent-fit`` preset and the real mini-swe-agent validation half
resampled into its tenancy (spec E9: real beats fitted), both with decode time as a stated
assumption (``--decode-tpot``, E9 "decode time"), and the hand-set ``multi-agent`` preset. Per
cell: cost against the drop baseline of the same family, loaded tokens, the flash tier's writes
and its projected lifetime (M6). Asserts nothing.

    python benchmarks/bench_movement.py [--capacity 0.25,0.5] [--below 1.0] [--sessions 24]
        [--seed 0] [--decode-tpot 0.01] [--read-gbps 25] [--quick]

``--quick``: 4 sessions, one capacity, the multi-agent preset only (what the test runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import ClassVar

import attrs

from kvmodel.config import EngineConfig, default_config
from kvmodel.io.trace import Trace
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Policy, resolve_policy
from kvmodel.replay import replay
from kvmodel.studies.compare import footprint
from kvmodel.studies.metrics import compute_metrics
from kvmodel.studies.validation import family_workloads
from kvmodel.workloads import PRESETS, generate_agentic
from policies.offload import KVTetherOffload, LRUOffload


class LRUDrop(LRUOffload):
    """LRU with its primaries in the first tier and no copies: drop on eviction."""

    name: ClassVar[str] = "lru-drop"
    offloads: ClassVar[frozenset[BlockClass]] = frozenset()


class KVTetherDrop(KVTetherOffload):
    """KVTether with its primaries in the first tier and no copies: drop on eviction."""

    name: ClassVar[str] = "kvtether-drop"
    demotes: ClassVar[frozenset[BlockClass]] = frozenset()


#: (policy, the drop baseline it is measured against)
POLICIES: tuple[tuple[str, str], ...] = (
    ("lru-drop", "lru-drop"),
    ("lru-offload", "lru-drop"),
    ("lru-demote", "lru-drop"),
    ("kvtether-drop", "lru-drop"),
    ("kvtether-offload", "kvtether-drop"),
    ("belady", "lru-drop"),
)


def _policy(name: str) -> Policy:
    if name == "lru-drop":
        return LRUDrop()
    if name == "kvtether-drop":
        return KVTetherDrop()
    return resolve_policy(name)


def two_tiers(hbm: int, below: int, read_gbps: float) -> EngineConfig:
    """The default two tiers (HBM over HBF with Lachesis's endurance), sized, HBF read at
    ``read_gbps``."""
    cfg = default_config(hbm_blocks=hbm, hbf_blocks=below)
    hbm_tier, hbf = cfg.tiers
    return attrs.evolve(cfg, tiers=(hbm_tier, attrs.evolve(hbf, read_gbps=read_gbps)))


def cells(
    name: str, trace: Trace, capacities: list[float], below: float, read_gbps: float
) -> list[str]:
    foot = footprint(trace)
    out = []
    for c in capacities:
        cfg = two_tiers(max(1, round(c * foot)), max(1, round(below * foot)), read_gbps)
        cost: dict[str, float] = {}
        rows = []
        bound = 0.0
        for p, base in POLICIES:
            r = replay(trace, _policy(p), cfg)
            m = compute_metrics(r)
            cost[p] = m.cost_usd
            if p == "lru-drop":  # (unbounded: more slots than any run writes blocks)
                ample = two_tiers(r.summary.writes["hbm"] + 1, 1, read_gbps)
                bound = compute_metrics(replay(trace, _policy(p), ample)).cost_usd
            mv = m.movement or {}
            years = r.summary.device_years.get("hbf")
            rows.append(
                f"  {p:<17} {100 * (m.cost_usd / cost['lru-drop'] - 1):+7.1f}% vs lru-drop "
                f"{100 * (m.cost_usd / cost[base] - 1):+7.1f}% vs {base:<14} "
                f"loaded {mv.get('load_tokens', 0):>10,} tok  "
                f"load {mv.get('load_s_total', 0.0):7.2f} s  "
                f"hbf writes {r.summary.writes['hbf']:>8,}  "
                f"hbf life {'-' if years is None else f'{years:,.1f} y':>10}  "
                f"rejected {r.summary.rejected:>4}  "
                f"{100 * (m.cost_usd / bound - 1):+6.1f}% over the bound"
            )
        out.append(f"{name}, HBM {c:g} x footprint {foot:,} blocks, HBF {below:g} x:")
        out += rows
        out.append(
            f"  lower bound (unbounded memory, every reuse a hit): "
            f"{100 * (bound / cost['lru-drop'] - 1):+.1f}% vs lru-drop"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--capacity", default="0.25,0.5")
    ap.add_argument("--below", type=float, default=1.0)
    ap.add_argument("--sessions", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--decode-tpot", type=float, default=0.01)
    ap.add_argument("--read-gbps", type=float, default=25.0)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    caps = [float(x) for x in a.capacity.split(",")]
    sessions = 4 if a.quick else a.sessions
    if a.quick:
        caps = caps[:1]
    t0 = time.perf_counter()
    workloads: dict[str, Trace] = {
        "multi-agent": generate_agentic(
            attrs.evolve(PRESETS["multi-agent"], sessions=sessions, seed=a.seed)
        )
    }
    if not a.quick:
        fam = family_workloads(
            "mini-swe-agent", sessions=sessions, seed=a.seed, decode_tpot=a.decode_tpot
        )
        workloads["mini-swe-agent-fit (decode timed)"] = fam["preset"]
        workloads["mini-swe-agent real validation, resampled (decode timed)"] = fam[
            "validation, resampled"
        ]
    for name, trace in workloads.items():
        print("\n".join(cells(name, trace, caps, a.below, a.read_gbps)))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
