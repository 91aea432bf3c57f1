"""The engine's movement layer: demotions, offloads, loads and copy drops (spec/movement.md).

Built by the engine only for a policy that moves KV (:func:`kvmodel.policy.moves`); without one
the engine holds ``None`` here and no clause of MV1-MV9 costs anything. Work is per moved block:
a demotion per eviction, an offload per block an inference wrote, a load per block it loads.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol

import attrs

from kvmodel._resident import Placed, ResidentBlock
from kvmodel.blocks import BlockSpec
from kvmodel.config import EngineConfig
from kvmodel.contexts import Context
from kvmodel.copies import CopyStore, PackedRefs
from kvmodel.errors import KVModelError, PolicyError, is_interrupt, policy_raised
from kvmodel.ids import BlockKey, ContextId, TierName
from kvmodel.io.observations import CopyObs, DropCopyObs, LoadObs, ObservationLog
from kvmodel.lifecycle import BlockClass
from kvmodel.memory import Memory
from kvmodel.policy import BasePolicy, copy_rules
from kvmodel.residency import Residency
from kvmodel.view import BlockInfo, ModelView

__all__ = ["CopyResult", "Movement", "MovementHost", "MovementStats"]


class MovementHost(Protocol):
    """What the movement layer reads of the engine."""

    @property
    def config(self) -> EngineConfig: ...

    @property
    def block_size(self) -> int: ...

    @property
    def now(self) -> float: ...

    @property
    def op_index(self) -> int: ...

    @property
    def observing(self) -> bool: ...

    @property
    def log(self) -> ObservationLog: ...

    @property
    def memory(self) -> Memory: ...

    @property
    def residency(self) -> Residency: ...

    @property
    def view(self) -> ModelView: ...

    @property
    def policy(self) -> object: ...

    def block_class(self, b: ResidentBlock) -> BlockClass: ...


class CopyResult:
    """What a demotion's or an offload's copy came to (the ``copy`` record's ``result``)."""

    WRITTEN = "written"  # a copy written: one block write to the tier (MV3 steps 2-3)
    HELD = "held"  # the tier already held one: renewed, nothing written (MV3 step 1)
    NO_ROOM = "no-room"  # the tier is full of primaries: no copy (MV3 step 4)


@attrs.define
class MovementStats:
    """Running totals of the movement layer (the summary's ``movement``)."""

    copies_written: dict[str, int]
    copies_held: int = 0
    copies_no_room: int = 0
    demotions: int = 0
    offloads: int = 0
    loads: dict[str, int] = attrs.field(factory=dict)
    load_tokens: int = 0
    load_bytes: dict[str, int] = attrs.field(factory=dict)
    copy_drops: dict[str, int] = attrs.field(factory=dict)
    dead_copies_max: int = 0


class Movement:
    """The copy store and the policy's movement decisions, for one engine."""

    def __init__(self, engine: MovementHost) -> None:
        self.e = engine
        self.refs = PackedRefs()
        cfg = engine.config
        self.copies = CopyStore(
            engine.memory,
            self.refs,
            {t.name: t.copies for t in cfg.tiers},
            self._dropped,
            copy_rules(engine.policy),
        )
        self.stats = MovementStats(copies_written={t.name: 0 for t in cfg.tiers})
        self._index = {t.name: i for i, t in enumerate(cfg.tiers)}
        names = [t.name for t in cfg.tiers]
        #: each tier's next below (what a declared demotion or offload names, MV2)
        self._below = dict(itertools.pairwise(names))
        #: a declared rule (the base class's method reading ``demotes`` / ``offloads``): the
        #: classes, read here, so that no BlockInfo is built per eviction or per written block;
        #: None: the policy's own code decides
        self._demotes = _declared(engine.policy, "demote_to", "demotes")
        #: drop Dead copies after every op as a declared ``Reclaim.DEAD`` does, whatever the
        #: policy's own reclaim is: set by a referee whose reference policy's ``on_op``
        #: delegates to a policy that declares it (checkers.conformance.oracle)
        self.reclaims_dead = False
        self._offloads = _declared(engine.policy, "offload_to", "offloads")

    # ------------------------------------------------------------------ records

    def _dropped(self, key: BlockKey, tier: TierName, reason: str) -> None:
        e = self.e
        d = self.stats.copy_drops
        d[reason] = d.get(reason, 0) + 1
        if e.observing:
            e.log.add(DropCopyObs(e.log.next_seq, e.now, e.op_index, key, tier, reason))

    def _ask(self, call: str, info: BlockInfo) -> TierName | None:
        e = self.e
        fn = getattr(e.policy, call, None)
        if fn is None:
            return None
        name = str(getattr(e.policy, "name", "?"))
        try:
            tier = fn(e.view, info)
        except KVModelError:
            raise
        except BaseException as err:
            if is_interrupt(err):
                raise
            raise policy_raised(name, call, err) from err
        if tier is None:
            return None
        below = self._index.get(TierName(tier)) if isinstance(tier, str) else None
        if below is None or below <= self._index[info.tier]:
            raise PolicyError(
                f"policy {name!r} {call} named tier {tier!r} for a block in "
                f"{info.tier!r}: a copy goes to a tier below the block's "
                f"(tiers: {list(e.memory.names)}; spec/movement.md MV2)",
                kind="bad-movement",
            )
        return TierName(tier)

    def _copy(
        self,
        ctx: ContextId,
        b: ResidentBlock,
        tier: TierName,
        reason: str,
        keep: AbstractSet[BlockKey] = frozenset(),
        fits: bool = True,
    ) -> str:
        """A copy of ``b`` into ``tier`` (MV3), and what it came to (:class:`CopyResult`);
        ``keep``: copies that may not leave for its room (its batch's); ``fits``: False when its
        batch found no room, so a new copy is not made (MV13)."""
        e, st = self.e, self.stats
        key = b.spec.key
        assert key is not None
        if fits or key in self.copies.order[tier]:
            made = self.copies.write(key, tier, keep)
        else:
            made = False  # (its store found no room, MV13)
        if made is None:
            result = CopyResult.HELD
            st.copies_held += 1
        elif made:
            result = CopyResult.WRITTEN
            st.copies_written[tier] += 1
        else:
            result = CopyResult.NO_ROOM
            st.copies_no_room += 1
        if e.observing:
            e.log.add(
                CopyObs(
                    e.log.next_seq,
                    e.now,
                    e.op_index,
                    ctx,
                    key,
                    b.depth,
                    b.tier,
                    tier,
                    reason,
                    result,
                )
            )
        return result

    # ------------------------------------------------------------------ decisions

    def demote(self, victim: ResidentBlock, ctx: ContextId) -> None:
        """Before ``victim`` is dropped for room: the policy's demotion, if any (MV2)."""
        if victim.spec.key is None or not victim.indexed:
            return  # a partial or bypassed block has no identity a lookup could find
        rule = self._demotes
        if rule is None:
            tier = self._ask("demote_to", self.e.view.block(victim.id))
        elif rule and self.e.block_class(victim) in rule:
            tier = self._below.get(victim.tier)
        else:
            return
        if tier is not None:
            self.stats.demotions += 1
            self._copy(ctx, victim, tier, "demote")

    def loadable(self, misses: Sequence[BlockSpec], prompt_full: int) -> int:
        """How many leading misses are loads (MV4): full prompt blocks with no primary and a
        copy, up to the first that is not."""
        index, copies = self.e.residency.index, self.copies
        n = 0
        for s in misses:
            k = s.key
            if k is None or s.depth >= prompt_full or k in index or not copies.holds(k):
                break
            n += 1
        return n

    def committed(
        self,
        c: Context,
        placed: Sequence[Placed],
        loads: int,
        kept: int,
        run: Sequence[ResidentBlock] = (),
    ) -> None:
        """After ``c``'s inference committed: its loads (the first ``loads`` of ``placed``, each
        read from the first tier holding its copy; one whose copy the request's own writes
        dropped for room was recomputed, MV4), then its offloads (what it offers, MV2 and
        :attr:`CopyRules.offer`; one store under :attr:`CopyRules.batch`, MV13). ``run``: the
        inference's own kept prefix and hits, which ``offer = "request"`` offers too when it
        loaded nothing."""
        e, st = self.e, self.stats
        rules = self.copies.rules
        bs = e.block_size
        #: the copies this inference read and still holds: (depth, key, tier)
        used: list[tuple[int, BlockKey, TierName]] = []
        for spec, b, _, _ in placed[:loads]:
            key = spec.key
            assert key is not None
            src = self.copies.source(key)
            if src is None:
                continue
            st.loads[src] = st.loads.get(src, 0) + 1
            st.load_tokens += bs
            bpb = e.memory.config(src).bytes_per_block
            if bpb is not None:
                st.load_bytes[src] = st.load_bytes.get(src, 0) + bpb
            if e.observing:
                e.log.add(
                    LoadObs(
                        e.log.next_seq, e.now, e.op_index, c.id, b.id, key, spec.depth, src, b.tier
                    )
                )
            self.copies.read(key, src)
            if key in self.copies.order[src]:
                used.append((spec.depth, key, src))
        if used and rules.tail_first:  # the loads, used head last (vLLM ranks reads so: MV13)
            self.copies.use((k, t) for _, k, t in reversed(used))
        offers = self._offers(c, placed, loads, kept, run)
        if not offers and not used:
            return
        keep: dict[TierName, set[BlockKey]] = {}
        fits: dict[TierName, bool] = {}
        if rules.batch:
            self._store(offers, keep, fits)
        written: set[tuple[BlockKey, TierName]] = set()
        for b, tier in offers:
            st.offloads += 1
            k = b.spec.key
            assert k is not None
            result = self._copy(
                c.id, b, tier, "offload", keep.get(tier, set()), fits.get(tier, True)
            )
            if result == CopyResult.WRITTEN:
                written.add((k, tier))
            if result != CopyResult.NO_ROOM:
                used.append((b.depth, k, tier))
        if rules.tail_first and used:  # every copy the request used, head most recent (MV13)
            used.sort(key=lambda u: -u[0])
            self.copies.use((k, t) for _, k, t in used)
        if self.copies.arc is not None:  # (what ARC learns of the request at its end, MV17)
            reused = {(k, t) for _, k, t in used} - written
            for tier in {t for _, _, t in used}:
                self.copies.finished(
                    tier,
                    [k for _, k, t in sorted(used, key=lambda u: u[0]) if t == tier],
                    {k for k, t in written if t == tier},
                    {k for k, t in reused if t == tier},
                )

    def _store(
        self,
        offers: Sequence[tuple[ResidentBlock, TierName]],
        keep: dict[TierName, set[BlockKey]],
        fits: dict[TierName, bool],
    ) -> None:
        """An inference's offloads as one store per tier (MV13): ``keep`` each tier's offered
        keys, ``fits`` whether its new copies fit; the room they need made first, together."""
        copies = self.copies
        new: dict[TierName, list[BlockKey]] = {}
        for b, tier in offers:
            k = b.spec.key
            assert k is not None
            if k not in keep.setdefault(tier, set()):
                keep[tier].add(k)
                if k not in copies.order[tier]:
                    new.setdefault(tier, []).append(k)
        for tier, keys in keep.items():
            fresh = new.get(tier, [])
            copies.missed(tier, fresh)
            fits[tier] = copies.room(tier, len(fresh), keys)
            short = copies.count(tier) + len(fresh) - self.e.memory.free_count(tier)
            if fits[tier] and short > 0:
                copies.make_room(tier, short, keys)

    def _offers(
        self,
        c: Context,
        placed: Sequence[Placed],
        loads: int,
        kept: int,
        run: Sequence[ResidentBlock],
    ) -> list[tuple[ResidentBlock, TierName]]:
        """What the inference offers to offload, in chain order, each with its target tier."""
        e = self.e
        rule = self._offloads
        if rule is not None and not rule:
            return []  # (declared: nothing is offloaded)
        blocks: list[ResidentBlock] = []
        if self.copies.rules.offer == "request":
            # the request as the connector sees it: its hit run (when it loaded nothing), then
            # every full block it computed that the reuse store indexed -- a chain of its
            # context's or not (after a temporary: not kept, P8, but cached all the same)
            blocks = [] if loads else list(run)
            index = e.residency.index
            for spec, b, bypass, _ in placed[loads:]:
                if spec.key is None or bypass:
                    break
                if index.get(spec.key) == b.id:
                    blocks.append(b)
        else:
            for spec, b, bypass, _ in placed[:kept]:
                if spec.key is None or bypass:
                    break
                if c.id in b.holders:  # (after a temporary: not kept, P8)
                    blocks.append(b)
        out: list[tuple[ResidentBlock, TierName]] = []
        for b in blocks:
            if rule is None:
                tier = self._ask("offload_to", e.view.block(b.id))
            else:
                tier = self._below.get(b.tier) if e.block_class(b) in rule else None
            if tier is not None:
                out.append((b, tier))
        return out

    def after_op(self, reclaim_dead: bool) -> None:
        """After the policy's reclaim: a ``Reclaim.DEAD`` policy drops every Dead copy too
        (MV2); the most Dead copies seen is kept (MV6)."""
        if reclaim_dead:
            self.copies.drop_dead()
        dead = self.copies.dead_count()
        if dead > self.stats.dead_copies_max:
            self.stats.dead_copies_max = dead

    def fit(self, tier: TierName) -> None:
        self.copies.fit(tier)

    def summary(self) -> dict[str, object]:
        st = self.stats
        return {
            "demotions": st.demotions,
            "offloads": st.offloads,
            "copies_written": dict(st.copies_written),
            "copies_held": st.copies_held,
            "copies_no_room": st.copies_no_room,
            "loads": dict(sorted(st.loads.items())),
            "load_tokens": st.load_tokens,
            "load_bytes": dict(sorted(st.load_bytes.items())),
            "copy_drops": dict(sorted(st.copy_drops.items())),
            "copies_final": len(self.copies),
            "dead_copies_final": self.copies.dead_count(),
            "dead_copies_max": st.dead_copies_max,
        }


def _declared(policy: object, method: str, classes: str) -> frozenset[BlockClass] | None:
    """The classes a :class:`BasePolicy` declares for ``method`` when the method is the base
    class's (it reads them), else None (the decision is code)."""
    if not isinstance(policy, BasePolicy) or method in vars(policy):
        return None
    if getattr(type(policy), method) is not getattr(BasePolicy, method):
        return None
    return frozenset(getattr(policy, classes))
