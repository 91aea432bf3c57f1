"""The contract model's own account of copies in lower tiers (spec/movement.md MV1-MV6).

Independent of :mod:`kvmodel.copies`: each tier's copies are a dict from key to the stamp of its
last use (a counter, not an ordered dict); liveness is recomputed from the contract model's
contexts (each open context's packed keys, re-packed) when a record needs it, not kept by
reference counts; the first copy to leave for room is found by a scan. What the engine's copy
store decides that the contract does not fix -- the order among Dead copies -- is admitted
whichever it is. The policy's :class:`~kvmodel.copies.CopyRules` (MV13) say which order and
store discipline apply; they are read here as data, and implemented here again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from checkers.invariants.shadow_terms import Packer, ShadowContext
from kvmodel.copies import DEFAULT_COPY_RULES, CopyRules
from kvmodel.ids import BlockKey, ContextId
from kvmodel.io.observations import CopyObs, DropCopyObs, EvictObs, LoadObs, Observation

__all__ = ["FollowsCopies", "ShadowCopies"]


class ShadowCopies:
    """Per tier, key -> the stamp of the copy's last use (written, renewed or read)."""

    def __init__(
        self, tiers: Sequence[str], exclusive: frozenset[str], rules: CopyRules = DEFAULT_COPY_RULES
    ) -> None:
        self.tiers = tuple(tiers)
        self.exclusive = exclusive
        self.rules = rules
        self.held: dict[str, dict[BlockKey, int]] = {t: {} for t in tiers}
        self._stamp = 0

    def count(self, tier: str) -> int:
        return len(self.held.get(tier, {}))

    def has(self, key: BlockKey, tier: str) -> bool:
        return key in self.held.get(tier, {})

    def source(self, key: BlockKey) -> str | None:
        """The first tier in configuration order with a copy of ``key`` (MV4)."""
        return next((t for t in self.tiers if key in self.held[t]), None)

    def use(self, key: BlockKey, tier: str) -> None:
        self._stamp += 1
        self.held[tier][key] = self._stamp

    def drop(self, key: BlockKey, tier: str) -> None:
        del self.held[tier][key]

    def first_out(
        self, tier: str, live: AbstractSet[BlockKey], keep: AbstractSet[BlockKey] = frozenset()
    ) -> set[BlockKey]:
        """The copies of ``tier`` outside ``keep`` admissible as the next to leave for room
        (MV5): every Dead one if there is one and the rules put them first (the contract does
        not order them), else the least recently used."""
        held = {k: n for k, n in self.held[tier].items() if k not in keep}
        if self.rules.order == "arc":  # (ARC's order is not re-derived here: MV17)
            return set(held)
        if self.rules.dead_first:
            dead = {k for k in held if k not in live}
            if dead:
                return dead
        return {min(held, key=held.__getitem__)} if held else set()

    def fits(self, tier: str, keys: AbstractSet[BlockKey], free: int) -> bool:
        """Can ``tier`` (``free`` slots) take the new ones of ``keys``, an offload batch, by
        dropping only copies outside it (MV13)?"""
        held = self.held[tier]
        short = len(held) + sum(1 for k in keys if k not in held) - free
        return short <= 0 or sum(1 for k in held if k not in keys) >= short

    def keys(self) -> list[tuple[BlockKey, str]]:
        return [(k, t) for t in self.tiers for k in self.held[t]]


class FollowsCopies:
    """The contract model's checks of the movement records it follows (spec/movement.md MV7),
    mixed into :class:`checkers.invariants.nversion.Shadow`, whose state they read."""

    copies: ShadowCopies
    problems: list[str]
    tier_index: dict[str, int]
    resident: set[BlockKey]
    ctxs: dict[ContextId, ShadowContext]
    packer: Packer

    #: the op's offload batches (MV13): tier -> (its keys, whether its new copies fit), found
    #: at the batch's first record; emptied at each inference
    _batches: dict[str, tuple[frozenset[BlockKey], bool]]
    #: the copies the inference used (loaded, offered), for a tail-first restamp (MV13)
    _used_now: list[tuple[int, BlockKey, str]]
    #: the inference's loads not yet stamped (:meth:`_flush`)
    _loads_now: list[tuple[int, BlockKey, str]]
    #: each open context's packed keys (:meth:`_live_keys`), with the context and the
    #: (packed, next uid, length) they were packed at
    _live_cache: dict[ContextId, tuple[ShadowContext, tuple[int, int, int], frozenset[BlockKey]]]

    def _free_slots(self, loose: Counter[str]) -> dict[str, int]:
        """Each tier's free slots by the model's own count: the Shadow's (it overrides this)."""
        raise NotImplementedError

    def _begin_copies(self) -> None:
        """An inference's records begin."""
        self._batches = {}
        self._used_now = []
        self._loads_now = []

    def _end_copies(self) -> None:
        """An inference committed: under ``tail_first`` every copy it used is used again, its
        head last (MV13)."""
        self._flush()
        if self.copies.rules.tail_first and self._used_now:
            for _, key, tier in sorted(self._used_now, key=lambda u: -u[0]):
                if self.copies.has(key, tier):
                    self.copies.use(key, tier)
        self._used_now = []

    def _batch(
        self, tier: str, todo: Sequence[Observation], loose: Counter[str]
    ) -> tuple[frozenset[BlockKey], bool]:
        """Under ``batch``: the op's offloads into ``tier`` (``todo`` begins at the batch's
        first record) and whether its new copies fit, found once."""
        got = self._batches.get(tier)
        if got is None:
            keys = frozenset(
                r.key
                for r in todo
                if isinstance(r, CopyObs) and r.reason == "offload" and r.tier == tier
            )
            free = self._free_slots(loose).get(tier)
            got = (keys, True if free is None else self.copies.fits(tier, keys, free))
            self._batches[tier] = got
        return got

    def _live_keys(self) -> set[BlockKey]:
        """The keys some open context has packed (MV6), from the model's own packing. Each
        context's keys are packed again only when its sequence or its packed count changed
        since the last call: every change to a sequence admits a message (a fresh uid) or
        drops one (a shorter sequence), so (packed, next uid, length) tells. (Packing every
        open context at every copy record was most of a tiered run's checking time:
        examples/offload_on_wait.py spent 34 of its 41 s here.)"""
        cache = self._live_cache
        out: set[BlockKey] = set()
        for c in self.ctxs.values():
            if not (c.open and c.packed):
                continue
            sig = (c.packed, c.next_uid, len(c.seq))
            hit = cache.get(c.id)
            if hit is None or hit[0] is not c or hit[1] != sig:
                keys = frozenset(k for k, _ in self.packer.pack(c.seq)[: c.packed] if k is not None)
                hit = cache[c.id] = (c, sig, keys)
            out |= hit[2]
        return out

    def _follow_copy(self, r: CopyObs, loose: Counter[str], todo: list[Observation]) -> None:
        """A demotion's or an offload's copy (MV2, MV3): where it may go, what it came to."""
        self._flush()
        bad = self.problems.append
        ti = self.tier_index
        if ti and (r.tier not in ti or ti[r.tier] <= ti.get(r.from_tier, len(ti))):
            bad(f"copy of {r.key} from tier {r.from_tier} into {r.tier}, not a tier below (MV2)")
            return
        if r.reason == "demote":
            nxt = todo[0] if todo else None
            if not (isinstance(nxt, EvictObs) and nxt.key == r.key):
                bad(f"demotion of {r.key} not followed by its eviction (MV2)")
        elif r.reason != "offload" or r.key not in self.resident:
            bad(f"copy of {r.key} ({r.reason}): an offload of a resident block is the only other")
        batch = self.copies.rules.batch and r.reason == "offload"
        fits = not batch or self._batch(r.tier, [r, *todo], loose)[1]
        if self.copies.has(r.key, r.tier):
            expect = "held"
        else:
            free = self._free_slots(loose).get(r.tier)
            if free is None:
                expect = r.result if r.result != "held" else "written"
            elif free <= 0 or not fits:
                expect = "no-room"
            else:
                expect = "written"
                if self.copies.count(r.tier) >= free:
                    bad(f"copy of {r.key} written into full tier {r.tier} (MV1)")
        if r.result != expect:
            bad(f"copy of {r.key} into {r.tier} logged {r.result}; it is {expect} (MV3)")
        if expect != "no-room":
            self.copies.use(r.key, r.tier)
            if r.reason == "offload":
                self._used_now.append((r.depth, r.key, r.tier))

    def _follow_load(self, r: LoadObs) -> None:
        """A load read its copy (the checks of which copy are the Shadow's); its use is
        stamped with the op's other loads, before the next copy or drop (:meth:`_flush`)."""
        if r.from_tier not in self.copies.exclusive:
            self._loads_now.append((r.depth, r.key, r.from_tier))

    def _flush(self) -> None:
        """The op's loads so far, used: in log order, or head last under ``tail_first``."""
        loads = self._loads_now
        if not loads:
            return
        if self.copies.rules.tail_first:
            loads = sorted(loads, key=lambda u: -u[0])
        for _, key, tier in loads:
            if self.copies.has(key, tier):
                self.copies.use(key, tier)
        self._used_now += self._loads_now
        self._loads_now = []

    def _follow_drop(
        self,
        r: DropCopyObs,
        loose: Counter[str] | None,
        loaded: tuple[BlockKey, str] | None,
        todo: Sequence[Observation] = (),
    ) -> None:
        """A copy leaving its tier (MV2, MV5); ``todo``: the records after it."""
        self._flush()
        bad = self.problems.append
        if not self.copies.has(r.key, r.tier):
            bad(f"dropped a copy of {r.key} from tier {r.tier}, which holds none")
            return
        if r.reason == "room":
            free = self._free_slots(loose or Counter()).get(r.tier)
            count = self.copies.count(r.tier)
            # a drop for a store's room (MV13) comes before the store's copies, which it keeps
            # from leaving; a drop for a primary that took a free slot (MV1) finds the copies
            # over the free space
            nxt = next((x for x in todo if isinstance(x, CopyObs)), None)
            keep: frozenset[BlockKey] = frozenset()
            pending = 1 if free is not None and count <= free else 0  # (the copy it makes room for)
            if (
                self.copies.rules.batch
                and nxt is not None
                and nxt.reason == "offload"
                and nxt.tier == r.tier
                and (free is None or count <= free)
            ):
                keep = self._batch(r.tier, todo, loose or Counter())[0]
                pending = sum(
                    1
                    for x in todo
                    if isinstance(x, CopyObs)
                    and x.reason == "offload"
                    and x.tier == r.tier
                    and not self.copies.has(x.key, r.tier)
                    and x.result == "written"
                )
            if free is not None and count + pending <= free:
                bad(f"dropped a copy of {r.key} from tier {r.tier} with room for it (MV1)")
            first = self.copies.first_out(r.tier, self._live_keys(), keep)
            if r.key not in first:
                bad(f"dropped the copy of {r.key} for room; first out is one of {sorted(first)}")
        elif r.reason == "load":
            if loaded != (r.key, r.tier) or r.tier not in self.copies.exclusive:
                bad(f"dropped the copy of {r.key} as loaded, not a load from an exclusive tier")
        elif r.reason == "reclaim":
            if r.key in self._live_keys():
                bad(f"reclaimed the copy of {r.key} in tier {r.tier}, which is live (MV6)")
        else:
            bad(f"dropped the copy of {r.key} for an unknown reason {r.reason!r}")
        self.copies.drop(r.key, r.tier)
