"""The invariants as plain functions at the moments they are checked: *eviction* (over the
candidates of one eviction), *placement* (one placement decision) and *log* (the records of one
op); the *state* ones are in :mod:`checkers.invariants.structural`. One definition, read by the
Monitor and (as solver terms, through :class:`Logic`) by the rank proofs and the BMC."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import attrs

from kvmodel.engine import Engine
from kvmodel.ids import BlockId
from kvmodel.io.observations import (
    AllocObs,
    BypassObs,
    EvictObs,
    FreeObs,
    FreeReason,
    HitObs,
    Observation,
)
from kvmodel.lifecycle import BLOCK_CLASS_PRIORITY, TRANSITIONS, BlockClass, Event, MsgState
from kvmodel.messages import AgentKind
from kvmodel.policy import RankTerm, rank_key
from kvmodel.view import Featured, NewBlock

__all__ = [
    "BLOCK",
    "CONCRETE",
    "ORDER",
    "BlockAt",
    "BlockTerms",
    "EvictionTerms",
    "Logic",
    "OrderTerm",
    "block_name",
    "contested",
    "evict_live_before_dead",
    "evict_mru",
    "evict_priority",
    "evict_rank_first",
    "log_bypass",
    "log_pinned",
    "log_reclaim_dead",
    "place_deterministic",
    "reachable",
]

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
    the contract model's :class:`checkers.invariants.shadow_terms.EvictionTerms` both have it."""

    @property
    def id(self) -> BlockId: ...

    @property
    def state(self) -> BlockClass: ...

    @property
    def suspend_time(self) -> float | None: ...


@attrs.frozen
class Logic:
    """How an eviction-order predicate is evaluated: on concrete values (:data:`CONCRETE`, the
    Monitor) or as solver terms (``checkers.symbolic.z3util.Z3_LOGIC``: z3rank's rank proofs and
    the BMC step). One definition, three readers (kvmodel issue 13)."""

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
_T = BlockClass.TEMPORARY
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
    state (``checkers.symbolic.transition``)."""

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

    @property
    def reclaimed(self) -> Any: ...  # a policy's reclaim freed it (a subset of removed)

    @property
    def written(self) -> Any: ...  # the op wrote it as a full block (not a rewrite of a key)

    @property
    def written_state(self) -> Any: ...  # its class when written

    @property
    def bypassed(self) -> Any: ...  # written, bypassed and freed by the same op

    @property
    def hit(self) -> Any: ...  # the op served it as a hit

    @property
    def temporary_kv(self) -> Any: ...  # it holds KV written as Temporary (before the hit)


@attrs.frozen
class BlockAt:
    """Concrete :class:`BlockTerms` (the Monitor's)."""

    resident: bool = False
    state: BlockClass | None = None
    was_dead: bool = False
    closing: bool = False
    removed: bool = False
    removed_state: BlockClass | None = None
    reclaimed: bool = False
    written: bool = False
    written_state: BlockClass | None = None
    bypassed: bool = False
    hit: bool = False
    temporary_kv: bool = False


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
        "reclaim-dead-only": lambda b, lg: lg.all_(
            b.reclaimed, lg.not_(lg.is_(b.removed_state, _D))
        ),
        # two halves: a Temporary block written and not bypassed; a hit on Temporary KV
        "temporary-bypass": lambda b, lg: lg.any_(
            lg.all_(b.written, lg.is_(b.written_state, _T), lg.not_(b.bypassed)),
            lg.all_(b.hit, b.temporary_kv),
        ),
    }
)


@attrs.frozen
class _Terms:
    state: BlockClass
    suspend_time: float | None


@functools.lru_cache(maxsize=1 << 16)
def _ordered(
    name: str, a: tuple[BlockClass, float | None], b: tuple[BlockClass, float | None]
) -> bool:
    return bool(ORDER[name](_Terms(*a), _Terms(*b), CONCRETE))


def _passed_over(
    name: str, victim: EvictionTerms, cands: Iterable[EvictionTerms]
) -> EvictionTerms | None:
    """The first candidate ``name`` orders before ``victim``. :data:`ORDER` reads a block's
    ``state`` and ``suspend_time`` alone, so it is evaluated once per distinct pair of those
    (:func:`_ordered`), not once per candidate."""
    mine = (victim.state, victim.suspend_time)
    return next((c for c in cands if _ordered(name, (c.state, c.suspend_time), mine)), None)


#: a suspension time's stand-ins: :func:`contested` evaluates :data:`ORDER` on them, not on the
#: blocks' own times, so that :func:`_ordered`'s cache holds a few pairs, not one per time
_EARLY, _LATE = 0.0, 1.0

#: what the order invariants read of a block: its class and suspension time
OrderTerm = tuple[BlockClass, "float | None"]


def _representatives(terms: Iterable[OrderTerm]) -> Iterator[tuple[OrderTerm, OrderTerm]]:
    """One pair ``(a, b)`` of distinct ``terms`` for each class of pairs they hold: a's state,
    b's state, and how their suspension times compare (either missing; a's before, equal to or
    after b's), with the times replaced by stand-ins that compare the same way.

    :data:`ORDER` reads a suspension time only through ``Logic.later`` (is it there, and after
    the other), so it gives every pair of one class the same value: it orders some pair of
    ``terms`` iff it orders some representative. At most 6 x 6 states and 5 comparisons, where
    the pairs themselves number the distinct times squared (a crowd of agents each suspended
    at its own time has hundreds)."""
    none: set[BlockClass] = set()
    times: dict[BlockClass, set[float]] = {}
    for state, t in terms:
        if t is None:
            none.add(state)
        else:
            times.setdefault(state, set()).add(t)
    bounds = {s: (min(ts), max(ts)) for s, ts in times.items()}
    states = sorted(none | times.keys(), key=lambda s: s.value)
    for sa in states:
        for sb in states:
            if sa in none and sb in none and sa is not sb:
                yield (sa, None), (sb, None)
            if sa in none and sb in times:
                yield (sa, None), (sb, _EARLY)
            if sa in times and sb in none:
                yield (sa, _EARLY), (sb, None)
            if sa in times and sb in times:
                (lo_a, hi_a), (lo_b, hi_b) = bounds[sa], bounds[sb]
                if hi_a > lo_b:  # a's after b's (of one state: its two extreme times)
                    yield (sa, _LATE), (sb, _EARLY)
                if lo_a < hi_b:
                    yield (sa, _EARLY), (sb, _LATE)
                if sa is not sb and not times[sa].isdisjoint(times[sb]):
                    yield (sa, _EARLY), (sb, _EARLY)


def contested(
    names: Sequence[str], victim: EvictionTerms, cands: Iterable[EvictionTerms]
) -> list[str]:
    """The eviction-order invariants of ``names`` that constrained this eviction: some two of
    the blocks that could go (the victim among them) are a pair the invariant orders, so a policy
    could have broken it here. What a search reports as each invariant's exercise -- an eviction
    among blocks of one class and one suspension time puts no order to the test. Read from
    :data:`ORDER` itself, on one pair of each class the blocks' terms hold
    (:func:`_representatives`, found once for all of ``names``): work proportional to the
    candidates, not to their distinct suspension times squared."""
    terms = {(c.state, c.suspend_time) for c in cands}
    terms.add((victim.state, victim.suspend_time))
    if len(terms) < 2:
        return []
    pairs = list(_representatives(terms))
    return [n for n in names if any(_ordered(n, a, b) for a, b in pairs)]


def block_name(b: EvictionTerms | Featured) -> str:
    """A block in an eviction-order finding: its slot and, where known, its hash-chain key (the
    name it has in every log, another implementation's included)."""
    key = getattr(b, "key", None)
    return f"block {b.id}" if key is None else f"block {b.id} (key {key})"


def evict_live_before_dead(victim: EvictionTerms, cands: Iterable[EvictionTerms]) -> str | None:
    c = _passed_over("no-live-eviction-before-dead-reclaim", victim, cands)
    if c is None:
        return None
    return (
        f"evicted {victim.state.value} {block_name(victim)} while "
        f"{c.state.value} {block_name(c)} was evictable"
    )


def evict_priority(victim: EvictionTerms, cands: Iterable[EvictionTerms]) -> str | None:
    c = _passed_over("state-priority-eviction", victim, cands)
    if c is None:
        return None
    return (
        f"evicted {victim.state.value} {block_name(victim)} before {c.state.value} {block_name(c)}"
    )


def evict_mru(victim: EvictionTerms, cands: Iterable[EvictionTerms]) -> str | None:
    c = _passed_over("suspended-mru", victim, cands)
    if c is None:
        return None
    mine = -1e300 if victim.suspend_time is None else victim.suspend_time
    return (
        f"evicted {block_name(victim)} suspended at {mine:g} before {block_name(c)} "
        f"suspended later, at {c.suspend_time:g}"
    )


def evict_rank_first(
    rank: Sequence[RankTerm], victim: Featured, cands: Iterable[Featured]
) -> str | None:
    """Spec PP3: a policy whose order is its declarative rank evicts the candidate the rank
    orders first -- the smallest key, block id last -- among the evictable blocks of the tiers
    the allocation could take (a self-check of the engine's victim sources: the rank index and
    the sorted order both must give it). ``cands``: those blocks, or any of them that holds the
    one the rank orders first (the Monitor passes that one alone, shadow_terms.Eviction)."""
    k = functools.partial(rank_key, rank)
    mine = k(victim)
    first = min(cands, key=k, default=None)
    if first is None or not k(first) < mine:
        return None
    return (
        f"evicted {block_name(victim)}, rank key {_key_text(mine)}, while {block_name(first)}, "
        f"rank key {_key_text(k(first))}, was evictable and the declared rank orders it first"
    )


def _key_text(key: Sequence[float]) -> str:
    return "(" + ", ".join(f"{x:g}" for x in key) + ")"


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


def _named(r: EvictObs | FreeObs | AllocObs | HitObs) -> str:
    """A block as a record names it to the user: its slot and its hash-chain key (the name it
    has in every log, another implementation's included)."""
    return f"block {r.block}" if r.key is None else f"block {r.block} (key {r.key})"


def log_pinned(records: Iterable[Observation]) -> list[tuple[str, BlockId]]:
    pinned = BLOCK["pinned-never-evicted"]
    return [
        (f"{r.kind} of pinned {_named(r)}", r.block)
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
    dead_only = BLOCK["reclaim-dead-only"]
    return [
        (f"reclaimed {r.state.value} {_named(r)}", r.block)
        for r in records
        if isinstance(r, FreeObs)
        and dead_only(
            BlockAt(reclaimed=r.reason == FreeReason.RECLAIM, removed_state=r.state), CONCRETE
        )
    ]


def log_bypass(records: Sequence[Observation]) -> list[tuple[str, BlockId]]:
    bypassed = {r.block for r in records if isinstance(r, BypassObs)}
    # freed as bypassed at the commit -- or with the rest of a request rolled back (P7.7)
    gone = (FreeReason.BYPASS, FreeReason.REJECT)
    freed = {r.block for r in records if isinstance(r, FreeObs) and r.reason in gone}
    broken = BLOCK["temporary-bypass"]
    out = []
    for r in records:
        if isinstance(r, AllocObs) and broken(
            BlockAt(
                written=r.key is not None and not r.rewrite,
                written_state=r.state,
                bypassed=r.block in bypassed and r.block in freed,
            ),
            CONCRETE,
        ):
            why = "written without bypass" if r.block not in bypassed else "not freed by its op"
            out.append((f"temporary {_named(r)} {why}", r.block))
    return out
