"""Admission of one inference: lookup, allocation through the policy, eviction, commit.

The engine's hot path (spec P7, B6, M4), kept apart from the op dispatch in :mod:`kvmodel.engine`;
these functions mutate the engine they are given and nothing else.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

import attrs

from kvmodel._eviction import PolicyOrder
from kvmodel._movement import Movement, MovementHost
from kvmodel._rank_index import RankIndex
from kvmodel._resident import Placed, ResidentBlock
from kvmodel.blocks import BlockSpec
from kvmodel.contexts import Context
from kvmodel.errors import KVModelError, PolicyError, TraceError, is_interrupt, policy_raised
from kvmodel.ids import BlockKey, ContextId, TierName
from kvmodel.io.observations import (
    AllocObs,
    BypassObs,
    EvictObs,
    FreeReason,
    HitObs,
    InferObs,
    RejectObs,
)
from kvmodel.io.trace import Infer
from kvmodel.lifecycle import BlockClass, Event
from kvmodel.policy import Placement, Policy
from kvmodel.probe import EngineProbe, EngineStats
from kvmodel.residency import Residency
from kvmodel.view import NewBlock

__all__ = ["AdmissionHost", "evict", "infer"]


class AdmissionHost(MovementHost, Protocol):
    """What admission reads and drives of the engine: beyond what the movement layer reads
    (its store, memory, log, policy and view), its totals, victim source, declarations, probe
    and movement layer, and the engine operations an inference may need (spec P7)."""

    @property
    def stats(self) -> EngineStats: ...

    @property
    def victims(self) -> PolicyOrder | RankIndex: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def bypass_rule(self) -> frozenset[BlockClass] | None: ...

    @property
    def fixed_placement(self) -> Placement | None: ...

    @property
    def probe(self) -> EngineProbe | None: ...

    @property
    def movement(self) -> Movement | None: ...

    def context(self, ctx: ContextId, field: str = "ctx") -> Context: ...

    def close(self, c: Context) -> None: ...

    def free(self, b: ResidentBlock, reason: str) -> None: ...


def allocate(
    e: AdmissionHost, tiers: Sequence[TierName], ctx: Context, spec: BlockSpec, state: BlockClass
) -> ResidentBlock | None:
    """The record of a new block of ``ctx``, ``spec``, of class ``state``: in a free slot of the
    first preferred tier that has one, else in the slot of a block evicted for room (spec M4):
    every preferred tier is full, so the victim's slot is the one taken, and its record is
    renewed (:meth:`ResidentBlock.renew`). None if no tier has a free or evictable slot."""
    mem = e.memory
    for tn in tiers:
        if mem.free_count(tn):
            b = ResidentBlock(mem.alloc(tn), spec, tn, e.now, ctx.id, ctx.agent, state)
            if e.movement is not None:
                e.movement.fit(tn)  # copies hold free space only (spec/movement.md MV1)
            return b
    victim = e.victims.next_victim(tiers)
    if victim is None:
        return None
    if e.probe is not None:
        e.probe.before_evict(e, victim.id, tuple(tiers))
    evict(e, victim, ctx.id, keep_slot=True)
    mem.reuse(victim.id)
    victim.renew(spec, e.now, ctx.id, ctx.agent, state)
    return victim


def evict(
    e: AdmissionHost, victim: ResidentBlock, ctx: ContextId, *, keep_slot: bool = False
) -> None:
    """Evict ``victim`` for an inference of ``ctx``: the policy's demotion (a copy kept below,
    spec/movement.md MV2), the record, the count, the drop (M4.3)."""
    if e.movement is not None:
        e.movement.demote(victim, ctx)
    if e.observing:
        e.log.add(
            EvictObs(
                e.log.next_seq,
                e.now,
                e.op_index,
                ctx,
                victim.id,
                victim.spec.key,
                victim.tier,
                victim.depth,
                e.block_class(victim),
            )
        )
    e.stats.evictions[victim.tier] += 1
    e.residency.drop(victim, keep_slot=keep_slot)


# ------------------------------------------------------------------ inference (spec P7)


def infer(e: AdmissionHost, op: Infer) -> None:
    c = e.context(op.ctx)
    res = e.residency
    if not len(c):
        raise TraceError(f"context {c.id!r} has no messages to infer on", field="ctx")
    bs = e.block_size
    c.phase_event(Event.INFER_START)
    prompt_tokens = c.total_tokens
    prompt_full = prompt_tokens // bs
    first_temp = c.first_temporary_index()
    cut = c.starts[first_temp] // bs if first_temp is not None else None
    try:
        c.admit(op.output, temporary=False)
    except TraceError as err:
        raise TraceError(err.problem, field=f"output.{err.field or 'id'}") from None
    output_tokens = sum(m.tokens for m in op.output)

    # the minimal invalidation first: the chain's invalid tail is dropped (spec P7.2)
    v = c.valid
    res.detach_from(c, v)
    specs = c.pack_from(v)
    hits: list[ResidentBlock] = []
    for s in specs:
        b = res.hit(s.key) if s.depth < prompt_full else None
        if b is None:
            break
        hits.append(b)
    misses = specs[len(hits) :]
    moving = e.movement
    loads = moving.loadable(misses, prompt_full) if moving is not None else 0
    res.begin_flight(c, v, hits)

    hit_tokens = (v + len(hits)) * bs
    if e.observing:
        e.log.add(
            InferObs(
                e.log.next_seq,
                e.now,
                e.op_index,
                c.id,
                prompt_tokens,
                hit_tokens,
                prompt_tokens - hit_tokens,
                output_tokens,
                v,
            )
        )
    if e.observing:
        for b in hits:
            e.log.add(
                HitObs(
                    e.log.next_seq,
                    e.now,
                    e.op_index,
                    c.id,
                    b.id,
                    BlockKey(b.spec.key or ""),
                    b.tier,
                    b.depth,
                )
            )

    free = e.memory.total_free()
    placed: list[Placed] = []
    needed = admission(e, c, misses, free)
    ok = needed is not None and write_misses(e, c, misses, placed, needed, prompt_full)
    if ok:
        kept = commit(e, c, v, hits, specs[: len(hits)], placed, cut)
        if moving is not None:
            run: list[ResidentBlock] = []
            if not loads and moving.copies.rules.offer == "request":  # (MV13: whole request)
                index, blocks = res.index, res.blocks
                own = (s.key for s in c.materialized[:v] if s.key is not None)
                run = [*(blocks[index[k]] for k in own if k in index), *hits]
            moving.committed(c, placed, loads, kept, run)
        st = e.stats
        st.infers += 1
        st.prompt_tokens += prompt_tokens
        st.hit_tokens += hit_tokens
        st.miss_tokens += prompt_tokens - hit_tokens
        st.output_tokens += output_tokens
    res.end_flight()
    e.victims.end()
    c.phase_event(Event.INFER_END)
    c.suspended_at = op.t + op.duration
    c.drop_temporaries()
    if c.one_shot:
        e.close(c)


def admission(e: AdmissionHost, c: Context, misses: Sequence[BlockSpec], free: int) -> int | None:
    """The admission pre-check (spec M4.4, P7.4): None if the request is rejected (recorded),
    else how many new blocks it needs -- or -1 in a run that keeps no record and has no probe,
    where only the decision is needed and the count is skipped when the decision does not
    need it (P7.7). With the log or without, the victim source is asked for its evictable count
    exactly when the blocks to write exceed the free slots: a source may keep what it answered
    (the general path keeps its candidates for the first ranking), and a replay must not depend
    on whether the log is kept."""
    res = e.residency
    blind = not e.observing and e.probe is None
    if blind and len(misses) - len(res.index) > free + len(res.blocks):
        # more blocks than memory has, even if every indexed block were among the misses: a
        # rejection whatever is evictable, decided without a pass over the prompt. Only the
        # decision is needed here (no record to carry the exact count), and a prompt too big for
        # memory would otherwise cost a pass over its whole chain at every inference (spec P7.7)
        reject(e, c, "", 0, 0)
        return None
    if blind:
        if count_needed(res, misses, over=free) <= free:
            return -1  # it fits in the free slots
        evictable = e.victims.evictable()
        if len(misses) <= free + evictable:
            # the blocks it needs and the orphans it recomputes are distinct misses, so
            # ``needed <= free + evictable - orphans``: it fits
            return -1
        needed = count_needed(res, misses)
    else:
        needed = count_needed(res, misses)
        if needed <= free:
            return needed
        evictable = e.victims.evictable()
    # orphans among the misses are recomputed in place: evictable now, in flight soon
    orphans = sum(
        1 for s in misses if (b := res.hit(s.key)) is not None and res.evictable(b, e.view)
    )
    available = free + evictable - orphans
    if needed > available:
        reject(
            e,
            c,
            f"needs {needed} blocks; {free} free and {available - free} evictable",
            needed,
            available,
        )
        return None
    return needed


def count_needed(res: Residency, misses: Sequence[BlockSpec], *, over: int | None = None) -> int:
    """How many new blocks the misses take: those with no resident block of their key (an
    orphan, resident and indexed, is recomputed in place). ``over``: count no further than
    ``over + 1``, enough to tell whether the count exceeds ``over``."""
    index = res.index  # (res.hit, inlined: per miss)
    new = (s for s in misses if s.key is None or s.key not in index)
    return sum(1 for _ in (new if over is None else itertools.islice(new, over + 1)))


def write_misses(
    e: AdmissionHost,
    c: Context,
    misses: Sequence[BlockSpec],
    placed: list[Placed],
    needed: int,
    prompt_full: int,
) -> bool:
    """Write the misses in order; False if one found no slot (the request is rejected and what
    it wrote is freed). ``needed``: the count for the rejection's record, -1 if the caller did
    not count it (it makes no record then)."""
    res = e.residency
    index, blocks = res.index, res.blocks
    reasoning_block = c.first_reasoning_block()
    turn_start_block = min(c.turn_start, c.total_tokens) // e.block_size
    probe, observing, mem, now, op_index = e.probe, e.observing, e.memory, e.now, e.op_index
    fixed = e.fixed_placement if probe is None else None
    # no message with a stored state: every block's covered class is the phase's (L5.1,
    # Context.covered_class); the writes change neither, so it is read once
    uniform = c.covered_class(()) if not c.stored else None
    for s in misses:
        ob = index.get(s.key) if s.key is not None else None  # (res.hit, inlined: per block)
        orphan = blocks[ob] if ob is not None else None
        if orphan is not None:
            # an orphan: resident, but its chain broke above it; recomputed in place (B6.3)
            b = orphan
            mem.rewrite(b.id)
            b.touch = now
            b.touch_op = op_index
            res.fly(b)
            if observing:
                e.log.add(
                    AllocObs(
                        e.log.next_seq,
                        e.now,
                        e.op_index,
                        c.id,
                        b.id,
                        s.key,
                        b.tier,
                        b.depth,
                        e.block_class(b),
                        rewrite=True,
                    )
                )
            placed.append((s, b, False, False))  # (spec, block, bypass, fresh)
            continue
        state = uniform if uniform is not None else c.covered_class(s.uids)
        if fixed is not None:
            # the base class's place(): the configured tier order for every block, whatever
            # the block; the NewBlock it would ignore is not built (checked once: Engine)
            pl = fixed
        else:
            nb = NewBlock(
                s.key,
                s.depth,
                c.id,
                c.session,
                c.agent,
                state,
                s.kinds,
                in_prompt=s.key is not None and s.depth < prompt_full,
                partial=s.key is None,
                turn=c.turns,
                turn_start_block=turn_start_block,
                reasoning_block=reasoning_block,
            )
            pl = place(e, nb)
            if probe is not None and (told := getattr(probe, "before_alloc", None)):
                told(e, nb, pl)  # (optional: EngineProbe)
        new = allocate(e, pl.tiers, c, s, state)
        if new is None:
            rollback(e, placed)
            reject(
                e,
                c,
                f"no free or evictable block in tiers {list(pl.tiers)}",
                needed,
                mem.total_free(),
            )
            return False
        b, bid = new, new.id
        b.touch_op = op_index
        bypass = pl.bypass and s.key is not None
        res.add(b, indexed=not bypass and s.key is not None)
        if observing:
            e.log.add(
                AllocObs(
                    e.log.next_seq,
                    e.now,
                    e.op_index,
                    c.id,
                    bid,
                    s.key,
                    b.tier,
                    s.depth,
                    state,
                )
            )
        if probe is not None:
            probe.after_place(e, nb, pl, bid)
        if bypass and observing:
            e.log.add(
                BypassObs(
                    e.log.next_seq,
                    e.now,
                    e.op_index,
                    c.id,
                    bid,
                    s.key,
                    b.tier,
                    s.depth,
                )
            )
        placed.append((s, b, bypass, True))  # (spec, block, bypass, fresh)
    return True


def place(e: AdmissionHost, nb: NewBlock) -> Placement:
    """The policy's placement of a new block, checked (spec PP2)."""
    try:
        pl = e.policy.place(e.view, nb)
    except KVModelError:
        raise
    except BaseException as err:
        if is_interrupt(err):
            raise
        raise policy_raised(e.policy.name, "place", err) from err
    pl = check_placement(e, pl)
    rule = e.bypass_rule
    if rule is not None and pl.bypass is not (nb.state in rule):
        raise PolicyError(
            f"policy {e.policy.name!r} declares bypasses = "
            f"{sorted(x.value for x in rule)} but place() returned "
            f"bypass={pl.bypass} for a {nb.state.value} block (spec PP2, declared bypass)",
            kind="bad-placement",
        )
    return pl


def check_placement(e: AdmissionHost, pl: Placement) -> Placement:
    """``pl`` if it names known tiers, less the copy tiers (which take no primary,
    spec/movement.md MV15); a :class:`PolicyError` if nothing is left."""
    if not isinstance(pl, Placement) or not pl.tiers:
        raise PolicyError(
            f"policy {e.policy.name!r} place() must return a Placement "
            f"with at least one tier (got {pl!r})",
            kind="bad-placement",
        )
    mem = e.memory
    for tn in pl.tiers:
        if not mem.has_tier(tn):
            raise PolicyError(
                f"policy {e.policy.name!r} placed a block in unknown tier "
                f"{tn!r}; tiers: {list(mem.names)}",
                kind="bad-placement",
            )
    if not any(mem.config(tn).copies_only for tn in pl.tiers):
        return pl
    kept = tuple(tn for tn in pl.tiers if not mem.config(tn).copies_only)
    if not kept:
        raise PolicyError(
            f"policy {e.policy.name!r} placed a block only in copy tiers {list(pl.tiers)}, "
            "which hold copies, never a primary (copies_only, spec/movement.md MV15)",
            kind="bad-placement",
        )
    return attrs.evolve(pl, tiers=kept)


def rollback(e: AdmissionHost, placed: list[Placed]) -> None:
    """Free what a request wrote before it was rejected mid-allocation (spec M4.4)."""
    for _, b, _, fresh in reversed(placed):
        if fresh and b.id in e.residency.blocks:
            e.free(b, FreeReason.REJECT)


def reject(e: AdmissionHost, c: Context, reason: str, needed: int, available: int) -> None:
    if e.observing:
        e.log.add(RejectObs(e.log.next_seq, e.now, e.op_index, c.id, reason, needed, available))
    e.stats.rejected += 1


def commit(
    e: AdmissionHost,
    c: Context,
    v: int,
    hits: list[ResidentBlock],
    hit_specs: Sequence[BlockSpec],
    placed: list[Placed],
    cut: int | None,
) -> int:
    """Attach the new chain tail, release what is not kept, update recency (spec P7.5); how
    many of ``placed`` joined the chain.

    A hit enters the chain as *this* context's packed spec, not the resident block's: the key is
    the same, but the covered message instances (``uids``, which decide the block's class here,
    L5.1) are this context's own. The writer's uids name other messages, or none, in this context.
    """
    tail: list[BlockSpec] = list(hit_specs)
    res = e.residency
    res.attach_all(c, hits)
    # the placed blocks that join the chain: up to the first partial or bypassed one
    joined: list[ResidentBlock] = []
    for spec, b, bypass, _ in placed:
        if spec.key is None or bypass:
            break
        tail.append(spec)
        joined.append(b)
    res.attach_all(c, joined)
    kept = len(joined)
    c.materialized.extend(tail)
    if cut is not None and len(c.materialized) > cut:
        # a temporary leaves after this inference: what follows it is not kept (spec P8)
        res.detach_from(c, cut)
    c.valid = len(c.materialized)
    c.last_infer = e.now
    c.last_infer_op = e.op_index
    for b in hits:
        b.touch = e.now
        b.touch_op = e.op_index
        res.bump_block(b)
    for spec, b, bypass, _ in placed[kept:]:
        if spec.key is None:
            e.free(b, FreeReason.PARTIAL)
        elif bypass:
            e.free(b, FreeReason.BYPASS)
    return kept
