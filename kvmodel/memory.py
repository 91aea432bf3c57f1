"""N-tier memory: free lists, write accounting and endurance (spec §memory M1-M7).

Each tier is a pool of equal-size block slots with its own free list. ``alloc(tier)`` takes a slot
and counts one block write to that tier (every allocation writes the block's KV, spec M3);
``free(block)`` returns it. A tier may declare endurance (P/E cycles and write amplification), in
which case its projected lifetime under the observed write rate is (spec M6)::

                     pe_cycles * capacity_bytes / write_amplification
    device_years = -----------------------------------------------------
                    (bytes written / seconds observed) * SECONDS_PER_YEAR
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet

import attrs

from kvmodel.errors import ConfigError, InternalError
from kvmodel.ids import BlockId, TierName

__all__ = [
    "MAX_TIER_BLOCKS",
    "SECONDS_PER_YEAR",
    "Memory",
    "ModelShape",
    "TierConfig",
    "device_years",
]

SECONDS_PER_YEAR = 365.25 * 24 * 3600


@attrs.frozen(slots=True)
class ModelShape:
    """The numbers that fix the size of one token's KV (spec M2).

    ``bytes_per_block = layers * kv_heads * head_dim * dtype_bytes * 2 (K and V) * block_size``.
    """

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    def bytes_per_token(self) -> int:
        return self.layers * self.kv_heads * self.head_dim * self.dtype_bytes * 2

    def bytes_per_block(self, block_size: int) -> int:
        return self.bytes_per_token() * block_size


#: the largest tier, in blocks (spec M1): 2**40, a thousand times a petabyte of 1 MB blocks.
#: Slots are created as they are used, so a tier this large costs nothing until it is; the
#: bound keeps sizes, counts and the figures computed from them plain integers
MAX_TIER_BLOCKS = 2**40


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"tier field {attr.name!r} must be an integer >= 1 (got {value!r})")
    if value > MAX_TIER_BLOCKS:
        raise ConfigError(
            f"tier field {attr.name!r} must be at most {MAX_TIER_BLOCKS:,} (2**40) blocks "
            f"(got {value:,})"
        )


@attrs.frozen(slots=True)
class TierConfig:
    """One memory tier. ``pe_cycles`` set means the tier wears out (flash, spec M5)."""

    name: TierName
    blocks: int = attrs.field(validator=_positive)
    bytes_per_block: int | None = None
    pe_cycles: int | None = None
    write_amplification: float = 1.0
    read_gbps: float | None = None
    write_gbps: float | None = None
    #: what a load does to the copy it read (spec/movement.md MV1): kept, or moved up
    copies: str = "inclusive"
    #: a copy tier: it holds copies only, never a primary (spec/movement.md MV15) -- vLLM's
    #: CPU pool, SGLang's host pool: no placement lands there and admission does not count it
    copies_only: bool = False

    def __attrs_post_init__(self) -> None:
        if self.copies not in ("inclusive", "exclusive"):
            raise ConfigError(
                f"tier {self.name!r}: copies must be 'inclusive' or 'exclusive' "
                f"(got {self.copies!r})"
            )
        if self.pe_cycles is not None and self.pe_cycles < 1:
            raise ConfigError(f"tier {self.name!r}: pe_cycles must be >= 1 (got {self.pe_cycles})")
        if self.write_amplification < 1.0:
            raise ConfigError(
                f"tier {self.name!r}: write_amplification must be >= 1.0 "
                f"(got {self.write_amplification})"
            )
        if self.bytes_per_block is not None and self.bytes_per_block < 1:
            raise ConfigError(
                f"tier {self.name!r}: bytes_per_block must be >= 1 (got {self.bytes_per_block})"
            )


def device_years(
    *,
    pe_cycles: int,
    capacity_bytes: int,
    write_amplification: float,
    bytes_written: int,
    seconds: float,
) -> float | None:
    """Projected lifetime in years; ``None`` when no write (or no time) was observed (spec M6)."""
    if bytes_written <= 0 or seconds <= 0:
        return None
    budget = pe_cycles * capacity_bytes / write_amplification
    rate = bytes_written / seconds
    return budget / rate / SECONDS_PER_YEAR


class Memory:
    """Free lists and counters for every tier. Slot ids are global: tier i owns a contiguous range.

    Allocation takes the lowest free slot id first is *not* promised; it takes the front of a FIFO
    free list, which is deterministic and what paged engines do. The list is kept lazily: a
    tier's never-used slots are a counter (they stand at the list's front, in order, as if the
    list had been filled at start) and only slots once freed are held, in the order they were
    freed. So a tier costs memory and time for the slots used, not for its size (spec M1).
    """

    def __init__(self, tiers: Sequence[TierConfig]) -> None:
        if not tiers:
            raise ConfigError("at least one memory tier is required")
        names = [t.name for t in tiers]
        if len(set(names)) != len(names):
            raise ConfigError(f"tier names must be unique (got {names})")
        self.tiers: tuple[TierConfig, ...] = tuple(tiers)
        #: the tiers' names in configuration order (fastest first), fixed at construction
        self.names: tuple[TierName, ...] = tuple(names)
        self._by_name: dict[TierName, TierConfig] = {t.name: t for t in tiers}
        #: per tier: the next never-used slot (up to the tier's end), and the slots freed since
        self._fresh: dict[TierName, int] = {}
        self._free: dict[TierName, deque[BlockId]] = {}
        self._end: dict[TierName, int] = {}
        starts = []
        base = 0
        for t in tiers:
            starts.append(base)
            self._fresh[t.name] = base
            self._free[t.name] = deque()
            base += t.blocks
            self._end[t.name] = base
        self._starts: tuple[int, ...] = tuple(starts)
        self._used: set[BlockId] = set()
        self.writes: dict[TierName, int] = {t.name: 0 for t in tiers}

    def config(self, tier: TierName) -> TierConfig:
        return self._by_name[tier]

    def has_tier(self, tier: str) -> bool:
        return tier in self._by_name

    def tier_of(self, block: BlockId) -> TierName:
        return self.names[bisect_right(self._starts, block) - 1]

    def free_count(self, tier: TierName) -> int:
        return self._end[tier] - self._fresh[tier] + len(self._free[tier])

    def free_blocks(self, tier: TierName) -> tuple[BlockId, ...]:
        """The free slots of ``tier`` in the order :meth:`alloc` takes them (as many as the
        tier has free: for small tiers, the symbolic search's state)."""
        fresh = (BlockId(b) for b in range(self._fresh[tier], self._end[tier]))
        return (*fresh, *self._free[tier])

    def used_count(self, tier: TierName) -> int:
        return self.config(tier).blocks - self.free_count(tier)

    def total_free(self) -> int:
        """Free slots a primary may take: in every tier but the copy tiers (MV15)."""
        return sum(self.free_count(t.name) for t in self.tiers if not t.copies_only)

    def alloc(self, tier: TierName) -> BlockId:
        """Take a free slot of ``tier`` and count one block write (spec M3)."""
        fresh = self._fresh[tier]
        if fresh < self._end[tier]:
            self._fresh[tier] = fresh + 1
            b = BlockId(fresh)
        else:
            free = self._free[tier]
            if not free:
                raise InternalError(f"alloc on full tier {tier!r}")
            b = free.popleft()
        if b in self._used:
            raise InternalError(f"double allocation of block {b}")
        self._used.add(b)
        self.writes[tier] += 1
        return b

    def reuse(self, block: BlockId) -> BlockId:
        """Write the slot of a block just evicted for room, without freeing it first: what
        :meth:`free` then :meth:`alloc` would do when the tier had no other free slot (the only
        case in which the engine evicts for room, M4), one write counted (spec M3)."""
        if block not in self._used:
            raise InternalError(f"reuse of free block {block}")
        self.writes[self.tier_of(block)] += 1
        return block

    def write_copy(self, tier: TierName) -> None:
        """Count one block write to ``tier`` for a copy moved into it (spec/movement.md MV3):
        a copy holds free space, not a slot, so no slot is taken."""
        self.writes[tier] += 1

    def rewrite(self, block: BlockId) -> None:
        """Write a resident block again in place (a recomputed orphan, spec B6.3)."""
        if block not in self._used:
            raise InternalError(f"rewrite of free block {block}")
        self.writes[self.tier_of(block)] += 1

    def free(self, block: BlockId) -> None:
        if block not in self._used:
            raise InternalError(f"double free of block {block}")
        self._used.discard(block)
        self._free[self.tier_of(block)].append(block)

    def is_used(self, block: BlockId) -> bool:
        return block in self._used

    def accounting(self) -> Mapping[TierName, tuple[int, int, int]]:
        """Per tier (free, used, capacity), recomputed from the slots (spec I-accounting)."""
        used = self.count_by_tier(self._used)
        return {t.name: (self.free_count(t.name), used[t.name], t.blocks) for t in self.tiers}

    def count_by_tier(self, blocks: Collection[BlockId]) -> dict[TierName, int]:
        """How many of ``blocks`` each tier's slot range holds (by :meth:`tier_of`, every tier
        named). With one tier, every slot id is that tier's: counted without a lookup each."""
        if len(self.names) == 1:
            return {self.names[0]: len(blocks)}
        used: dict[TierName, int] = dict.fromkeys(self.names, 0)
        for b in blocks:
            used[self.tier_of(b)] += 1
        return used

    def used_slots(self) -> AbstractSet[BlockId]:
        """The slots in use (a read-only view: spec I-accounting compares it with the resident
        blocks)."""
        return self._used

    def device_years(self, tier: TierName, seconds: float) -> float | None:
        c = self.config(tier)
        if c.pe_cycles is None or c.bytes_per_block is None:
            return None
        return device_years(
            pe_cycles=c.pe_cycles,
            capacity_bytes=c.blocks * c.bytes_per_block,
            write_amplification=c.write_amplification,
            bytes_written=self.writes[tier] * c.bytes_per_block,
            seconds=seconds,
        )
