"""KVTether: lifecycle states drive bypass, reclaim and eviction (spec/policies.md §kvtether).

* placement: a block whose class is Temporary bypasses the reuse store (it serves its one
  inference, is never indexed, and is freed after it); everything else goes HBM-first;
* reclaim: after every op, every dead block is freed (eager no-zombie-KV);
* eviction rank: Dead < Expired < Temporary < Suspended < Active (Pinned is never a candidate);
  within Suspended the most recently suspended first (MRU: the freshest waiter is the furthest
  from reuse); otherwise least recently used; ties tail-first.
"""

from __future__ import annotations

from typing import ClassVar

from kvmodel.lifecycle import BlockClass
from kvmodel.policy import STRUCTURAL_CLAIMS, BasePolicy, RankTerm, Reclaim

__all__ = ["KVTether"]

_C = BlockClass


class KVTether(BasePolicy):
    name: ClassVar[str] = "kvtether"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("state", order=(_C.DEAD, _C.EXPIRED, _C.TEMPORARY, _C.SUSPENDED, _C.ACTIVE)),
        RankTerm("suspend_time", descending=True, only=frozenset({_C.SUSPENDED})),
        RankTerm("last_access"),
        RankTerm("depth", descending=True),
    )
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS | frozenset(
        {
            "free-at-boundary",
            "no-live-eviction-before-dead-reclaim",
            "no-zombie-kv",
            "prefix-closed-residency",
            "reclaim-dead-only",
            "state-priority-eviction",
            "suspended-mru",
            "temporary-bypass",
        }
    )

    #: place (BasePolicy's: every tier, the declared bypass) reads the block's class only
    compares_times_only: ClassVar[bool] = True
    #: Temporary KV serves its one inference and never enters the reuse store: declared, and
    #: BasePolicy.place bypasses exactly what it declares (spec PP2)
    bypasses: ClassVar[frozenset[BlockClass] | None] = frozenset({BlockClass.TEMPORARY})

    #: after every op, every Dead block (BasePolicy.on_op applies the rule)
    reclaim: ClassVar[Reclaim | None] = Reclaim.DEAD
