"""Copies of KV in other tiers: the movement layer's store (spec/movement.md MV1-MV6).

A copy is a keyed instance of a block's KV in a tier, outside every chain: written by a
*demotion* (the primary evicted, a copy kept below) or an *offload* (a copy written through while
the primary stays), read by a *load*, dropped for room, by a load from an exclusive tier, or by a
reclaim. Copies hold free space, never a slot (MV1): ``copies(t) <= free(t)`` at every point,
which :meth:`CopyStore.fit` restores after a primary allocation takes a free slot.

Which copies are live is decided by :class:`PackedRefs`: how many open contexts have packed each
key (``Context.packed``, MV6). The engine builds both only for a policy that moves KV, so a run
without moves does no work here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import ClassVar

import attrs

from kvmodel.blocks import BlockSpec
from kvmodel.errors import ConfigError
from kvmodel.ids import BlockKey, TierName
from kvmodel.memory import Memory

__all__ = [
    "ARC",
    "COPY_MODES",
    "DEFAULT_COPY_RULES",
    "VLLM_ARC_COPY_RULES",
    "VLLM_COPY_RULES",
    "CopyRules",
    "CopyStore",
    "DropReason",
    "PackedRefs",
]

#: what a load does to the copy it read, per tier (MV1)
COPY_MODES = frozenset({"inclusive", "exclusive"})


@attrs.frozen
class CopyRules:
    """How a policy's copies are kept (spec/movement.md MV5, MV13), declared as data so that the
    engine, the contract model and the oracle read one definition. The defaults are the
    engine's rules before MV13; the other values are what a real offloading tier does (vLLM's
    connector over its CPU LRU: ``CopyRules.VLLM``)."""

    #: a Dead copy leaves for room before any live one (MV5); False: the tier cannot tell
    #: (vLLM's CPU tier orders by use alone)
    dead_first: bool = True
    #: the copies one inference used (loaded, offered, written) are used head last: among
    #: them the deepest leaves first, as a request's whole prefix is stamped at its finish
    #: (vLLM's CPU LRU); False: in the order the engine used them
    tail_first: bool = False
    #: an inference's offloads are one store (MV13): the copies it offers are kept from
    #: leaving for its room, and if the tier cannot make room for every new one by dropping
    #: others, none is written (each ``no-room``); False: copy by copy (MV3)
    batch: bool = False
    #: what an inference offers to offload (MV2): ``"written"``, every block it wrote into its
    #: chain (loads included, renewed); ``"request"``, vLLM's chunk-level connector: the
    #: request's full blocks from its start when it loaded nothing (hits included), else the
    #: blocks after its loads
    offer: str = "written"
    #: which live copy leaves for room (MV5, MV17): ``"lru"``, the least recently used;
    #: ``"arc"``, adaptive replacement (vLLM's ``arc`` CPU policy: recent and frequent lists,
    #: ghosts of both, a target that adapts on ghost hits)
    order: str = "lru"

    OFFERS: ClassVar[frozenset[str]] = frozenset({"written", "request"})
    ORDERS: ClassVar[frozenset[str]] = frozenset({"lru", "arc"})

    def __attrs_post_init__(self) -> None:
        if self.offer not in self.OFFERS:
            raise ConfigError(f"CopyRules.offer must be one of {sorted(self.OFFERS)}")
        if self.order not in self.ORDERS:
            raise ConfigError(f"CopyRules.order must be one of {sorted(self.ORDERS)}")
        if self.order == "arc" and (self.dead_first or not self.batch):
            raise ConfigError(
                "CopyRules.order = 'arc' keeps no Dead-first order and stores batches"
            )


#: the rules of MV3 and MV5, what a policy that declares none keeps
DEFAULT_COPY_RULES = CopyRules()
#: vLLM 0.33's offloading connector over its CPU tier's LRU policy (spec/movement.md MV13)
VLLM_COPY_RULES = CopyRules(dead_first=False, tail_first=True, batch=True, offer="request")
#: ... and over its ARC policy (MV17)
VLLM_ARC_COPY_RULES = attrs.evolve(VLLM_COPY_RULES, order="arc")


class ARC:
    """One tier's adaptive replacement state (spec/movement.md MV17): ``t1`` the copies used
    once since they were written, ``t2`` those reused, each least recent first; ``b1`` and
    ``b2`` the keys lately dropped from each (ghosts, at most ``capacity`` each); ``target`` the
    share of the tier ``t1`` aims at, moved by ghost hits."""

    __slots__ = ("b1", "b2", "capacity", "t1", "t2", "target")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.target = 0.0
        self.t1: OrderedDict[BlockKey, None] = OrderedDict()
        self.t2: OrderedDict[BlockKey, None] = OrderedDict()
        self.b1: OrderedDict[BlockKey, None] = OrderedDict()
        self.b2: OrderedDict[BlockKey, None] = OrderedDict()

    def insert(self, key: BlockKey) -> None:
        """A new copy: most recent of ``t1``, no longer a ghost."""
        self.t1[key] = None
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def discard(self, key: BlockKey) -> None:
        """A copy gone other than for room (no ghost kept)."""
        if self.t1.pop(key, 0) == 0:
            self.t2.pop(key, None)

    def missed(self, keys: Sequence[BlockKey]) -> None:
        """A store is about to write ``keys`` (in chain order): each that is a ghost moves the
        target (a ``b1`` ghost toward recency, a ``b2`` one toward frequency), tail first."""
        for key in reversed(keys):
            if key in self.b1:
                step = max(1.0, len(self.b2) / len(self.b1))
                self.target = min(self.target + step, float(self.capacity))
                self.b1.move_to_end(key)
            elif key in self.b2:
                step = max(1.0, len(self.b1) / len(self.b2))
                self.target = max(self.target - step, 0.0)
                self.b2.move_to_end(key)

    def victims(self, n: int, keep: AbstractSet[BlockKey]) -> list[tuple[BlockKey, bool]]:
        """The ``n`` copies to drop for room, never one in ``keep``, each with whether it came
        from ``t1``: from ``t1`` while it holds at least the target, else from ``t2``, else
        ``t1`` again; each list scanned once, least recent first."""
        out: list[tuple[BlockKey, bool]] = []
        size1 = len(self.t1)
        one = (k for k in self.t1 if k not in keep)
        two = (k for k in self.t2 if k not in keep)
        for _ in range(n):
            key = next(one, None) if size1 >= int(self.target) else None
            from_t1 = key is not None
            if key is None:
                key = next(two, None)
            if key is None:
                key, from_t1 = next(one, None), True
            if key is None:
                break
            if from_t1:
                size1 -= 1
            out.append((key, from_t1))
        return out

    def dropped(self, gone: Sequence[tuple[BlockKey, bool]]) -> None:
        """``gone`` (from :meth:`victims`) left for room: each becomes a ghost of its list;
        each ghost list is then cut to ``capacity``, oldest first."""
        for key, from_t1 in gone:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
        for ghosts in (self.b1, self.b2):
            while len(ghosts) > self.capacity:
                ghosts.popitem(last=False)

    def finished(
        self,
        keys: Sequence[BlockKey],
        written: AbstractSet[BlockKey],
        reused: AbstractSet[BlockKey],
    ) -> None:
        """An inference that used ``keys`` (chain order) ended, its head the most recent: a copy
        it only wrote stays in its list, made most recent; one it reused (read, or found held)
        moves to ``t2``, most recent."""
        for key in reversed(keys):
            if key in written and key not in reused:
                lst = self.t1 if key in self.t1 else self.t2 if key in self.t2 else None
                if lst is not None:
                    lst.move_to_end(key)
            elif key in reused:
                if key in self.t1:
                    del self.t1[key]
                    self.t2[key] = None
                elif key in self.t2:
                    self.t2.move_to_end(key)


class DropReason:
    """Why a copy left its tier (MV2, MV8)."""

    ROOM = "room"  # a primary or another copy needed the space (MV3, MV1)
    LOAD = "load"  # read by a load from an exclusive tier (MV4)
    RECLAIM = "reclaim"  # the policy's reclaim (Reclaim.DEAD drops dead copies)


class PackedRefs:
    """How many open contexts have packed each key (MV6). ``on_change(key, live)`` is told when
    a key's count goes from 0 to 1 (live) or back to 0 (dead)."""

    __slots__ = ("counts", "on_change")

    def __init__(self) -> None:
        self.counts: dict[BlockKey, int] = {}
        self.on_change: Callable[[BlockKey, bool], None] | None = None

    def add(self, specs: Iterable[BlockSpec]) -> None:
        counts, told = self.counts, self.on_change
        for s in specs:
            k = s.key
            if k is None:
                continue
            n = counts.get(k, 0)
            counts[k] = n + 1
            if n == 0 and told is not None:
                told(k, True)

    def remove(self, specs: Iterable[BlockSpec]) -> None:
        counts, told = self.counts, self.on_change
        for s in specs:
            k = s.key
            if k is None:
                continue
            n = counts[k] - 1
            if n:
                counts[k] = n
            else:
                del counts[k]
                if told is not None:
                    told(k, False)

    def live(self, key: BlockKey) -> bool:
        return key in self.counts


#: who picks the copy that leaves ``tier`` for room among the admissible ones (MV5), given in
#: the store's order: the store takes the first; the oracle, the implementation's choice
Chooser = Callable[[TierName, Sequence[BlockKey]], BlockKey]


class CopyStore:
    """Per tier, the copies it holds in use order (least recently used first), and which of
    them are Dead, in the order they died (MV5), kept by ``rules``. ``dropped(key, tier,
    reason)`` is told of every drop (the engine logs it)."""

    def __init__(
        self,
        memory: Memory,
        refs: PackedRefs,
        modes: Mapping[TierName, str],
        dropped: Callable[[BlockKey, TierName, str], None],
        rules: CopyRules = DEFAULT_COPY_RULES,
    ) -> None:
        for tier, mode in modes.items():
            if mode not in COPY_MODES:
                raise ConfigError(
                    f"tier {tier!r}: copies must be one of {sorted(COPY_MODES)} (got {mode!r})"
                )
        self.memory = memory
        self.refs = refs
        self.modes = dict(modes)
        self.rules = rules
        self._dropped = dropped
        #: None: the first admissible copy leaves for room; else who picks (:data:`Chooser`)
        self.chooser: Chooser | None = None
        #: every copy of each tier, least recently used first
        self.order: dict[TierName, OrderedDict[BlockKey, None]] = {
            t: OrderedDict() for t in memory.names
        }
        #: the Dead ones among them, in the order they died
        self.dead: dict[TierName, OrderedDict[BlockKey, None]] = {
            t: OrderedDict() for t in memory.names
        }
        #: key -> the tiers holding a copy of it
        self.at: dict[BlockKey, set[TierName]] = {}
        #: under ``rules.order == "arc"``: each tier's adaptive replacement state (MV17)
        self.arc: dict[TierName, ARC] | None = (
            {t.name: ARC(t.blocks) for t in memory.tiers} if rules.order == "arc" else None
        )
        refs.on_change = self._liveness

    # ------------------------------------------------------------------ queries

    def count(self, tier: TierName) -> int:
        return len(self.order[tier])

    def __len__(self) -> int:
        return sum(len(o) for o in self.order.values())

    def holds(self, key: BlockKey | None) -> bool:
        return key is not None and key in self.at

    def source(self, key: BlockKey) -> TierName | None:
        """The tier a load of ``key`` reads from: the first in configuration order holding a
        copy (MV4)."""
        tiers = self.at.get(key)
        if not tiers:
            return None
        return next(t for t in self.memory.names if t in tiers)

    def dead_count(self) -> int:
        return sum(len(d) for d in self.dead.values())

    def dead_copies(self) -> list[tuple[BlockKey, TierName]]:
        """Every copy of a Dead key, tier by tier in configuration order (MV6)."""
        return [(k, t) for t in self.memory.names for k in self.dead[t]]

    def copies(self) -> list[tuple[BlockKey, TierName]]:
        """Every copy, tier by tier in configuration order, each tier's in use order."""
        return [(k, t) for t in self.memory.names for k in self.order[t]]

    # ------------------------------------------------------------------ changes

    def write(
        self, key: BlockKey, tier: TierName, keep: AbstractSet[BlockKey] = frozenset()
    ) -> bool | None:
        """A copy of ``key`` into ``tier`` (MV3): None if the tier already held one (renewed,
        nothing written), True if written (one block write, counted), False if the tier is full
        of primaries, or of copies in ``keep`` (an offload batch's, MV13): no copy made."""
        order = self.order[tier]
        if key in order:
            order.move_to_end(key)
            return None
        if len(order) >= self.memory.free_count(tier):
            if len(order) <= len(keep) and not any(k not in keep for k in order):
                return False
            self._drop_first(tier, keep)
        order[key] = None
        if not self.refs.live(key):
            self.dead[tier][key] = None
        self.at.setdefault(key, set()).add(tier)
        self.memory.write_copy(tier)
        if self.arc is not None:
            self.arc[tier].insert(key)
        return True

    def make_room(self, tier: TierName, n: int, keep: AbstractSet[BlockKey]) -> None:
        """Drop ``n`` copies of ``tier`` for room, none in ``keep`` (a store's, MV13), chosen
        together as the order chooses them (MV5, MV17)."""
        if self.arc is None:
            for _ in range(n):
                self._drop_first(tier, keep)
            return
        arc = self.arc[tier]
        gone = arc.victims(n, keep)
        if self.chooser is not None:  # (the order is total: each pick has one admissible)
            gone = [(self.chooser(tier, [k]), t1) for k, t1 in gone]
        arc.dropped(gone)
        for key, _ in gone:
            self.drop(key, tier, DropReason.ROOM)

    def missed(self, tier: TierName, keys: Sequence[BlockKey]) -> None:
        """A store into ``tier`` is about to write ``keys`` (ARC's ghost hits, MV17)."""
        if self.arc is not None:
            self.arc[tier].missed(keys)

    def finished(
        self,
        tier: TierName,
        keys: Sequence[BlockKey],
        written: AbstractSet[BlockKey],
        reused: AbstractSet[BlockKey],
    ) -> None:
        """An inference that used ``keys`` of ``tier`` ended (ARC's frequency, MV17)."""
        if self.arc is not None:
            self.arc[tier].finished(keys, written, reused)

    def room(self, tier: TierName, new: int, keep: AbstractSet[BlockKey]) -> bool:
        """Can ``tier`` take ``new`` more copies, dropping only copies outside ``keep`` (an
        offload batch's test, MV13)?"""
        order = self.order[tier]
        short = len(order) + new - self.memory.free_count(tier)
        if short <= 0:
            return True
        if len(order) - short >= len(keep):  # (enough copies outside keep, whatever keep is)
            return True
        return sum(1 for k in order if k not in keep) >= short

    def read(self, key: BlockKey, tier: TierName) -> None:
        """A load read ``key``'s copy in ``tier``: used now, or dropped from an exclusive tier."""
        if self.modes.get(tier, "inclusive") == "exclusive":
            self.drop(key, tier, DropReason.LOAD)
        else:
            self.order[tier].move_to_end(key)

    def use(self, used: Iterable[tuple[BlockKey, TierName]]) -> None:
        """``used`` (copies still held) used now, in that order: the last most recent."""
        for key, tier in used:
            order = self.order[tier]
            if key in order:
                order.move_to_end(key)

    def fit(self, tier: TierName) -> None:
        """After a primary took a free slot of ``tier``: drop copies until they fit (MV1)."""
        while len(self.order[tier]) > self.memory.free_count(tier):
            self._drop_first(tier)

    def drop(self, key: BlockKey, tier: TierName, reason: str) -> None:
        if self.arc is not None and key in self.order[tier]:
            self.arc[tier].discard(key)  # (a no-op for one ARC already made a ghost)
        del self.order[tier][key]
        self.dead[tier].pop(key, None)
        tiers = self.at[key]
        tiers.discard(tier)
        if not tiers:
            del self.at[key]
        self._dropped(key, tier, reason)

    def drop_dead(self) -> int:
        """Drop every Dead copy (the policy's ``Reclaim.DEAD``); how many."""
        gone = self.dead_copies()
        for k, t in gone:
            self.drop(k, t, DropReason.RECLAIM)
        return len(gone)

    def _drop_first(self, tier: TierName, keep: AbstractSet[BlockKey] = frozenset()) -> None:
        """Room in ``tier``: its first Dead copy (under ``rules.dead_first``), else its least
        recently used (MV5), never one in ``keep``; the :attr:`chooser`'s pick among the
        admissible ones when it has one."""
        if self.arc is not None:
            self.make_room(tier, 1, keep)
            return
        dead = self.dead[tier] if self.rules.dead_first else None
        if self.chooser is None and not keep:  # (the plain case: O(1))
            key = next(iter(dead if dead else self.order[tier]))
        else:
            pool = [k for k in dead if k not in keep] if dead else []
            pool = pool or [next(k for k in self.order[tier] if k not in keep)]
            key = pool[0] if self.chooser is None else self.chooser(tier, pool)
        self.drop(key, tier, DropReason.ROOM)

    def _liveness(self, key: BlockKey, live: bool) -> None:
        tiers = self.at.get(key)
        if not tiers:
            return
        for t in tiers:
            if live:
                del self.dead[t][key]
            else:
                self.dead[t][key] = None
