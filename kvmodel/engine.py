"""The reference engine: applies trace ops to contexts and memory under a policy (spec §primitives).

The engine is the only mutator of the model. Per op it (1) integrates zombie block-seconds up to
the op's time, (2) expires pins whose TTL ran out, (3) applies the op, (4) lets the policy reclaim
(``on_op``). Policies and checkers see it through :attr:`Engine.view`.

An ``infer`` is the heart (spec P7)::

    materialized chain  [ kept: 0 .. v-1 ][ old tail v .. (invalid, dropped) ]
    logical sequence    [ prompt .............................. ][ output ....... ]
    packed from v       [ lookup hits ][ misses: allocate through the policy ][ partial ]
                          contiguous     evict by the policy's order when full   freed after
                          from v only

Work per inference is proportional to the blocks packed from ``v`` (new blocks), not to the
context's length: the kept prefix is reused by count, and block recency for it is derived from
the context's ``last_infer`` (see ``EngineView.block`` in :mod:`kvmodel._engine_view`); the
hot path itself lives in :mod:`kvmodel._admission`.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from kvmodel._admission import evict, infer
from kvmodel._engine_view import EngineView, named_contexts
from kvmodel._eviction import PolicyOrder
from kvmodel._movement import Movement
from kvmodel._rank_index import RankIndex
from kvmodel._resident import ResidentBlock
from kvmodel.config import EngineConfig
from kvmodel.contexts import Context
from kvmodel.errors import (
    InternalError,
    KVModelError,
    PolicyError,
    TraceError,
    is_interrupt,
    policy_raised,
)
from kvmodel.ids import BlockId, BlockKey, ContextId, SessionId, TierName
from kvmodel.io.observations import (
    FreeObs,
    FreeReason,
    ObservationLog,
)
from kvmodel.io.trace import (
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
from kvmodel.lifecycle import (
    BlockClass,
    Event,
    MsgState,
)
from kvmodel.memory import Memory
from kvmodel.messages import AgentKind
from kvmodel.policy import (
    BasePolicy,
    Placement,
    Policy,
    Reclaim,
    declared_bypass,
    declared_rank,
    declared_reclaim,
    moves,
)
from kvmodel.probe import EngineProbe, EngineStats
from kvmodel.residency import Residency
from kvmodel.view import ModelView

__all__ = ["Engine", "EngineProbe", "EngineStats"]


def _declarations(policy: Policy) -> tuple[object, object, object]:
    """The attributes a declared rule is read from, compared after every op."""
    return (
        getattr(policy, "reclaim", None),
        getattr(policy, "bypasses", None),
        getattr(policy, "rank", None),
    )


class Engine:
    """The executable model. ``apply(op)`` one op at a time; read it through :attr:`view`."""

    def __init__(
        self,
        config: EngineConfig,
        policy: Policy,
        *,
        fast: bool | None = None,
        observe: bool = True,
    ) -> None:
        """``fast``: use the incremental rank index for a rank policy (default: whenever the
        policy's order is its declarative ``rank``); ``False`` forces the general path.
        ``observe=False``: build no observation records (:attr:`log` stays empty; statistics
        are kept) -- for a replay whose records nobody reads."""
        self.config = config
        self.block_size = config.block_size
        self.policy = policy
        self.memory = Memory(config.tiers)
        #: a tier's place in the configured order (0: the fastest)
        self.tier_index: Mapping[TierName, int] = {t.name: i for i, t in enumerate(config.tiers)}
        self.contexts: dict[ContextId, Context] = {}
        self.sessions: dict[SessionId, list[ContextId]] = {}
        self.ended_sessions: set[SessionId] = set()
        #: Derivation edges of the fork DAG: (from, to, kind) with kind in
        #: fork | spawn | compaction | return.
        self.edges: list[tuple[ContextId, ContextId, str]] = []
        #: resident KV: blocks, holders, the prefix index, the dead set, the request in flight
        self.residency = Residency(self.contexts, self.memory)
        #: the store's, for readers: resident blocks, the prefix index, the dead set
        self.blocks: Mapping[BlockId, ResidentBlock] = self.residency.blocks
        self.index: Mapping[BlockKey, BlockId] = self.residency.index
        self.dead: AbstractSet[BlockId] = self.residency.dead
        self.log = ObservationLog()
        self.observing = observe
        self.stats = EngineStats(
            evictions={t.name: 0 for t in config.tiers}, frees={t.name: 0 for t in config.tiers}
        )
        self.now = 0.0
        self.op_index = -1
        self._pins: list[tuple[float, int, ContextId, int]] = []
        self._pin_seq = 0
        view = EngineView(self)
        self.view: ModelView = view
        #: checkers observe decisions as they are made (None: no observer)
        self.probe: EngineProbe | None = None
        #: the policy's declarations, read once, here (spec PP4): the classes it bypasses
        #: (enforced at placement; None: unchecked), its reclaim rule (applied after every op;
        #: None: its on_op is code) and its rank. A run that changes one is refused, so what a
        #: proof inlined from them is what ran.
        self.bypass_rule = declared_bypass(policy)
        #: every new block's placement when the policy's place() is the base class's (the
        #: configured tier order, no bypass) and no declared bypass must be checked against it:
        #: admission then builds no NewBlock for a call whose answer does not depend on it
        self.fixed_placement: Placement | None = (
            Placement(tuple(t.name for t in config.tiers if not t.copies_only))
            if getattr(policy.place, "__func__", None) is BasePolicy.place and not self.bypass_rule
            else None
        )
        self.reclaim_rule = declared_reclaim(policy)
        rank = declared_rank(policy)
        self._declared = _declarations(policy)
        #: the policy as a BasePolicy when its reclaim rule is declared (only then is it one)
        self._declaring: BasePolicy | None = (
            policy if isinstance(policy, BasePolicy) and self.reclaim_rule is not None else None
        )
        if fast and rank is None:
            raise ValueError(f"policy {policy.name!r} has no declarative rank: no fast path")
        #: where victims come from (spec PP1): the rank index or the policy's order
        self.victims: PolicyOrder | RankIndex = (
            RankIndex(self, rank, view.features)
            if rank is not None and fast is not False
            else PolicyOrder(self)
        )
        self.residency.marks = self.victims
        #: the movement layer (spec/movement.md), for a policy that moves KV; None otherwise
        self.movement: Movement | None = Movement(self) if moves(policy) else None

    def use_view(self, view: EngineView) -> None:
        """Show policies ``view`` from now on, and key the rank index by its features (an
        engine variant with a view of its own: the checkers' engine mutants)."""
        self.view = view
        if isinstance(self.victims, RankIndex):
            self.victims.features = view.features
            self.victims.one_entry = None  # (every key from this view's features)

    # ------------------------------------------------------------------ driving

    def apply(self, op: Op) -> None:
        """Apply one op (spec P). Bad input raises :class:`TraceError` without a location."""
        if self.stats.t_first is None:
            self.stats.t_first = op.t
            self.now = op.t
        if op.t < self.now:
            raise TraceError(
                f"time went backwards: expected t >= {self.now:g} (got {op.t:g})", field="t"
            )
        self.stats.zombie_block_seconds += len(self.dead) * (op.t - self.now)
        self.now = op.t
        self.stats.t_last = op.t
        self.op_index += 1
        self._expire_pins(op.t)
        match op:
            case Open():
                self._open(op)
            case Fork():
                self._fork(op)
            case Append():
                c = self.context(op.ctx)
                c.phase_event(Event.RUN)
                c.admit(op.messages, temporary=op.temporary)
            case Replace():
                c = self.context(op.ctx)
                c.phase_event(Event.RUN)
                c.replace(op.index, op.message)
            case Remove():
                self.context(op.ctx).remove(op.index, op.count)
            case Pin():
                self._pin(op)
            case Unpin():
                self.context(op.ctx).unpin(op.start, op.stop)
            case Infer():
                self._infer(op)
            case TurnEnd():
                self.context(op.ctx).end_turn()
            case Return():
                self._return(op)
            case Close():
                self.close(self.context(op.ctx))
            case EndSession():
                self._end_session(op)
        for cid in named_contexts(op, self):
            self._bump(self.contexts[cid])
        reclaims = self._reclaims(op)
        for bid in reclaims:
            self._policy_free(bid)
        if self.movement is not None:
            m = self.movement
            m.after_op(self.reclaim_rule is Reclaim.DEAD or m.reclaims_dead)
        self.stats.dead_resident_max = max(self.stats.dead_resident_max, len(self.dead))

    def _reclaims(self, op: Op) -> list[BlockId]:
        """What the policy frees after ``op``: its declared rule, applied here after its
        ``observe`` (the rule read when the engine was built, never re-read), or what its
        ``on_op`` code returns."""
        base = self._declaring
        if base is None:
            try:
                return list(self.policy.on_op(self.view, op))
            except KVModelError:
                raise
            except BaseException as err:
                if is_interrupt(err):
                    raise
                raise policy_raised(self.policy.name, "on_op", err) from err
        try:
            base.observe(self.view, op)
        except KVModelError:
            raise
        except BaseException as err:
            if is_interrupt(err):
                raise
            raise policy_raised(base.name, "observe", err) from err
        r, b, k = self._declared
        if base.reclaim is not r or base.bypasses is not b or base.rank is not k:
            self._redeclared(base)
        return list(self.view.dead()) if self.reclaim_rule is Reclaim.DEAD else []

    def _redeclared(self, pol: BasePolicy) -> None:
        """A declaration is not the object read when the engine was built: equal copies (a
        pickled or copied engine: the exhaustive search copies every state) are kept; a
        changed value is refused."""
        now = _declarations(pol)
        if now != self._declared:
            raise PolicyError(
                f"policy {pol.name!r} changed a declaration during the run (reclaim, bypasses, "
                f"rank: {self._declared} -> {now}); they are read once, when the engine is "
                "built (spec PP4): write the rule as code instead",
                kind="protocol",
            )
        self._declared = now

    # ------------------------------------------------------------------ contexts

    def context(self, ctx: ContextId, field: str = "ctx") -> Context:
        """The open context ``ctx`` (a TraceError naming ``field`` if it is not one)."""
        c = self.contexts.get(ctx)
        if c is None:
            raise TraceError(f"expected an open context (got unknown context {ctx!r})", field=field)
        if not c.is_open:
            raise TraceError(f"expected an open context (context {ctx!r} is closed)", field=field)
        return c

    def _new_ctx_id(self, ctx: ContextId) -> None:
        if ctx in self.contexts:
            raise TraceError(f"expected a new context id ({ctx!r} already exists)", field="ctx")

    def _register(self, c: Context) -> None:
        if c.session in self.ended_sessions:
            raise TraceError(f"session {c.session!r} has ended", field="session")
        if self.movement is not None:
            c.refs = self.movement.refs
        self.contexts[c.id] = c
        self.sessions.setdefault(c.session, []).append(c.id)

    def _open(self, op: Open) -> None:
        self._new_ctx_id(op.ctx)
        if op.parent is not None:
            self.context(op.parent, "parent")
        c = Context(
            op.ctx,
            op.session,
            op.agent,
            block_size=self.block_size,
            t=op.t,
            parent=op.parent,
            spawn=op.spawn,
            one_shot=op.one_shot,
        )
        self._register(c)
        if op.parent is not None:
            kind = "compaction" if op.agent is AgentKind.COMPACTOR else "spawn"
            self.edges.append((op.parent, op.ctx, kind))

    def _fork(self, op: Fork) -> None:
        src = self.context(op.src, "src")
        self._new_ctx_id(op.ctx)
        upto = len(src) if op.upto is None else op.upto
        if upto > len(src):
            raise TraceError(
                f"expected upto <= {len(src)}, the length of {src.id!r} (got {upto})", field="upto"
            )
        child = src.fork(op.ctx, upto, op.t)
        self._register(child)
        for spec in child.materialized:
            self.residency.attach(child, self.residency.block_of(spec))
        self.edges.append((src.id, child.id, "fork"))

    def _pin(self, op: Pin) -> None:
        c = self.context(op.ctx)
        deadline = op.deadline
        for uid in c.pin(op.start, op.stop, deadline):
            d = c.pin_deadline.get(uid)
            if d is not None:
                heapq.heappush(self._pins, (d, self._pin_seq, c.id, uid))
                self._pin_seq += 1

    def _expire_pins(self, t: float) -> None:
        """TTL pins whose deadline is at or before ``t`` end before the op at ``t`` (spec P6)."""
        while self._pins and self._pins[0][0] <= t:
            deadline, _, cid, uid = heapq.heappop(self._pins)
            c = self.contexts[cid]
            if c.is_open and uid in c.pin_deadline and c.pin_deadline[uid] == deadline:
                c.unpin_uid(uid)
                self._bump(c)

    def _return(self, op: Return) -> None:
        c = self.context(op.ctx)
        into = self.context(op.into, "into")
        if into is c:
            raise TraceError("expected 'into' to name another context", field="into")
        into.phase_event(Event.RUN)
        try:
            into.admit([op.result], temporary=False)
        except TraceError as e:
            raise TraceError(e.problem, field=f"result.{e.field or 'id'}") from None
        self.edges.append((c.id, into.id, "return"))
        self.close(c)

    def _end_session(self, op: EndSession) -> None:
        if op.session not in self.sessions:
            raise TraceError(f"expected a known session (got {op.session!r})", field="session")
        if op.session in self.ended_sessions:
            raise TraceError(f"session {op.session!r} has already ended", field="session")
        for cid in self.sessions[op.session]:
            c = self.contexts[cid]
            if c.is_open:
                self.close(c)
        self.ended_sessions.add(op.session)

    def close(self, c: Context) -> None:
        """Closing takes effect at once: the chain is dropped, every message Expired (P11)."""
        self.residency.detach_from(c, 0)
        c.valid = 0
        c.close(self.now)

    # ------------------------------------------------------------------ chain bookkeeping

    def _bump(self, x: ResidentBlock | Context) -> None:
        self.residency.bump(x)

    def _policy_free(self, bid: BlockId) -> None:
        b = self.blocks.get(bid)
        if b is None:
            raise PolicyError(
                f"policy {self.policy.name!r} freed block {bid}, which is not resident",
                kind="bad-free",
            )
        self.free(b, FreeReason.RECLAIM)

    def free(self, b: ResidentBlock, reason: str) -> None:
        """Free a resident block for ``reason`` (a reclaim, a partial tail, a bypass, a
        rollback): the record, the count, the drop."""
        if self.observing:
            self.log.add(
                FreeObs(
                    self.log.next_seq,
                    self.now,
                    self.op_index,
                    b.id,
                    b.spec.key,
                    b.tier,
                    b.depth,
                    self.block_class(b),
                    reason,
                )
            )
        self.stats.frees[b.tier] += 1
        self.residency.drop(b)

    # ------------------------------------------------------------------ classes and candidates

    def graph(self) -> Any:
        """The fork DAG of contexts as a ``networkx.DiGraph`` (see :mod:`kvmodel.graphs`)."""
        from kvmodel.graphs import fork_dag

        return fork_dag(self)

    def prefix_tree(self) -> Any:
        """Resident KV as a prefix tree of block keys (see :mod:`kvmodel.graphs`)."""
        from kvmodel.graphs import prefix_tree

        return prefix_tree(self)

    def message_states(self) -> dict[tuple[ContextId, int], MsgState]:
        """Every (context, message instance) ever admitted and its current state (spec L1)."""
        return {(c.id, uid): st for c in self.contexts.values() for uid, st in c.states().items()}

    def block_parent(self, block: BlockId) -> BlockKey:
        """The hash-chain key of a resident block's parent (``ROOT_KEY`` at depth 0)."""
        return self.blocks[block].spec.parent

    def block_class(self, b: ResidentBlock) -> BlockClass:
        """Spec L5.2 (see :meth:`Residency.block_class`)."""
        return self.residency.block_class(b)

    def _infer(self, op: Infer) -> None:
        infer(self, op)

    def touch_now(
        self, block: BlockId, *, t: float | None = None, op_index: int | None = None
    ) -> None:
        """Mark a resident block used now, between ops (or, given ``t`` and ``op_index``, as
        used by the op about to be applied). The model never does this itself (a refused
        inference touches nothing, P7.7); a checker does, to follow an implementation whose
        lookups refresh recency (spec/invariants.md §Oracle)."""
        b = self.blocks[block]
        b.touch = self.now if t is None else t
        b.touch_op = self.op_index if op_index is None else op_index
        self._bump(b)

    def evict_now(self, block: BlockId, ctx: ContextId) -> None:
        """Evict a resident, evictable block between ops, recorded as an eviction for ``ctx``'s
        inference. The model never does this itself (it evicts only for room, M4); a checker
        does, to follow an implementation that evicts more than it needs (a whole tree node,
        say: spec/invariants.md §Oracle)."""
        b = self.blocks.get(block)
        if b is None or not self.residency.evictable(b, self.view):
            raise InternalError(f"block {block} is not evictable now")
        evict(self, b, ctx)
