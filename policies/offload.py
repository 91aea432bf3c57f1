"""Policies that move KV between tiers (spec/movement.md; spec/policies.md §movement policies).

Each keeps its primaries in the first tier and keeps copies in the next one down:

* ``lru-offload`` -- vLLM's offloading connector and LMCache as they run by default: LRU in the
  first tier, every block an inference writes into its chain copied through to the next tier as
  the inference commits; a later miss loads it back (the copy tier orders its copies LRU, MV5).
* ``lru-demote`` -- write-back instead of write-through (SGLang HiCache's ``write_back``): LRU,
  and a live victim is copied down as it is evicted; nothing is written below until then.
* ``vllm-offload`` -- vLLM 0.33's offloading connector over its CPU tier's LRU policy, under
  vLLM's GPU prefix cache: the GPU evicts as ``vllm-prefix``; every request offers its blocks to
  the CPU tier as one store (its whole prefix when it loaded nothing, else what it computed), the
  CPU tier orders its copies by the last request that used them, a request's head last, and
  cannot tell Dead KV from live (spec/movement.md MV13, :data:`kvmodel.copies.VLLM_COPY_RULES`).
* ``vllm-offload-arc`` -- the same over vLLM's ``arc`` CPU policy: the CPU tier's copies leave
  by adaptive replacement (MV17, :data:`kvmodel.copies.VLLM_ARC_COPY_RULES`).
* ``kvtether-offload`` -- KVTether, moving by lifecycle: Dead KV dropped from every tier (its
  declared reclaim drops Dead copies too), a Suspended victim -- a context waiting on its tool or
  sub-agent -- demoted and loaded back when it returns, Active victims dropped, Temporary KV
  bypassed and so never offloaded.
"""

from __future__ import annotations

from typing import ClassVar

from kvmodel.copies import VLLM_ARC_COPY_RULES, VLLM_COPY_RULES, CopyRules
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Placement
from kvmodel.view import ModelView, NewBlock
from policies.kvtether import KVTether
from policies.lru import LRU
from policies.vllm_prefix import VLLMPrefix

__all__ = ["KVTetherOffload", "LRUDemote", "LRUOffload", "VLLMOffload", "VLLMOffloadARC"]

_C = BlockClass
_LIVE = frozenset({_C.ACTIVE, _C.SUSPENDED, _C.PINNED})


class LRUOffload(LRU):
    name: ClassVar[str] = "lru-offload"
    compares_times_only: ClassVar[bool] = True
    bypasses: ClassVar[frozenset[BlockClass] | None] = frozenset()
    #: every live block that joins a chain is written through at its inference's commit
    offloads: ClassVar[frozenset[BlockClass]] = _LIVE

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return Placement(view.tier_names()[:1])


class LRUDemote(LRUOffload):
    name: ClassVar[str] = "lru-demote"
    offloads: ClassVar[frozenset[BlockClass]] = frozenset()
    #: a live victim is copied down as it is evicted (Pinned KV is never a victim, M4.1)
    demotes: ClassVar[frozenset[BlockClass]] = frozenset({_C.ACTIVE, _C.SUSPENDED})


class KVTetherOffload(KVTether):
    name: ClassVar[str] = "kvtether-offload"
    #: a waiting context's KV goes down as it is evicted; it comes back by a load when the
    #: context's next inference asks for it (MV4)
    demotes: ClassVar[frozenset[BlockClass]] = frozenset({_C.SUSPENDED})
    bypasses: ClassVar[frozenset[BlockClass] | None] = frozenset({_C.TEMPORARY})

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return Placement(view.tier_names()[:1], bypass=block.state is _C.TEMPORARY)


class VLLMOffload(VLLMPrefix):
    name: ClassVar[str] = "vllm-offload"
    compares_times_only: ClassVar[bool] = True
    #: the connector stores whatever the request computed, whatever its class: it cannot tell
    offloads: ClassVar[frozenset[BlockClass]] = frozenset(BlockClass)
    copy_rules: ClassVar[CopyRules] = VLLM_COPY_RULES

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return Placement(view.tier_names()[:1])


class VLLMOffloadARC(VLLMOffload):
    name: ClassVar[str] = "vllm-offload-arc"
    copy_rules: ClassVar[CopyRules] = VLLM_ARC_COPY_RULES
