"""Mutants of the movement layer, written the way an outside author errs (spec/movement.md).

Three engines, each run under ``lru-demote`` (``engine_class``), whose
copy store gets one thing wrong that a real offloading tier's author could:

* :class:`DemoteIntoFullTier` -- a demotion that forgets the lower tier's own eviction: it writes
  the copy even when the tier's copies already fill its free space, so copies take space
  primaries need (``accounting``: ``copies(t) <= free(t)``, MV1);
* :class:`UncountedCopyWrite` -- a write-through that skips the P/E count: the copy is kept,
  the tier's write counter is not moved (``accounting``: writes = alloc + copy records; a worn
  tier's lifetime would read longer than it is, M5);
* :class:`LoadsFirstBlockOnly` -- an off-by-one in the load run: only the first leading miss with
  a copy is loaded, the rest recomputed although the tier holds them (``engine-contract``: the
  contract model knows the copies, MV4).

And one policy: :class:`TetherOffloadCodeReclaim`, KVTether-offload with its reclaim written as
code (``on_op`` returning the Dead blocks) instead of declared -- it frees dead primaries, but
only a declared ``Reclaim.DEAD`` drops Dead copies too (MV2), so dead KV stays in the lower tier
while the policy claims ``no-zombie-kv``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import ClassVar

from kvmodel._movement import Movement
from kvmodel.blocks import BlockSpec
from kvmodel.config import EngineConfig
from kvmodel.copies import CopyStore
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, BlockKey, TierName
from kvmodel.io.trace import Op
from kvmodel.policy import Policy, Reclaim
from kvmodel.view import ModelView
from policies.offload import KVTetherOffload, LRUDemote

__all__ = [
    "MOVEMENT_MUTANTS",
    "DemoteIntoFullTier",
    "LoadsFirstBlockOnly",
    "TetherOffloadCodeReclaim",
    "UncountedCopyWrite",
]


class _Overfull(CopyStore):
    def write(
        self, key: BlockKey, tier: TierName, keep: AbstractSet[BlockKey] = frozenset()
    ) -> bool | None:
        order = self.order[tier]
        if key in order:
            order.move_to_end(key)
            return None
        if not self.memory.free_count(tier):
            return False
        order[key] = None  # (no room made: the tier's own eviction forgotten)
        if not self.refs.live(key):
            self.dead[tier][key] = None
        self.at.setdefault(key, set()).add(tier)
        self.memory.write_copy(tier)
        return True

    def fit(self, tier: TierName) -> None:
        pass


class _Uncounted(CopyStore):
    def write(
        self, key: BlockKey, tier: TierName, keep: AbstractSet[BlockKey] = frozenset()
    ) -> bool | None:
        before = self.memory.writes[tier]
        made = super().write(key, tier, keep)
        self.memory.writes[tier] = before  # (the P/E count skipped)
        return made


class _FirstLoadOnly(Movement):
    def loadable(self, misses: Sequence[BlockSpec], prompt_full: int) -> int:
        return min(1, super().loadable(misses, prompt_full))  # (the run's length off by one)


class _MutantEngine(Engine):
    store: ClassVar[type[CopyStore]] = CopyStore

    def __init__(self, config: EngineConfig, policy: Policy, **kw: bool | None) -> None:
        super().__init__(config, policy, **kw)  # type: ignore[arg-type]
        m = self.movement
        if m is not None:
            old = m.copies
            m.copies = self.store(old.memory, old.refs, old.modes, old._dropped, old.rules)


class _OverfullEngine(_MutantEngine):
    store = _Overfull


class _UncountedEngine(_MutantEngine):
    store = _Uncounted


class _FirstLoadEngine(Engine):
    def __init__(self, config: EngineConfig, policy: Policy, **kw: bool | None) -> None:
        super().__init__(config, policy, **kw)  # type: ignore[arg-type]
        if self.movement is not None:
            self.movement = _FirstLoadOnly(self)


class DemoteIntoFullTier(LRUDemote):
    name: ClassVar[str] = "mutant-demote-into-full-tier"
    engine_class: ClassVar[type[Engine]] = _OverfullEngine


class UncountedCopyWrite(LRUDemote):
    name: ClassVar[str] = "mutant-uncounted-copy-write"
    engine_class: ClassVar[type[Engine]] = _UncountedEngine


class LoadsFirstBlockOnly(LRUDemote):
    name: ClassVar[str] = "mutant-loads-first-block-only"
    engine_class: ClassVar[type[Engine]] = _FirstLoadEngine


class TetherOffloadCodeReclaim(KVTetherOffload):
    name: ClassVar[str] = "mutant-tether-offload-code-reclaim"
    reclaim: ClassVar[Reclaim | None] = None

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        return view.dead()


#: import path -> the invariant or finding it must be caught breaking (merged into ``MUTANTS``)
MOVEMENT_MUTANTS: Mapping[str, str] = MappingProxyType(
    {
        "checkers.search.movement_mutants:DemoteIntoFullTier": "accounting",
        "checkers.search.movement_mutants:UncountedCopyWrite": "accounting",
        "checkers.search.movement_mutants:LoadsFirstBlockOnly": "engine-contract",
        "checkers.search.movement_mutants:TetherOffloadCodeReclaim": "no-zombie-kv",
    }
)
