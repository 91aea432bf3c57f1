"""An offload-on-tool-wait policy in a few lines, checked and priced (spec/movement.md).

"park while waiting": KVTether's order and eager reclaim of dead KV, its KV in HBM only, but a
victim whose context is waiting on its tool or sub-agent (Suspended) is demoted to the tier below
instead of dropped, and its context's next inference loads it back. Checked against every
invariant it claims, then priced against the same policy dropping its victims.
Run: python examples/offload_on_wait.py
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from checkers.invariants import INVARIANTS
from checkers.invariants.replay import check_ops
from kvmodel import BlockClass, EngineConfig, Placement, TierConfig, replay
from kvmodel.ids import TierName
from kvmodel.view import ModelView, NewBlock
from kvmodel.workloads import PRESETS, generate_agentic
from policies.kvtether import KVTether


class DropWhileWaiting(KVTether):
    name: ClassVar[str] = "drop-while-waiting"
    bypasses: ClassVar[frozenset[BlockClass] | None] = frozenset({BlockClass.TEMPORARY})

    def place(self, view: ModelView, block: NewBlock) -> Placement:  # HBM only
        return Placement(view.tier_names()[:1], bypass=block.state is BlockClass.TEMPORARY)


class ParkWhileWaiting(DropWhileWaiting):
    name: ClassVar[str] = "park-while-waiting"
    demotes: ClassVar[frozenset[BlockClass]] = frozenset({BlockClass.SUSPENDED})


if __name__ == "__main__":
    trace = generate_agentic(attrs.evolve(PRESETS["multi-agent"], sessions=6))
    config = EngineConfig(
        16, (TierConfig(TierName("hbm"), 300), TierConfig(TierName("cpu"), 1200, read_gbps=25))
    )
    run = check_ops(trace.ops, ParkWhileWaiting(), config, INVARIANTS)
    claimed = ParkWhileWaiting.claims | {"engine-contract"}
    print("claims kept:", not [v for v in run.violations if v.invariant in claimed])
    for policy in ("offload_on_wait:DropWhileWaiting", "offload_on_wait:ParkWhileWaiting"):
        s = replay(trace, policy, config).summary
        moved = s.movement or {}
        print(
            f"{s.policy:<19} recomputed {s.miss_tokens - moved.get('load_tokens', 0):>8}"
            f"  loaded {moved.get('load_tokens', 0):>7}  cpu writes {s.writes['cpu']:>6}"
        )
