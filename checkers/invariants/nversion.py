"""A second, independent computation of what the contract fixes without memory pressure.

N-version programming for the reference model (spec/invariants.md §Self-checks of the engine):
:class:`Shadow` reads a trace and computes, straight from spec primitives.md, blocks.md and
lifecycle.md, everything that does not depend on an eviction decision -- each context's logical
sequence, phase, chain and valid count; each inference's prompt, hit, miss and own tokens, hits
and writes; the resident and Dead blocks; each block's class, holders, suspension time and last
access. :func:`checkers.invariants.contract.diverge` runs the engine beside it, op by op, on
memory too large to fill, and returns the first field on which the two disagree.

It shares no code with the engine's admission path or its lifecycle bookkeeping: its own packing
(whole sequences, re-packed at every inference), every message state stored explicitly (the
engine stores a per-context phase, L4), pin ends found by scanning (the engine keeps a heap), its
own chains, holders and classes. Shared are the input types (trace ops, messages), the enum names
and B3's hash function (:func:`kvmodel.blocks.chain_key`, the definition of a key, applied to
the shadow's own packing). It is a test oracle, not a fast path: its work per op follows the
open contexts, and an inference that evicts finds every evictable block once (then keeps them,
:class:`~checkers.invariants.shadow_candidates.Candidates`).

Two modes. *Predicting* (``Rules``), on memory that cannot fill: the shadow makes the policy's
decisions too -- ``KEEP`` (no bypass, no reclaim: LRU, vLLM-style, HBM-first, ...) or ``TETHER``
(Temporary blocks bypass the index, every Dead block is reclaimed after every op: KVTether).
*Following* (``rules=None``), any policy and any memory: every decision (victims, bypasses,
reclaims, rejections) is read from the engine's log and checked for what the contract fixes
about it, and everything else is computed and compared as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from checkers.invariants.shadow_candidates import Candidates, KeptTerms
from checkers.invariants.shadow_copies import FollowsCopies, ShadowCopies
from checkers.invariants.shadow_state import ShadowState
from checkers.invariants.shadow_terms import (
    KEEP,
    Admission,
    Eviction,
    InferFigures,
    Rules,
    ShadowContext,
)
from kvmodel.copies import DEFAULT_COPY_RULES, CopyRules
from kvmodel.ids import BlockKey, ContextId
from kvmodel.io.observations import (
    AllocObs,
    BypassObs,
    CopyObs,
    DropCopyObs,
    EvictObs,
    FreeObs,
    FreeReason,
    HitObs,
    InferObs,
    LoadObs,
    Observation,
    RejectObs,
)
from kvmodel.io.trace import (
    MAX_CONTEXT_TOKENS,
    Append,
    Close,
    EndSession,
    Fork,
    Infer,
    Op,
    Open,
    Pin,
    Remove,
    Replace,
    Return,
    TurnEnd,
    Unpin,
)
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.messages import Message, MessageKind
from kvmodel.policy import RankTerm

__all__ = ["VALIDITY_BLOCK", "Shadow", "contract_refusal", "validity_model"]

_COMMIT_FREES = (FreeReason.PARTIAL, FreeReason.BYPASS)


class Shadow(FollowsCopies, ShadowState):
    """The contract's figures for one trace, op by op (valid traces only: no error checking)."""

    def __init__(
        self,
        block_size: int,
        rules: Rules = KEEP,
        tiers: Sequence[str] = (),
        capacity: Mapping[str, int] | None = None,
        rank: tuple[RankTerm, ...] | None = None,
        exclusive: frozenset[str] = frozenset(),
        copy_rules: CopyRules = DEFAULT_COPY_RULES,
        copy_tiers: frozenset[str] = frozenset(),
    ) -> None:
        """``tiers``: the configured tier order (a block's ``tier_index``, spec PP3).
        ``capacity``: each tier's slots; following the log, each inference's admission (M4.4)
        and each eviction's need (M4: every tier it could take was full) are then checked, and
        not without. ``rank``: the policy's declared rank, when it is its order: each
        eviction's summary then names the candidate it orders first."""
        super().__init__(block_size, tiers)
        self.rank = rank
        self.capacity = None if capacity is None else dict(capacity)
        #: tiers that hold copies only (spec/movement.md MV15): no primary, not admission's
        self.copy_tiers = copy_tiers
        self.rules = rules
        #: the index of the op being applied (the engine's ``op_index``: a use's ``last_op``)
        self.op_index = -1
        self.sessions: dict[str, list[ContextId]] = {}
        self.ended: set[str] = set()
        #: the last op's time (None before the first op): times never decrease
        self._t_last: float | None = None
        self.now = 0.0
        self.last_infer: InferFigures | None = None
        #: the keys of the full blocks of the prompt of the op's inference, if it was one (B2-B3)
        self.last_prompt_keys: list[BlockKey] | None = None
        #: following the engine (``apply(op, records)``): where its records break the contract
        self.problems: list[str] = []
        #: following: the op's evictions, with the candidates and classes the contract gives
        self.evictions: list[Eviction] = []
        #: following: each tier's resident blocks, by their records' tiers (kept as blocks are
        #: indexed and leave: counted afresh at every eviction, it made an inference's work
        #: quadratic in its evictions)
        self._used: Counter[str] = Counter()
        #: following: the copies in each tier (spec/movement.md), as the log's records make them
        self.copies = ShadowCopies(tiers, exclusive, copy_rules)
        self._live_cache = {}
        self._begin_copies()

    # -------------------------------------------------------------- validity

    def refusal(self, op: Op) -> str | None:
        """Why ``op`` is not valid input in the model's state now (spec/trace-format.md T2-T3,
        the rules that depend on what came before), or None if it is. Written from the spec,
        not read from the engine: whether an op the engine under test refused was bad input is
        the contract's to say, never the engine's (a patched engine that refuses a valid op
        would otherwise be trusted; spec/invariants.md, Findings). Call it before
        :meth:`apply`; the model applies only valid ops."""
        if self._t_last is not None and op.t < self._t_last:
            return f"time went backwards: expected t >= {self._t_last:g} (got {op.t:g})"
        match op:
            case Open():
                return (
                    self._fresh(op.ctx)
                    or (self._open(op.parent, "parent") if op.parent is not None else None)
                    or self._live_session(op.session)
                )
            case Fork():
                if (why := self._open(op.src, "src") or self._fresh(op.ctx)) is not None:
                    return why
                n = len(self.ctxs[op.src].seq)
                if op.upto is not None and op.upto > n:
                    return f"expected upto <= {n}, the length of {op.src!r} (got {op.upto})"
                return None
            case Append():
                return self._open(op.ctx) or self._admissible(self.ctxs[op.ctx], op.messages)
            case Replace():
                if (why := self._open(op.ctx)) is not None:
                    return why
                c = self.ctxs[op.ctx]
                if not 0 <= op.index < len(c.seq):
                    return f"expected an index in [0, {len(c.seq)}) (got {op.index})"
                old = c.seq[op.index]
                return self._admissible(c, [op.message], old.tokens, old.id)
            case Remove():
                if (why := self._open(op.ctx)) is not None:
                    return why
                n = len(self.ctxs[op.ctx].seq)
                if not 0 <= op.index < n:
                    return f"expected an index in [0, {n}) (got {op.index})"
                if op.index + op.count > n:
                    return f"expected index + count <= {n} (got {op.index} + {op.count})"
                return None
            case Pin() | Unpin():
                if (why := self._open(op.ctx)) is not None:
                    return why
                n = len(self.ctxs[op.ctx].seq)
                lo = 0 if op.start is None else op.start
                hi = n if op.stop is None else op.stop
                if not 0 <= lo <= hi <= n:
                    return f"expected 0 <= start <= stop <= {n} (got start={lo}, stop={hi})"
                return None
            case Infer():
                if (why := self._open(op.ctx)) is not None:
                    return why
                c = self.ctxs[op.ctx]
                if not c.seq:
                    return f"context {op.ctx!r} has no messages to infer on"
                return self._admissible(c, op.output)
            case TurnEnd() | Close():
                return self._open(op.ctx)
            case Return():
                if (why := self._open(op.ctx) or self._open(op.into, "into")) is not None:
                    return why
                if op.into == op.ctx:
                    return "expected 'into' to name another context"
                return self._admissible(self.ctxs[op.into], [op.result])
            case EndSession():
                if op.session not in self.sessions:
                    return f"expected a known session (got {op.session!r})"
                return self._live_session(op.session)
        return None

    def _open(self, ctx: ContextId, field: str = "ctx") -> str | None:
        c = self.ctxs.get(ctx)
        if c is None:
            return f"{field}: expected an open context (got unknown context {ctx!r})"
        return None if c.open else f"{field}: expected an open context ({ctx!r} is closed)"

    def _fresh(self, ctx: ContextId) -> str | None:
        return None if ctx not in self.ctxs else f"expected a new context id ({ctx!r} exists)"

    def _live_session(self, session: str) -> str | None:
        return f"session {session!r} has ended" if session in self.ended else None

    @staticmethod
    def _admissible(
        c: ShadowContext, msgs: Sequence[Message], freed: int = 0, leaving: str | None = None
    ) -> str | None:
        """Whether ``msgs`` may join ``c`` (``freed`` tokens and the id ``leaving`` go as they
        come: a replace): ids unique among the live messages, and the context's size cap."""
        live = {m.id for m in c.seq} - ({leaving} if leaving is not None else set())
        for m in msgs:
            if m.id in live:
                return f"message id {m.id!r} is already live in context {c.id!r}"
            live.add(m.id)
        total = c.tokens() - freed + sum(m.tokens for m in msgs)
        if total > MAX_CONTEXT_TOKENS:
            return f"context {c.id!r} would hold {total:,} tokens; at most {MAX_CONTEXT_TOKENS:,}"
        return None

    # -------------------------------------------------------------- ops

    def apply(
        self,
        op: Op,
        records: Sequence[Observation] | None = None,
        evict_tiers: Sequence[Sequence[str]] = (),
        place_tiers: Sequence[Sequence[str]] = (),
    ) -> None:
        """Apply ``op``. With ``records`` (the engine's observation records of it) every policy
        decision -- victims, bypasses, reclaims, rejections -- is taken from them, and what the
        contract fixes about each record (which block is written next, its key and depth,
        whether it is a rewrite, the class it is logged with, that a victim is resident and not
        in flight) is checked; mismatches go to :attr:`problems`. Without, the decisions are
        predicted from :attr:`rules` (memory that cannot fill). ``evict_tiers``: for each eviction
        of the op in turn, the tiers its allocation could evict from (what the engine's probe
        saw; default the victim's tier); each eviction as the contract sees it goes to
        :attr:`evictions`. ``place_tiers``: for each new block of the op in turn, its placement's
        tiers (the probe's; none: its tier is not judged)."""
        self.now = op.t
        self._t_last = op.t
        self.op_index += 1
        self.last_infer = None
        self.last_prompt_keys = None
        self.problems = []
        self.evictions = []
        todo = list(records) if records is not None else None
        self._end_pins(op.t)
        match op:
            case Open():
                self._new(op.ctx, op.session, op.one_shot)
            case Fork():
                self._fork(op)
            case Append():
                c = self.ctxs[op.ctx]
                c.run()
                for msg in op.messages:
                    c.admit(msg, temporary=op.temporary)
            case Replace():
                c = self.ctxs[op.ctx]
                c.run()
                old = c.seq[op.index]
                c.state[old.uid] = MsgState.EXPIRED
                c.deadline.pop(old.uid, None)
                new = c.message(op.message)
                c.state[new.uid] = MsgState.TEMPORARY if c.one_shot else MsgState.ACTIVE
                c.invalidate(op.index, self.bs)
                c.seq[op.index] = new
            case Remove():
                c = self.ctxs[op.ctx]
                c.invalidate(op.index, self.bs)
                for m in c.seq[op.index : op.index + op.count]:
                    c.state[m.uid] = MsgState.EXPIRED
                    c.deadline.pop(m.uid, None)
                del c.seq[op.index : op.index + op.count]
            case Pin():
                c = self.ctxs[op.ctx]
                end = None if op.ttl is None else op.t + op.ttl
                for m in c.span(op.start, op.stop):
                    if c.state[m.uid] is MsgState.TEMPORARY:
                        continue  # L3.4
                    if c.state[m.uid] is MsgState.PINNED:
                        had = c.deadline.get(m.uid)
                        end_now = None if had is None or end is None else max(had, end)
                    else:
                        end_now = end
                    c.state[m.uid] = MsgState.PINNED
                    c.deadline[m.uid] = end_now
            case Unpin():
                c = self.ctxs[op.ctx]
                for m in c.span(op.start, op.stop):
                    c.unpin(m.uid)
            case Infer():
                self._infer(op, todo, list(evict_tiers), list(place_tiers))
            case TurnEnd():
                c = self.ctxs[op.ctx]
                reasoning = [i for i, m in enumerate(c.seq) if m.kind is MessageKind.REASONING]
                if reasoning:
                    c.invalidate(reasoning[0], self.bs)
                    for i in reasoning:
                        c.state[c.seq[i].uid] = MsgState.EXPIRED
                        c.deadline.pop(c.seq[i].uid, None)
                    c.seq = [m for m in c.seq if m.kind is not MessageKind.REASONING]
            case Return():
                into = self.ctxs[op.into]
                into.run()
                into.admit(op.result, temporary=False)
                self.ctxs[op.ctx].close()
            case Close():
                self.ctxs[op.ctx].close()
            case EndSession():
                for cid in self.sessions[op.session]:
                    if self.ctxs[cid].open:
                        self.ctxs[cid].close()
                self.ended.add(op.session)
        if todo is not None:
            self._follow_reclaims(todo)
        elif self.rules.reclaim:
            self.resident &= self.held()

    def _new(self, ctx: ContextId, session: str, one_shot: bool) -> ShadowContext:
        c = ShadowContext(ctx, session, one_shot)
        self.ctxs[ctx] = c
        self.sessions.setdefault(session, []).append(ctx)
        return c

    def _fork(self, op: Fork) -> None:
        src = self.ctxs[op.src]
        upto = len(src.seq) if op.upto is None else op.upto
        c = self._new(op.ctx, src.session, src.one_shot)
        c.next_uid = src.next_uid
        c.seq = list(src.seq[:upto])
        for m in c.seq:  # L6: live messages take the branch's phase, pins are not inherited
            temporary = src.state[m.uid] is MsgState.TEMPORARY
            c.state[m.uid] = MsgState.TEMPORARY if temporary else MsgState.ACTIVE
        shared = sum(m.tokens for m in c.seq)
        keep = min(src.valid, shared // self.bs)  # P5
        c.chain = list(src.chain[:keep])
        c.valid = keep
        c.packed = min(src.packed, shared // self.bs)  # (the same keys: MV6)

    def _end_pins(self, t: float) -> None:
        for c in self.ctxs.values():
            if c.deadline:  # (a context with no pin: nothing to end; a closed one has none)
                for uid, end in list(c.deadline.items()):
                    if end is not None and end <= t:
                        c.unpin(uid)

    # -------------------------------------------------------------- the inference boundary

    def _infer(
        self,
        op: Infer,
        todo: list[Observation] | None,
        evict_tiers: list[Sequence[str]],
        place_tiers: list[Sequence[str]],
    ) -> None:
        c = self.ctxs[op.ctx]
        bs = self.bs
        for m in c.seq:  # infer_start
            if c.state[m.uid] is MsgState.SUSPENDED:
                c.state[m.uid] = MsgState.ACTIVE
        c.runnable = True
        prompt = c.tokens()
        temps = [i for i, m in enumerate(c.seq) if c.state[m.uid] is MsgState.TEMPORARY]
        cut = c.starts()[temps[0]] // bs if temps else None
        for msg in op.output:
            c.admit(msg, temporary=False)
        v = c.valid
        c.chain = c.chain[:v]  # the invalid tail goes first (P7.2), committed or not
        packed = self.packer.pack(c.seq)  # the prompt's full blocks are its first prompt // bs
        c.packed = sum(1 for k, _ in packed if k is not None)
        self.last_prompt_keys = [k for k, _ in packed[: prompt // bs] if k is not None]
        blocks = packed[v:]
        hits = 0
        for d, (hit, _) in enumerate(blocks, start=v):
            if hit is None or d >= prompt // bs or hit not in self.resident:
                break
            hits += 1
        misses = blocks[hits:]
        placed: list[tuple[BlockKey | None, tuple[int, ...], bool]] = []  # key, uids, attach?
        if todo is None:
            for key, uids in misses:
                if key is not None and key in self.resident:  # recomputed in place (B6.3)
                    self._use(key)
                    placed.append((key, uids, True))
                elif key is None or (self.rules.bypass and c.within(uids) is BlockClass.TEMPORARY):
                    placed.append((key, uids, False))
                else:
                    self._index(key, op.t)
                    placed.append((key, uids, True))
            committed = True
        else:
            committed = self._follow_infer(
                c, op, todo, blocks, hits, v, placed, evict_tiers, place_tiers
            )
        if committed:
            for kept_key, _ in c.chain:  # the kept prefix is used by this inference (PP3)
                self._use(kept_key)
            tail = [(k, u) for k, u in blocks[:hits] if k is not None]
            for key, uids, attach in placed:
                if not attach or key is None:
                    break
                tail.append((key, uids))
            for key, _ in tail:
                self._use(key)
            c.chain += tail
            if cut is not None:
                del c.chain[cut:]
            c.valid = len(c.chain)
            c.last_infer = op.t
        self.last_infer = InferFigures(
            prompt,
            (v + hits) * bs,
            prompt - (v + hits) * bs,
            sum(m.tokens for m in op.output),
            v,
            hits,
            len(placed),
        )
        # infer_end: live unpinned messages wait; temporaries expire and leave (P7.6, P8)
        c.runnable = False
        for m in c.seq:
            if c.state[m.uid] is MsgState.ACTIVE:
                c.state[m.uid] = MsgState.SUSPENDED
        c.suspended_at = op.t + op.duration
        gone = [i for i, m in enumerate(c.seq) if c.state[m.uid] is MsgState.TEMPORARY]
        if gone:
            c.invalidate(gone[0], self.bs)
            for i in gone:
                c.state[c.seq[i].uid] = MsgState.EXPIRED
            c.seq = [m for i, m in enumerate(c.seq) if i not in set(gone)]
        if c.one_shot:
            c.close()

    def _index(self, key: BlockKey, t: float) -> None:
        self.resident.add(key)
        self.born[key] = t
        self._use(key)

    def _use(self, key: BlockKey) -> None:
        """An inference uses ``key`` now (hit, kept, written or rewritten: PP3 recency)."""
        self.touch[key] = self.now
        self.touch_op[key] = self.op_index
        if self.pool is not None:  # (its terms read the use: found again at the next sync)
            self.pool.dirty.add(key)

    def _leave(self, key: BlockKey) -> None:
        """``key`` is no longer resident: what a resident block has, it has no more."""
        if self.pool is not None:
            self.pool.dirty.add(key)
        if key in self.resident:
            self.resident.discard(key)
            if (tier := self.tier.get(key)) is not None:
                self._used[tier] -= 1
        self.born.pop(key, None)
        self.touch_op.pop(key, None)

    def _drop(self, key: BlockKey) -> list[tuple[BlockKey, ShadowContext]]:
        """A block leaves memory; every chain holding it is cut there (M4.3). Returns what the
        cuts took: each (key, context) whose holding ended."""
        self._leave(key)
        d = self.packer.key_depth[key]
        cut: list[tuple[BlockKey, ShadowContext]] = []
        for h in self.ctxs.values():
            if h.open and len(h.chain) > d and h.chain[d][0] == key:
                cut += ((k, h) for k, _ in h.chain[d:])
                del h.chain[d:]
                h.valid = min(h.valid, d)
        return cut

    def _follow_infer(
        self,
        c: ShadowContext,
        op: Infer,
        todo: list[Observation],
        blocks: Sequence[tuple[BlockKey | None, tuple[int, ...]]],
        hits: int,
        v: int,
        placed: list[tuple[BlockKey | None, tuple[int, ...], bool]],
        evict_tiers: list[Sequence[str]],
        place_tiers: list[Sequence[str]],
    ) -> bool:
        """Consume the inference's records (up to the reclaims); True if it was committed."""
        bad = self.problems.append
        if not todo or not isinstance(todo[0], InferObs):
            bad("no infer record")
            return False
        todo.pop(0)
        self._begin_copies()
        logged: list[BlockKey] = []
        while todo and isinstance(hit := todo[0], HitObs):
            logged.append(hit.key)
            todo.pop(0)
        if logged != [k for k, _ in blocks[:hits]]:
            bad(f"hit records name {logged}, the contract's hits are {blocks[:hits]}")
        misses = blocks[hits:]
        flight = {k for k, _ in c.chain} | {k for k, _ in blocks[:hits] if k is not None}
        pins = {h.id: h.pin_depth(self.bs) for h in self.ctxs.values() if h.open}
        if self.capacity is not None:  # the pre-check rejects iff the writes cannot fit (M4.4)
            pre = self._admission(misses, flight, pins)
            # (a rejection with a placement pending is the first write's: judged below)
            if pre.fits and todo and isinstance(todo[0], RejectObs) and not place_tiers:
                bad(f"rejected an inference that fits at admission: it {pre} (M4.4)")
            elif not pre.fits and not (todo and isinstance(todo[0], RejectObs)):
                bad(f"admitted an inference that cannot fit: it {pre} (M4.4)")
        rejected = False
        # MV4: the leading misses with a copy and no primary are loads, in order
        full = len(self.last_prompt_keys or ())
        want: list[tuple[BlockKey, int]] = []
        for d, (key, _) in enumerate(misses, start=v + hits):
            if key is None or d >= full or key in self.resident or not self.copies.source(key):
                break
            want.append((key, d))
        loaded: tuple[BlockKey, str] | None = None  # the last load, for its exclusive drop
        loose: Counter[str] = Counter()  # slots of this inference's unindexed writes, by tier
        freed: str | None = None  # the tier of the slot an eviction just freed
        at_refusal: dict[str, int] | None = None  # free slots before a roll-back's frees
        cands: Candidates | None = None  # the evictable blocks, from the first eviction on
        while todo and not (isinstance(todo[0], FreeObs) and todo[0].reason == FreeReason.RECLAIM):
            r = todo.pop(0)
            if isinstance(r, EvictObs):
                if r.key not in self.resident:
                    bad(f"evicted block {r.block} ({r.key}), which is not resident")
                    continue
                # M4: a free slot is taken before any eviction, and the victim's then. Judged for
                # an allocation's eviction (the probe saw it), not a checker's evict_now
                if evict_tiers:
                    tiers = evict_tiers.pop(0)
                    free = self._free_slots(loose)
                    for t in tiers:
                        if free.get(t, 0) > 0:
                            bad(f"evicted block {r.block} while tier {t} had {free[t]} free (M4)")
                    freed = self.tier.get(r.key, r.tier)
                else:
                    tiers = (r.tier,)
                if cands is None:
                    cands = Candidates(self, KeptTerms(*self._holders(pins)), flight, self.rank)
                ev = cands.eviction(r.key, tiers)
                self.evictions.append(ev)
                if (cls := ev.victim.state) is not r.state:
                    bad(f"evict of block {r.block} logged as {r.state.value}; it is {cls.value}")
                cands.cut(r.key, self._drop(r.key))
            elif isinstance(r, AllocObs):
                if len(placed) == len(misses):
                    bad(f"alloc of block {r.block} beyond the {len(misses)} blocks to write")
                    continue
                key, uids = misses[len(placed)]
                depth = v + hits + len(placed)
                rewrite = key is not None and key in self.resident
                if (r.key, r.depth, r.rewrite) != (key, depth, rewrite):
                    bad(
                        f"alloc (key, depth, rewrite) = {(r.key, r.depth, r.rewrite)}; the next "
                        f"block to write is {(key, depth, rewrite)}"
                    )
                if not rewrite and (cls := c.within(uids)) is not r.state:
                    bad(f"alloc of block {r.block} logged as {r.state.value}; it is {cls.value}")
                if r.tier in self.copy_tiers:
                    bad(f"block {r.block} written in tier {r.tier}, which holds copies only")
                if freed is not None and r.tier != freed:
                    bad(f"block {r.block} written in tier {r.tier}, the victim's was {freed} (M4)")
                pt = place_tiers.pop(0) if place_tiers and not rewrite else None
                if pt is not None and freed is None and (free := self._free_slots(loose)):
                    to = next((t for t in pt if free.get(t, 0) > 0), None)  # M4: the first
                    if r.tier != to:  # preferred tier with a free slot takes the block
                        bad(
                            f"block {r.block} written in tier {r.tier}, not {to} of {list(pt)} (M4)"
                        )
                freed = None
                if key is None:
                    loose[r.tier] += 1
                if key is not None:
                    flight.add(key)
                    if cands is not None:
                        cands.leave(key)  # (an orphan rewritten: in flight now)
                    if not rewrite:
                        self._index(key, op.t)
                        self.tier[key], self.slot[key] = r.tier, r.block
                        self._used[r.tier] += 1
                    self._use(key)
                placed.append((key, uids, key is not None))
            elif isinstance(r, BypassObs):
                if not placed or placed[-1][0] != r.key:
                    bad(f"bypass of block {r.block}, not the block just written")
                    continue
                key, uids, _ = placed[-1]
                placed[-1] = (key, uids, False)
                if key is not None:
                    self._leave(key)  # written for this inference, never indexed
                    loose[r.tier] += 1
            elif isinstance(r, RejectObs):
                rejected = True
                if place_tiers:  # P7.7: a write found no slot; every tier it could take was full
                    free = at_refusal if at_refusal is not None else self._free_slots(loose)
                    for t in place_tiers[0]:
                        if free.get(t, 0) > 0:
                            bad(f"a write was refused while tier {t} had {free[t]} free (P7.7)")
            elif isinstance(r, FreeObs) and r.reason == FreeReason.REJECT:
                if at_refusal is None:  # (the roll-back precedes the reject record)
                    at_refusal = self._free_slots(loose)
                if r.key is not None and r.key in self.resident:
                    self._leave(r.key)
                    if cands is not None:
                        cands.leave(r.key)
                else:  # (a partial or bypassed write, rolled back)
                    loose[r.tier] -= 1
            elif isinstance(r, CopyObs):
                self._follow_copy(r, loose, todo)
            elif isinstance(r, DropCopyObs):
                self._follow_drop(r, loose, loaded, todo)
            elif isinstance(r, LoadObs):
                while want and not self.copies.source(want[0][0]):
                    want.pop(0)  # its copy left for room while the request wrote: recomputed
                if not want or (r.key, r.depth) != want[0]:
                    bad(f"load of {r.key} at depth {r.depth}; the next load is {want[:1]} (MV4)")
                    continue
                want.pop(0)
                src = self.copies.source(r.key)
                if r.from_tier != src:
                    bad(f"load of {r.key} from tier {r.from_tier}; the first copy is in {src}")
                    continue
                loaded = (r.key, r.from_tier)
                self._follow_load(r)
            elif not (isinstance(r, FreeObs) and r.reason in _COMMIT_FREES):
                bad(f"unexpected record in an inference: {r.kind}")
        if rejected:
            return False
        self._end_copies()
        if len(placed) != len(misses):
            bad(f"{len(placed)} of {len(misses)} blocks written and no rejection")
            return False
        missed = [k for k, _ in want if self.copies.source(k)]
        if missed:
            bad(f"block {missed[0]} had a copy below and was recomputed, not loaded (MV4)")
        return True

    def _free_slots(self, loose: Counter[str]) -> dict[str, int]:
        """Each tier's free slots by the model's own count (none without ``capacity``): its
        resident blocks' tiers and ``loose``, the inference's unindexed writes."""
        if self.capacity is None:
            return {}
        used = self._used
        return {t: n - used[t] - loose[t] for t, n in self.capacity.items()}

    def _admission(
        self,
        misses: Sequence[tuple[BlockKey | None, tuple[int, ...]]],
        flight: set[BlockKey],
        pins: dict[ContextId, int],
    ) -> Admission:
        """The pre-check's figures, from the contract's own state (``capacity`` is set)."""
        assert self.capacity is not None
        needed = sum(1 for key, _ in misses if key is None or key not in self.resident)
        # between inferences every used slot holds an indexed block (partial and bypassed blocks
        # leave at their inference's commit, rejected writes at its roll-back)
        free = sum(n for t, n in self.capacity.items() if t not in self.copy_tiers)
        free -= len(self.resident)
        if needed <= free:
            return Admission(needed, free, 0, 0)
        evictable = self.resident - flight
        # L5.3: only a block in a holder's pinned prefix can be Pinned; those are classed
        prefixes = {k for h in self.ctxs.values() if h.open for k, _ in h.chain[: pins[h.id] + 1]}
        if prefixes & evictable:
            holders, _ = self._holders(pins)
            evictable -= {
                k
                for k in prefixes & evictable
                if self.figures(k, holders, pins).state is BlockClass.PINNED
            }
        orphans = sum(1 for key, _ in misses if key in evictable)
        return Admission(needed, free, len(evictable), orphans)

    def _follow_reclaims(self, todo: list[Observation]) -> None:
        # every block's holders and every context's pin depth, found once for the op's
        # reclaims and again only after a drop cut a chain (a Dead block's drop cuts none; a
        # live one's, the error being looked for, changes its holders' chains): once per
        # reclaim, they made the op's work quadratic in its reclaims
        memo: tuple[dict[BlockKey, list[ShadowContext]], dict[ContextId, int]] | None = None
        for r in todo:
            if isinstance(r, DropCopyObs) and r.reason == "reclaim":
                self._follow_drop(r, None, None)
            elif not (isinstance(r, FreeObs) and r.reason == FreeReason.RECLAIM):
                self.problems.append(f"unexpected record after the op: {r.kind}")
            elif r.key is None or r.key not in self.resident:
                self.problems.append(f"reclaimed block {r.block}, which is not resident")
            else:
                if memo is None:
                    memo = self._holders()
                if (cls := self.figures(r.key, *memo).state) is not r.state:
                    self.problems.append(
                        f"reclaim of block {r.block} logged as {r.state.value}; it is {cls.value}"
                    )
                if self._drop(r.key):
                    memo = None


#: the block size the validity check packs with: whether an op is valid input does not depend on
#: it, and one block per context keeps an inference's packing O(messages)
VALIDITY_BLOCK = 1 << 40


def validity_model() -> Shadow:
    """A contract model for judging validity alone (:meth:`Shadow.refusal`, then apply)."""
    return Shadow(VALIDITY_BLOCK)


def contract_refusal(ops: Sequence[Op]) -> tuple[int, str] | None:
    """The first op of ``ops`` that is not valid input, by the contract model
    (:meth:`Shadow.refusal`), with why; None when every op is. O(ops): asked once, when an engine
    under test refused an op (whose engine it is does not matter: a patched reference is judged
    like any other)."""
    shadow = validity_model()
    for i, op in enumerate(ops):
        if (why := shadow.refusal(op)) is not None:
            return i, why
        shadow.apply(op)
    return None
