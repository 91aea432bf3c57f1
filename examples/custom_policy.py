"""Define a new policy in a few lines, plug it in by import path, and replay a workload with it.

"dead-first LRU": reclaim nothing eagerly, but when room is needed evict dead KV first, then the
least recently used. The rank is declarative, so the same definition could be proved with Z3.
Run: python examples/custom_policy.py
"""

from __future__ import annotations

from typing import ClassVar

from kvmodel import BasePolicy, BlockClass, RankTerm, default_config, replay
from kvmodel.workloads import AgenticParams, generate_agentic


class DeadFirstLRU(BasePolicy):
    name: ClassVar[str] = "dead-first-lru"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("state", order=(BlockClass.DEAD,)),  # dead first; every other class after
        RankTerm("last_access"),
        RankTerm("depth", descending=True),
    )


if __name__ == "__main__":
    trace = generate_agentic(AgenticParams(seed=1, sessions=3, turns=2))
    config = default_config(hbm_blocks=256, hbf_blocks=512)
    for policy in ("lru", "custom_policy:DeadFirstLRU"):  # a name, or package.module:Name
        s = replay(trace, policy, config).summary
        print(
            f"{s.policy:<15} hit rate {s.token_hit_rate:.1%}  recomputed {s.miss_tokens:>7}"
            f"  evictions {sum(s.evictions.values()):>5}  dead at end {s.dead_resident_final}"
        )
