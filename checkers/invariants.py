"""Every invariant of spec/invariants.md as plain functions, and a :class:`Monitor` that applies
them to one engine run (replay, the stateful machine and the oracle all use it).

An invariant is checked at one of four moments, each a plain function here:

* *state* -- over the engine state after an op (``check_no_zombie``, ``check_prefix_closed``...);
* *log* -- over the observation records one op produced (``log_pinned``, ``log_bypass``...);
* *eviction* -- over the candidates at the moment of an eviction (``evict_priority``...): the
  victim, the candidates and their classes and suspension times as the contract model
  (:class:`checkers.nversion.Shadow`, following the log) computes them, never the engine's own
  view or cache; the engine's probe only says which tiers the allocation could evict from;
* *placement* -- over a placement decision as it is made (``place_deterministic``).

The :class:`Monitor` keeps the little memory some invariants need (the dead set before an op, the
expected prompt keys of an inference -- from the contract model's own packing --, blocks written as
Temporary and indexed), runs the contract model beside the engine (the ``engine-contract``
finding) and collects :class:`Violation` results. A violation is a result, never raised (STYLE
§6).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import attrs

from checkers.nversion import Shadow, compare
from checkers.structural import (
    Violation,
    check_accounting,
    check_chains,
    check_prefix_closed,
)
from kvmodel.engine import Engine
from kvmodel.errors import PolicyError, TraceError
from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.lifecycle import BLOCK_CLASS_PRIORITY, TRANSITIONS, BlockClass, Event, MsgState
from kvmodel.messages import AgentKind
from kvmodel.observations import (
    AllocObs,
    BypassObs,
    EvictObs,
    FreeObs,
    FreeReason,
    HitObs,
    InferObs,
    Observation,
)
from kvmodel.policy import STRUCTURAL_CLAIMS, Placement
from kvmodel.trace import Close, EndSession, Infer, Op, Return
from kvmodel.view import NewBlock

__all__ = [
    "BLOCK",
    "CONCRETE",
    "FINDINGS",
    "INVARIANTS",
    "ORDER",
    "STRUCTURAL",
    "BlockAt",
    "BlockTerms",
    "EvictionTerms",
    "Logic",
    "Monitor",
    "evict_live_before_dead",
    "evict_mru",
    "evict_priority",
    "log_bypass",
    "log_pinned",
    "log_reclaim_dead",
    "place_deterministic",
    "reachable",
]

#: name -> one line; the order is the report order. Formulas: spec/invariants.md.
INVARIANTS: Mapping[str, str] = MappingProxyType(
    {
        "accounting": "per tier free + used = capacity; writes = alloc records",
        "chains": "every open context's chain is resident, indexed and linked",
        "legal-transitions": "every message state change follows the transition table",
        "no-eviction-in-flight": "no block of the inference being admitted is evicted",
        "pinned-never-evicted": "no Pinned block is evicted or reclaimed",
        "no-stale-hit": "kept and hit blocks match the prompt's own hash chain",
        "prefix-closed-residency": "every resident block's parent is resident",
        "no-zombie-kv": "no dead block is resident at a quiescent point",
        "no-live-eviction-before-dead-reclaim": "no live eviction while dead/expired KV remains",
        "state-priority-eviction": "evict Dead < Expired < Temporary < Suspended < Active",
        "suspended-mru": "within Suspended, the most recently suspended goes first",
        "reclaim-dead-only": "a policy's reclaim frees only dead blocks",
        "temporary-bypass": "Temporary KV is bypassed, never indexed, never hit",
        "free-at-boundary": "KV a closing op kills is freed by that op",
        "deterministic-placement": "segment classes pick the first tier (Lachesis)",
        "endurance-budget": "projected device-years of every worn tier >= the bound",
    }
)

#: Claimed by every policy: a violation here is a bug in the engine (or a refused decision).
STRUCTURAL = STRUCTURAL_CLAIMS

#: Findings about a run that are not invariants (spec/invariants.md §Pseudo-invariants): no
#: policy claims or disclaims them, every run records them, and each is always a failure.
FINDINGS: Mapping[str, str] = MappingProxyType(
    {
        "policy-protocol": "the engine refused a policy decision, or the policy's code raised",
        "engine-internal": "the engine under test crashed",
        "nondeterministic": "two replays of one trace gave different observation logs",
        "engine-contract": "on ample memory the engine disagrees with an independent computation "
        "of the contract (checkers.nversion)",
    }
)

#: the Monitor compares the engine with the contract model after every one of a run's first
#: ``FULL_COMPARE_OPS`` ops, then after every ``COMPARE_EVERY``-th (the comparison reads every
#: resident block; the model follows every op and judges every eviction whatever the sampling)
FULL_COMPARE_OPS = 48
COMPARE_EVERY = 4

_LIVE_OR_TEMP = frozenset({BlockClass.TEMPORARY, BlockClass.SUSPENDED, BlockClass.ACTIVE})
_RECLAIMABLE = frozenset({BlockClass.DEAD, BlockClass.EXPIRED})


@functools.cache  # a fixed table: 30 answers, asked on every op
def reachable(before: MsgState | None, after: MsgState) -> bool:
    """``after`` follows from ``before`` by a path of L3 rows (one op may raise several events)."""
    seen: set[MsgState | None] = {before}
    todo: list[MsgState | None] = [before]
    while todo:
        s = todo.pop()
        for e in Event:
            nxt = TRANSITIONS.get((s, e))
            if nxt is after:
                return True
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


# ----------------------------------------------------------------------------- eviction-time


class EvictionTerms(Protocol):
    """What an eviction-order invariant reads of a block: :class:`~kvmodel.view.BlockInfo` and
    the contract model's :class:`checkers.nversion.EvictionTerms` both have it."""

    @property
    def id(self) -> BlockId: ...

    @property
    def state(self) -> BlockClass: ...

    @property
    def suspend_time(self) -> float | None: ...


@attrs.frozen
class Logic:
    """How an eviction-order predicate is evaluated: on concrete values (:data:`CONCRETE`, the
    Monitor) or as solver terms (``checkers.z3util.Z3_LOGIC``: z3rank's rank proofs and the BMC
    step). One definition, three readers (kvmodel issue 13)."""

    is_: Callable[[Any, BlockClass], Any]  # a state term is the class
    any_: Callable[..., Any]
    all_: Callable[..., Any]
    later: Callable[[Any, Any], Any]  # suspension x after y (None: -inf, never after)
    not_: Callable[[Any], Any]


def _later(x: float | None, y: float | None) -> bool:
    return x is not None and (y is None or x > y)


CONCRETE = Logic(
    lambda s, c: s is c, lambda *xs: any(xs), lambda *xs: all(xs), _later, lambda x: not x
)

_D, _E, _S = BlockClass.DEAD, BlockClass.EXPIRED, BlockClass.SUSPENDED
_LIVE_ORDERED = (BlockClass.TEMPORARY, BlockClass.SUSPENDED, BlockClass.ACTIVE)
#: every (lower, higher) pair of classes by BLOCK_CLASS_PRIORITY (computed once, not per check)
_PRIORITY_PAIRS = tuple(
    (x, y)
    for x in BlockClass
    for y in BlockClass
    if BLOCK_CLASS_PRIORITY[x] < BLOCK_CLASS_PRIORITY[y]
)

#: The eviction-order invariants, each as one predicate ``first_goes_first(a, b, logic)``: with
#: ``a`` and ``b`` both evictable, evicting ``b`` while ``a`` is a candidate violates the
#: invariant. ``a`` and ``b`` have ``state`` and ``suspend_time`` terms (spec/invariants.md,
#: Lifecycle-aware table; z3rank proves a rank never orders such a pair the wrong way).
ORDER: Mapping[str, Callable[[Any, Any, Logic], Any]] = MappingProxyType(
    {
        "no-live-eviction-before-dead-reclaim": lambda a, b, lg: lg.all_(
            lg.any_(lg.is_(a.state, _D), lg.is_(a.state, _E)),
            lg.any_(*(lg.is_(b.state, x) for x in _LIVE_ORDERED)),
        ),
        "state-priority-eviction": lambda a, b, lg: lg.any_(
            *(lg.all_(lg.is_(a.state, x), lg.is_(b.state, y)) for x, y in _PRIORITY_PAIRS)
        ),
        "suspended-mru": lambda a, b, lg: lg.all_(
            lg.is_(a.state, _S), lg.is_(b.state, _S), lg.later(a.suspend_time, b.suspend_time)
        ),
    }
)


class BlockTerms(Protocol):
    """What a per-block invariant reads of one block at one op: the Monitor builds it from the
    engine's view and the op's records (:class:`BlockAt`), the BMC step from its symbolic
    state (``checkers.symbolic``)."""

    @property
    def resident(self) -> Any: ...  # resident after the op

    @property
    def state(self) -> Any: ...  # its class after the op

    @property
    def was_dead(self) -> Any: ...  # resident and Dead before the op

    @property
    def closing(self) -> Any: ...  # the op closes contexts (close, return, end, one-shot)

    @property
    def removed(self) -> Any: ...  # the op evicted it, or a policy reclaimed it

    @property
    def removed_state(self) -> Any: ...  # its class when removed


@attrs.frozen
class BlockAt:
    """Concrete :class:`BlockTerms` (the Monitor's)."""

    resident: bool = False
    state: BlockClass | None = None
    was_dead: bool = False
    closing: bool = False
    removed: bool = False
    removed_state: BlockClass | None = None


#: The per-block invariants, each as one predicate ``violated(block, logic)`` over
#: :class:`BlockTerms`: the Monitor evaluates it on concrete values, the BMC step on Z3 terms
#: (one definition, two readers; spec/invariants.md tables).
BLOCK: Mapping[str, Callable[[Any, Logic], Any]] = MappingProxyType(
    {
        "no-zombie-kv": lambda b, lg: lg.all_(b.resident, lg.is_(b.state, _D)),
        "free-at-boundary": lambda b, lg: lg.all_(
            b.closing, b.resident, lg.is_(b.state, _D), lg.not_(b.was_dead)
        ),
        "pinned-never-evicted": lambda b, lg: lg.all_(
            b.removed, lg.is_(b.removed_state, BlockClass.PINNED)
        ),
    }
)


def _passed_over(
    name: str, victim: EvictionTerms, cands: Iterable[EvictionTerms]
) -> EvictionTerms | None:
    return next((c for c in cands if ORDER[name](c, victim, CONCRETE)), None)


def evict_live_before_dead(victim: EvictionTerms, cands: Iterable[EvictionTerms]) -> str | None:
    c = _passed_over("no-live-eviction-before-dead-reclaim", victim, cands)
    if c is None:
        return None
    return (
        f"evicted {victim.state.value} block {victim.id} while "
        f"{c.state.value} block {c.id} was evictable"
    )


def evict_priority(victim: EvictionTerms, cands: Iterable[EvictionTerms]) -> str | None:
    c = _passed_over("state-priority-eviction", victim, cands)
    if c is None:
        return None
    return f"evicted {victim.state.value} block {victim.id} before {c.state.value} block {c.id}"


def evict_mru(victim: EvictionTerms, cands: Iterable[EvictionTerms]) -> str | None:
    c = _passed_over("suspended-mru", victim, cands)
    if c is None:
        return None
    mine = -1e300 if victim.suspend_time is None else victim.suspend_time
    return (
        f"evicted block {victim.id} suspended at {mine:g} before block {c.id} "
        f"suspended later, at {c.suspend_time:g}"
    )


# ----------------------------------------------------------------------------- placement-time


def place_deterministic(engine: Engine, block: NewBlock, slot: BlockId) -> str | None:
    """Lachesis's classes (spec §lachesis-det): long -> HBF first, short -> HBM first."""
    from policies.lachesis import SegmentClass, classify

    if block.agent is AgentKind.WORKER and getattr(engine.policy, "predicts_workers", False):
        return None  # the predictive path decides workers
    cls = classify(block)[0]
    names = engine.memory.names
    pref = names if cls is SegmentClass.SHORT else names[::-1]
    got = engine.memory.tier_of(slot)
    if got != pref[0] and engine.memory.free_count(pref[0]) > 0:
        return (
            f"{cls.value}-lived block of {block.ctx} (depth {block.depth}) went to {got} "
            f"while {pref[0]} had a free block"
        )
    return None


# ----------------------------------------------------------------------------- log-time


def log_pinned(records: Iterable[Observation]) -> list[tuple[str, BlockId]]:
    pinned = BLOCK["pinned-never-evicted"]
    return [
        (f"{r.kind} of pinned block {r.block}", r.block)
        for r in records
        if isinstance(r, EvictObs | FreeObs)
        and pinned(
            BlockAt(
                removed=isinstance(r, EvictObs) or r.reason == FreeReason.RECLAIM,
                removed_state=r.state,
            ),
            CONCRETE,
        )
    ]


def log_reclaim_dead(records: Iterable[Observation]) -> list[tuple[str, BlockId]]:
    return [
        (f"reclaimed {r.state.value} block {r.block}", r.block)
        for r in records
        if isinstance(r, FreeObs)
        and r.reason == FreeReason.RECLAIM
        and r.state is not BlockClass.DEAD
    ]


def log_bypass(records: Sequence[Observation]) -> list[tuple[str, BlockId]]:
    bypassed = {r.block for r in records if isinstance(r, BypassObs)}
    freed = {r.block for r in records if isinstance(r, FreeObs) and r.reason == FreeReason.BYPASS}
    out = []
    for r in records:
        if (
            isinstance(r, AllocObs)
            and r.state is BlockClass.TEMPORARY
            and r.key is not None
            and not r.rewrite
            and (r.block not in bypassed or r.block not in freed)
        ):
            out.append((f"temporary block {r.block} written without bypass", r.block))
    return out


# ----------------------------------------------------------------------------- the monitor


@attrs.define
class _Pending:
    """What the monitor remembers across one op."""

    dead: set[BlockId] = attrs.field(factory=set)
    closing: bool = False
    expected: list[BlockKey] | None = None
    ctx: ContextId | None = None


class Monitor:
    """Checks the selected invariants on one engine run; installs itself as the engine's probe.

    Drive it with ``before_op(op)``, apply the op, then ``after_op(op)`` (or ``policy_error``
    if the engine refused a policy decision); ``violations`` accumulates results.
    """

    def __init__(
        self, engine: Engine, invariants: Iterable[str], *, endurance_years: float = 5.0
    ) -> None:
        invariants = [n for n in invariants if n not in FINDINGS]  # recorded whatever is asked
        unknown = sorted(set(invariants) - set(INVARIANTS))
        if unknown:
            raise ValueError(f"unknown invariant {unknown[0]!r}; known: {', '.join(INVARIANTS)}")
        self.engine = engine
        self.active = frozenset(invariants)
        self.endurance_years = endurance_years
        self.violations: list[Violation] = []
        self.op_index = -1
        self._seen = 0
        self._states: dict[tuple[ContextId, int], MsgState] = {}
        self._temp_indexed: set[BlockId] = set()
        self._pending = _Pending()
        self._writes: dict[str, int] = dict.fromkeys(engine.memory.names, 0)
        #: the contract model, following the engine's log (None once it could not follow)
        self._shadow: Shadow | None = Shadow(engine.block_size)
        self._diverged = False
        self._evict_tiers: list[tuple[TierName, ...]] = []
        engine.probe = self

    # -- plumbing

    def _add(
        self, name: str, message: str, block: BlockId | None = None, ctx: ContextId | None = None
    ) -> None:
        if name in self.active:
            self.violations.append(Violation(name, message, block, ctx, self.op_index))

    def first(self, name: str) -> Violation | None:
        return next((v for v in self.violations if v.invariant == name), None)

    # -- engine probe

    def before_evict(self, engine: Engine, victim: BlockId, tiers: tuple[TierName, ...]) -> None:
        """Remember which tiers the allocation could evict from; the eviction itself is judged
        after the op, on the contract model's view of that moment (no engine state is read)."""
        self._evict_tiers.append(tiers)

    def _evictions(self) -> None:
        if self._shadow is None:
            return
        wanted = (
            ("no-live-eviction-before-dead-reclaim", evict_live_before_dead),
            ("state-priority-eviction", evict_priority),
            ("suspended-mru", evict_mru),
        )
        for ev in self._shadow.evictions:
            victim = ev.victim.id
            if ev.in_flight:
                self._add("no-eviction-in-flight", f"evicted in-flight block {victim}", victim)
            for name, check in wanted:
                if name in self.active and (msg := check(ev.victim, ev.candidates)) is not None:
                    self._add(name, msg, victim)

    def _contract(self, op: Op, records: Sequence[Observation]) -> None:
        """Follow the op in the contract model and compare (spec §Self-checks of the engine)."""
        tiers, self._evict_tiers = self._evict_tiers, []  # this op's, whether followed or not
        if self._shadow is None:
            return
        try:
            self._shadow.apply(op, records, tiers)
            if self._diverged:
                return
            if self._shadow.problems:
                msg = f"the log breaks the contract: {self._shadow.problems[0]}"
            elif self.op_index < FULL_COMPARE_OPS or self.op_index % COMPARE_EVERY == 0:
                d = compare(self.op_index, self.engine, self._shadow, records)
                msg = "" if d is None else f"the engine disagrees with the contract on {d}"
            else:
                msg = ""
        except Exception as err:
            self._shadow = None
            msg = f"the contract model cannot follow the log: {type(err).__name__}: {err}"
        if msg:
            self._diverged = True
            self.violations.append(Violation("engine-contract", msg, op=self.op_index))

    def after_place(
        self, engine: Engine, block: NewBlock, placement: Placement, slot: BlockId
    ) -> None:
        if "deterministic-placement" in self.active and block.key is not None:
            msg = place_deterministic(engine, block, slot)
            if msg is not None:
                self._add("deterministic-placement", msg, slot, block.ctx)

    # -- around ops

    def before_op(self, op: Op) -> None:
        e = self.engine
        self.op_index = e.op_index + 1
        p = _Pending(dead=set(e.dead))
        match op:
            case Close() | Return():
                p.closing = True
            case EndSession():
                p.closing = True
            case Infer():
                c = e.contexts.get(op.ctx)
                if c is not None and c.is_open:
                    p.closing = c.one_shot
                    if "no-stale-hit" in self.active and self._shadow is not None:
                        # the prompt's keys recomputed from the trace by B2-B3 (the contract
                        # model's own packing), not read from the engine's context
                        p.expected = self._shadow.prompt_keys(op.ctx)
                        p.ctx = c.id
        self._pending = p

    def apply(self, op: Op) -> bool:
        """Apply one op to the engine with the checks around it. False when the run cannot go
        on: the engine refused a policy decision, or crashed (both recorded as violations). Bad
        input (:class:`~kvmodel.errors.TraceError`) propagates."""
        self.before_op(op)
        try:
            self.engine.apply(op)
        except TraceError:
            raise
        except PolicyError as e:
            self.policy_error(e)
            return False
        except Exception as e:  # an engine that crashes is a finding, not a checker crash
            self.internal_error(e)
            return False
        try:
            self.after_op(op)
        except Exception as e:  # a state the checks cannot read: reported with the trace
            self.internal_error(e, where="the monitor could not read the engine's state")
            return False
        return True

    def policy_error(self, err: PolicyError) -> None:
        name = {
            "evict-in-flight": "no-eviction-in-flight",
            "evict-pinned": "pinned-never-evicted",
            "bad-free": "accounting",  # freeing what is not resident: a double free
        }.get(err.kind)
        if name is not None and name in self.active:
            self._add(name, f"the engine refused the policy's choice: {err}")
        else:  # never lost: a refusal ends the run, so it is reported whatever is monitored
            self.violations.append(Violation("policy-protocol", str(err), op=self.op_index))

    def internal_error(self, err: Exception, where: str = "the engine crashed") -> None:
        """The engine crashed (an ``InternalError`` or worse), or left a state the checks cannot
        read: a bug in the engine under test (or in a check), never a crash of the checker."""
        self.violations.append(
            Violation(
                "engine-internal", f"{where}: {type(err).__name__}: {err}", op=self.op_index
            )
        )

    def after_op(self, op: Op) -> None:
        e = self.engine
        records = e.log.since(self._seen)
        self._seen = len(e.log)
        self._contract(op, records)
        self._evictions()
        a = self.active
        for r in records:
            if isinstance(r, AllocObs):
                self._writes[r.tier] += 1
        if "accounting" in a:
            for v in check_accounting(e):
                self._add("accounting", v.message, v.block)
            for tier, n in self._writes.items():
                if e.memory.writes[TierName(tier)] != n:
                    self._add(
                        "accounting",
                        f"tier {tier}: {e.memory.writes[TierName(tier)]} "
                        f"writes counted, {n} alloc records",
                    )
        if "chains" in a:
            for v in check_chains(e):
                self._add("chains", v.message, v.block, v.ctx)
        if "legal-transitions" in a:
            now = e.message_states()
            for k, s in now.items():
                old = self._states.get(k)
                if old is not s and not reachable(old, s):
                    self._add(
                        "legal-transitions",
                        f"message #{k[1]} of {k[0]}: {old.value if old else 'absent'} -> {s.value}",
                        ctx=k[0],
                    )
            self._states = now
        if "pinned-never-evicted" in a:
            for msg, b in log_pinned(records):
                self._add("pinned-never-evicted", msg, b)
        if "reclaim-dead-only" in a:
            for msg, b in log_reclaim_dead(records):
                self._add("reclaim-dead-only", msg, b)
        if "temporary-bypass" in a:
            self._temporary(records)
        if "no-stale-hit" in a:
            self._stale(records)
        if "prefix-closed-residency" in a:
            for v in check_prefix_closed(e):
                self._add("prefix-closed-residency", v.message, v.block)
        if "no-zombie-kv" in a or ("free-at-boundary" in a and self._pending.closing):
            self._block_states()

    def _block_states(self) -> None:
        """no-zombie-kv and free-at-boundary: their :data:`BLOCK` predicates over every resident
        block, its class read from the engine's view."""
        e, p = self.engine, self._pending
        zombie, killed = [], []
        # Both predicates need a Dead block. Reading every resident block's class through the
        # view each op doubled the cost of a checked replay, so the blocks judged are those that
        # can be Dead: in the engine's dead set, or held by no context (a holder list the engine
        # forgot to update shows here, as the ForgetsHolder mutant does). The predicate, on the
        # class the view computes, is still what decides.
        maybe_dead = set(e.dead) | {bid for bid, b in e.blocks.items() if not b.holders}
        for bid in sorted(maybe_dead):
            terms = BlockAt(
                resident=True,
                state=e.view.block(bid).state,
                was_dead=bid in p.dead,
                closing=p.closing,
            )
            if BLOCK["no-zombie-kv"](terms, CONCRETE):
                zombie.append(bid)
            if BLOCK["free-at-boundary"](terms, CONCRETE):
                killed.append(bid)
        if zombie:
            zombie.sort()
            self._add(
                "no-zombie-kv", f"{len(zombie)} dead blocks resident (e.g. {zombie[0]})", zombie[0]
            )
        if killed:
            killed.sort()
            self._add(
                "free-at-boundary",
                f"{len(killed)} blocks killed by this op stay resident (e.g. {killed[0]})",
                killed[0],
            )

    def _temporary(self, records: Sequence[Observation]) -> None:
        for msg, b in log_bypass(records):
            self._add("temporary-bypass", msg, b)
        for r in records:
            if isinstance(r, HitObs) and r.block in self._temp_indexed:
                self._add(
                    "temporary-bypass", f"temporary block {r.block} served as a hit", r.block, r.ctx
                )
        for r in records:
            if isinstance(r, AllocObs) and r.state is BlockClass.TEMPORARY and not r.rewrite:
                self._temp_indexed.add(r.block)
            elif isinstance(r, EvictObs | FreeObs):
                self._temp_indexed.discard(r.block)

    def _stale(self, records: Sequence[Observation]) -> None:
        p = self._pending
        if p.expected is None:
            return
        exp = p.expected
        infer = next((r for r in records if isinstance(r, InferObs)), None)
        if infer is None:
            return
        own = infer.own_blocks
        if own > len(exp):
            self._add(
                "no-stale-hit",
                f"{own} blocks kept but the prompt has only {len(exp)} full blocks",
                ctx=p.ctx,
            )
            return
        c = self.engine.contexts.get(infer.ctx)
        if c is not None and c.is_open:
            kept = [s.key for s in c.materialized[:own]]
            if kept != exp[:own]:
                # the first depth that differs, or the shorter length when one is a prefix
                d = next(
                    (i for i, (x, y) in enumerate(zip(kept, exp, strict=False)) if x != y),
                    min(len(kept), own),
                )
                self._add(
                    "no-stale-hit",
                    f"kept block at depth {d} does not match the prompt (invalidated KV served)",
                    ctx=p.ctx,
                )
        depth = own
        for r in records:
            if isinstance(r, HitObs):
                if r.depth != depth or r.depth >= len(exp) or r.key != exp[r.depth]:
                    self._add(
                        "no-stale-hit",
                        f"hit at depth {r.depth} does not match the prompt's chain",
                        r.block,
                        r.ctx,
                    )
                depth += 1

    def at_end(self) -> None:
        if "endurance-budget" not in self.active:
            return
        e = self.engine
        st = e.stats
        seconds = (st.t_last or 0.0) - (st.t_first or 0.0)
        for t in e.memory.tiers:
            years = e.memory.device_years(t.name, seconds)
            if years is not None and years < self.endurance_years:
                self._add(
                    "endurance-budget",
                    f"tier {t.name}: {years:.3g} device-years < {self.endurance_years:g}",
                )

    def summary(self) -> dict[str, Any]:
        return {"violations": [attrs.asdict(v) for v in self.violations]}
