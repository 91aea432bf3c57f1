"""The adapter kit for a prefix cache with a copy tier below it (spec/movement.md MV13-MV16).

A tiered engine -- vLLM's GPU pool over its offloading tier, SGLang's radix tree over its host
pool, LMCache under any engine -- keeps its blocks in a top tier and *copies* of them in a
lower one, loads a block back when a lookup misses above and hits below, and stores what a
request computed below. :class:`TieredCacheAdapter` puts such an engine under the oracle: its
top tier is a :class:`~checkers.conformance.adapters.PrefixCacheAdapter` (``lookup``,
``make_room``, ``insert``), and four hooks more speak for the tier below:

1. :meth:`~TieredCacheAdapter.lower_lookup` -- how many prompt blocks after the top tier's hits
   the lower tier can load (it changes nothing yet);
2. :meth:`~TieredCacheAdapter.load` -- the request was admitted: bring those blocks up;
3. :meth:`~TieredCacheAdapter.store` -- what the request offers the lower tier, and what became
   of each block (:class:`Stored`: written, held, no room; the copies dropped for room);
4. :meth:`~TieredCacheAdapter.finish` -- the request is over (refused or not).

The kit writes the records (a ``load`` per loaded block, a ``copy`` per offered block, a
``drop-copy`` per copy dropped for room, naming each by the key of the block the lower tier
stored under that handle, so a tier that drops what it never stored is seen) and the oracle
judges them against a moving reference whose copy rules are the engine's (``vllm-offload``:
vLLM's). The configuration is two tiers, the lower one a copy tier (``copies_only``).
:mod:`checkers.conformance.vllm_offload` is built on it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import attrs

from checkers.conformance.adapters import PrefixCacheAdapter, Records, Request
from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError
from kvmodel.ids import BlockKey

__all__ = ["Stored", "TieredCacheAdapter"]


@attrs.frozen
class Stored:
    """What a lower tier's store did with a request's blocks (:meth:`TieredCacheAdapter.store`).

    ``first``: the depth of the first block offered; ``results``: for each offered block in
    turn, ``"written"``, ``"held"`` (the tier had it) or ``"no-room"``; ``handles``: the lower
    tier's handle of each offered block (its key there: a page, a hash); ``dropped``: the
    handles of the copies the store dropped for room."""

    first: int = 0
    results: Sequence[str] = ()
    handles: Sequence[Hashable] = ()
    dropped: Sequence[Hashable] = ()


class TieredCacheAdapter(PrefixCacheAdapter):
    """A prefix cache over a copy tier, as a lockstep implementation (two tiers: the top one the
    cache's, the lower one a copy tier). Subclass it and write the top tier's three hooks
    (:class:`~checkers.conformance.adapters.PrefixCacheAdapter`) and the four below."""

    def __init__(self, config: EngineConfig) -> None:
        if len(config.tiers) != 2 or not config.tiers[1].copies_only:
            raise ConfigError(
                f"{type(self).__name__} is two tiers: the cache's, then a copy tier (two "
                "[[tiers]] entries, the second with copies_only = true)"
            )
        top, lower = config.tiers
        super().__init__(attrs.evolve(config, tiers=(top,)))
        self.lower_tier = lower.name
        self.lower_capacity = lower.blocks
        #: the key of the block the lower tier stored under each handle (what :meth:`store`
        #: answered): how a dropped handle is named
        self.lower_keys: dict[Hashable, BlockKey] = {}

    # ------------------------------------------------------------------ the hooks

    def lower_lookup(self, r: Request, start: int) -> int:
        """How many prompt blocks from depth ``start`` (the top tier's hits) the lower tier
        holds, in a row: the loads, if the request is admitted."""
        raise NotImplementedError

    def load(self, r: Request, start: int, n: int) -> None:
        """The request was admitted: bring blocks ``start .. start + n - 1`` up."""
        raise NotImplementedError

    def store(self, r: Request, hits: int, loads: int) -> Stored:
        """After the request's writes: offer the lower tier what the engine offers, store it,
        and say what became of each block (:class:`Stored`)."""
        raise NotImplementedError

    def finish(self, r: Request) -> None:
        """The request is over (also after a refusal). Nothing by default."""

    # ------------------------------------------------------------------ driving

    def _below_lookup(self, r: Request, hits: int) -> int:
        return max(0, min(self.lower_lookup(r, hits), r.prompt_blocks - hits))

    def _below_load(self, r: Request, hits: int, loads: int) -> None:
        if loads:
            self.load(r, hits, loads)

    def _below_store(self, rec: Records, r: Request, hits: int, loads: int) -> None:
        for d in range(hits, hits + loads):
            rec.load(r, d, self.lower_tier)
        out = self.store(r, hits, loads)
        if len(out.handles) != len(out.results):
            raise ValueError(
                f"{type(self).__name__}.store answered {len(out.results)} results and "
                f"{len(out.handles)} handles; one of each per offered block"
            )
        for handle in out.dropped:
            key = self.lower_keys.pop(handle, None)
            name = key if key is not None else f"(handle {handle!r}: nothing stored there)"
            rec.drop_copy(name, self.lower_tier)
        offered = zip(out.results, out.handles, strict=True)
        for d, (result, handle) in enumerate(offered, out.first):
            if result == "written":
                self.lower_keys[handle] = r.keys[d]  # type: ignore[assignment]
            rec.copy(r, d, self.lower_tier, result)

    def _below_finish(self, r: Request) -> None:
        self.finish(r)
