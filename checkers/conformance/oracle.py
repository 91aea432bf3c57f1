"""Log conformance: is an implementation's observation log one the reference allows?

The implementation logs what it did on a trace in the observation-log schema
(spec/trace-format.md T4, minimum in spec/invariants.md §Oracle; blocks are compared by
hash-chain ``key``, slot ids are its own). Two modes:

* **policy mode** (:func:`check_log`, :class:`Conformance`): the reference replays the trace under
  the named rank policy and compares, op by op, the decisions -- blocks reused, writes (with
  tier), bypasses, reclaims, rejections, the number of evictions -- and the evictions themselves,
  **nondeterminism-aware**: at each eviction the policy's rule admits every candidate tied with
  the best on the rank key (all terms but the final id tie-break); the implementation's victim
  must lie in that set, and the reference then *follows* it, so one legal tie-break does not
  make every later record differ.
* **invariants-only mode** (:func:`check_log_invariants`, in
  :mod:`checkers.conformance.oracle_invariants`; re-exported here): no policy is assumed. The
  reference engine is driven by the log itself (a puppet policy places, evicts and reclaims exactly
  as the log says) and the invariant monitor judges the run it reconstructs, as a history checker
  judges a database against an isolation level rather than against one execution.

Verdicts: ``OK``; ``ILLEGAL`` with the first divergent op, what the reference allowed and what
the implementation did, the resident state just before, and (policy mode) a shortened trace
prefix that still diverges; ``UNKNOWN`` when the log cannot decide (it ends before the trace
does, or names ops the trace does not have).

:class:`Conformance` is incremental (one op and its records at a time), so the same code checks
a finished log and drives lockstep differential testing (:mod:`checkers.conformance.lockstep`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import ClassVar

import attrs

from checkers.conformance.oracle_invariants import check_log_invariants, follow_every_victim
from checkers.conformance.oracle_log import (
    Divergence,
    LogStream,
    OracleVerdict,
    Puppet,
    Record,
    decisions,
    divergence_class,
    last_complete,
    load_log,
    own_keys,
    records_by_op,
    resident_state,
    self_consistent,
)
from checkers.conformance.oracle_steer import listed, steer
from checkers.invariants.deadline import HUNG, OpHung, op_deadline
from checkers.search.shrink import op_groups, shrink
from kvmodel._resident import ResidentBlock
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import ConfigError, PolicyError, TraceError, is_interrupt
from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.io.observations import observation_to_json
from kvmodel.io.trace import Infer, Op, Trace, dumps_op
from kvmodel.policy import (
    BasePolicy,
    Placement,
    Policy,
    Reclaim,
    declared_rank,
    declared_reclaim,
    moves,
    rank_key,
    resolve_policy,
)
from kvmodel.view import BlockInfo, ModelView, NewBlock

__all__ = [
    "VARIANTS",
    "Conformance",
    "Divergence",
    "OracleVerdict",
    "check_log",
    "check_log_invariants",
    "divergence_class",
    "load_log",
    "rank_policy",
    "self_consistent",
]


#: opt-in admissible variants (spec/invariants.md §Oracle): behaviours real engines have that a
#: rank does not fix, each accepted only when asked for
VARIANTS: Mapping[str, str] = {
    "extra-victims": "an inference that must evict may evict more than it needs (a whole tree "
    "node, say), each extra victim admissible in turn under the rank after the op",
    "refused-lookup-refreshes": "a refused inference's lookup refreshes the recency of the "
    "blocks it found (its hit records), as a cache that stamps nodes on match does",
    "split-refreshes-tail": "a lookup that splits a cached node refreshes its cut-off tail too "
    "(its touch records: blocks continuing the hit run in the chain), as a radix cache that "
    "stamps a node before splitting it does (SGLang's RadixCache)",
}


def _victims(records: Iterable[Record]) -> list[tuple[str, object]]:
    """An op's evict records as (key, group) in log order (``group``: absent, or a label of
    the victims the implementation freed together)."""
    return [(str(r.get("key")), r.get("group")) for r in records if r["kind"] == "evict"]


def _room_drops(records: Iterable[Record]) -> list[tuple[str, str]]:
    """An op's copies dropped for room, as (tier, key) in log order (spec/movement.md MV5)."""
    return [
        (str(r.get("tier")), str(r.get("key")))
        for r in records
        if r["kind"] == "drop-copy" and r.get("reason") == "room"
    ]


class _Follow(BasePolicy):
    """The reference policy, steered at evictions by the implementation's admissible choices."""

    name: ClassVar[str] = "oracle-follow"

    def __init__(self, inner: BasePolicy) -> None:
        self.inner = inner
        #: the implementation's victims still to follow: (key, group); a group (the ``group``
        #: field of its evict records, e.g. a tree node freed at once) may go in any order
        self.wanted: list[tuple[str, object]] = []
        self.illegal: tuple[str, tuple[str, ...], str] | None = None
        #: ``keep_going``: for one op, the implementation's own decisions, adopted (a puppet)
        self.adopt: Puppet | None = None
        #: ``split-refreshes-tail``: each refreshed tail block's key -> the op that refreshed
        #: it. The lookup that refreshed it came before that op's writes (lookup before
        #: writes), so while its last use is that op it ranks half an op earlier on a
        #: ``last_op`` term: after the previous ops' blocks, before the op's own writes
        self.early: dict[str, int] = {}
        self._op_terms = tuple(
            (j, t.descending)
            for j, t in enumerate(inner.rank)
            if t.feature == "last_op" and t.only is None
        )
        #: the implementation's copies dropped for room in the op, still to follow: (tier, key)
        self.drops: list[tuple[str, str]] = []

    def expect(self, records: Sequence[Record]) -> None:
        """The implementation's choices in the op about to be applied: its victims and the
        copies it dropped for room, to follow while each is admissible."""
        self.wanted = _victims(records)
        self.drops = _room_drops(records)

    def choose_copy(self, tier: TierName, admissible: Sequence[BlockKey]) -> BlockKey:
        """The copy the reference drops from ``tier`` for room (spec/movement.md MV5): the
        implementation's next room drop from that tier when it is admissible (the rules leave
        Dead copies unordered); one it made outside the admissible set is illegal; where it
        dropped none, the reference's own first (the decisions then differ)."""
        nxt = next((i for i, (t, _) in enumerate(self.drops) if t == tier), None)
        if nxt is None or self.illegal is not None:
            return admissible[0]
        key = self.drops[nxt][1]
        if key in admissible:
            del self.drops[nxt]
            return BlockKey(key)
        self.illegal = (
            "copy dropped for room outside the admissible set",
            tuple(f"drop {k} from {tier} (room)" for k in admissible),
            f"drop {key} from {tier} (room)",
        )
        return admissible[0]

    @property
    def claims(self) -> frozenset[str]:  # type: ignore[override]
        return self.inner.claims

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        if self.adopt is not None:
            return self.adopt.place(view, block)
        return self.inner.place(view, block)

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        if self.adopt is not None:
            return self.adopt.on_op(view, op)
        return self.inner.on_op(view, op)

    def _key(self, b: BlockInfo) -> tuple[float, ...]:
        """``b``'s rank key, a refreshed tail's ``last_op`` half an op earlier (:attr:`early`)."""
        k = rank_key(self.inner.rank, b)
        at = self.early.get(b.key) if self.early and b.key is not None else None
        if at is None or at != b.last_op or not self._op_terms:
            return k
        out = list(k)
        for j, descending in self._op_terms:
            out[j] += 0.5 if descending else -0.5
        return tuple(out)

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        if self.adopt is not None:
            return self.adopt.eviction_order(view, candidates)
        return self._follow_order(view, candidates)

    def _follow_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterator[BlockId]:
        """The implementation's next victims while each is admissible, then the rank order.

        A heap of cached rank keys (as :meth:`BasePolicy.eviction_order`): O(n) to build, and
        per victim O((ties + 1) log n) -- the tied run is popped, searched, and pushed back.
        """
        cache = self._rank_cache()
        heap: list[tuple[tuple[float, ...], BlockId, BlockInfo]] = []
        for b in candidates:
            hit = cache.get(b.id)
            if hit is None or hit[0] is not b:
                hit = (b, self._key(b))
                cache[b.id] = hit
            heap.append((hit[1], b.id, b))
        heapq.heapify(heap)
        while self.wanted and self.illegal is None:
            while heap and not view.evictable(heap[0][1]):
                heapq.heappop(heap)
            if not heap:
                break
            best = heap[0][0][:-1]
            tied = []
            while heap and heap[0][0][:-1] == best:
                entry = heapq.heappop(heap)
                if view.evictable(entry[1]):
                    tied.append(entry)
            pick = self._pick(tied, "eviction outside the admissible set")
            if pick is None:
                break
            for e in tied:
                if e is not pick:
                    heapq.heappush(heap, e)
            yield pick[1]
        while heap:
            yield heapq.heappop(heap)[1]

    def _pick(
        self, tied: Sequence[tuple[tuple[float, ...], BlockId, BlockInfo]], why: str
    ) -> tuple[tuple[float, ...], BlockId, BlockInfo] | None:
        """The tied candidate that is the implementation's next victim (any member of the next
        victim's group), taken off :attr:`wanted`; ``None`` (and :attr:`illegal`) if none is."""
        k = self._wanted_among(
            [e[2].key for e in tied],
            lambda: [f"{e[2].key} ({e[2].state.value})" for e in tied],
            why,
        )
        return None if k is None else tied[k]

    def _wanted_among(
        self, keys: Sequence[BlockKey | None], described: Callable[[], list[str]], why: str
    ) -> int | None:
        """Which of the tied candidates ``keys`` is the implementation's next victim (any
        member of the next victim's group), taken off :attr:`wanted`; ``None`` (and
        :attr:`illegal`, naming the candidates as ``described``) if none is."""
        key, group = self.wanted[0]
        allowed = {k for k, g in self.wanted if g == group} if group is not None else {key}
        k = next((j for j, x in enumerate(keys) if x in allowed), None)
        if k is None:
            self.illegal = (
                why,
                tuple(f"evict {d}" for d in described()),
                f"evict {' or '.join(sorted(allowed))}",
            )
            return None
        self.wanted.remove(next(w for w in self.wanted if w[0] == keys[k]))
        return k

    def choose_victim(self, view: ModelView, tied: Sequence[ResidentBlock]) -> int | None:
        """A steered rank index's choice (:func:`~checkers.conformance.oracle_steer.steer`): of
        the candidates tied at its front, in its order, the implementation's next victim while
        it is admissible; None (the index's first) once none is wanted, or none of them is (then
        :attr:`illegal`)."""
        if not self.wanted or self.illegal is not None:
            return None
        return self._wanted_among(
            [b.spec.key for b in tied],
            lambda: [f"{b.spec.key} ({view.block(b.id).state.value})" for b in tied],
            "eviction outside the admissible set",
        )

    def extra_victims(self, view: ModelView) -> Iterator[BlockId]:
        """After the op: the implementation's victims beyond what the reference needed, each
        admissible in turn (tied with the best evictable candidate on the rank, its group's
        order free) -- yielded one at a time, the caller evicting each before asking again."""
        while self.wanted and self.illegal is None:
            cands = [view.block(b) for b in view.resident() if view.evictable(b)]
            if not cands:
                key, _ = self.wanted[0]
                self.illegal = ("eviction beyond need of a block not evictable", (), f"evict {key}")
                return
            keyed = sorted((self._key(b), b.id, b) for b in cands)
            best = keyed[0][0][:-1]
            tied = [e for e in keyed if e[0][:-1] == best]
            pick = self._pick(tied, "eviction beyond need outside the admissible set")
            if pick is None:
                return
            yield pick[1]


def _follower(inner: BasePolicy) -> _Follow:
    """The follower of ``inner``; for a policy that moves, of a subclass declaring the same
    movement (``demotes``, ``offloads``, ``copy_rules``; code ``demote_to`` / ``offload_to``
    asked of ``inner`` per block), so that the reference moves as ``inner`` does (MV14)."""
    if not moves(inner):
        return _Follow(inner)
    body: dict[str, object] = {
        "demotes": inner.demotes,
        "offloads": inner.offloads,
        "copy_rules": inner.copy_rules,
    }
    for call in ("demote_to", "offload_to"):
        if getattr(type(inner), call) is not getattr(BasePolicy, call) or call in vars(inner):
            body[call] = _asks(call)
    cls: type[_Follow] = type("_MovingFollow", (_Follow,), body)
    return cls(inner)


def _asks(call: str) -> Callable[[_Follow, ModelView, BlockInfo], TierName | None]:
    def ask(self: _Follow, view: ModelView, block: BlockInfo) -> TierName | None:
        answer: TierName | None = getattr(self.inner, call)(view, block)
        return answer

    return ask


def rank_policy(policy: str | Policy) -> BasePolicy:
    """``policy`` if the oracle can judge against it: a policy given by a declarative rank."""
    inner = resolve_policy(policy)
    if declared_rank(inner) is None or not isinstance(inner, BasePolicy):
        raise ConfigError(
            f"policy {inner.name!r} has no declarative rank: the oracle needs one "
            "to know which victims its rule admits"
        )
    return inner


class Conformance:
    """The reference, one op at a time, judging what an implementation did on that op.

    ``step(i, op, records)`` applies op ``i`` (ops must come in order) with the
    implementation's records for it and returns ``None`` while they conform, else the verdict.
    """

    def __init__(
        self,
        policy: str | Policy,
        config: EngineConfig,
        *,
        allow: Iterable[str] = (),
        recall: Callable[[int], Sequence[Record]] | None = None,
    ) -> None:
        self.policy, self.config = policy, config
        self.allow = frozenset(allow)
        if bad := sorted(self.allow - set(VARIANTS)):
            raise ConfigError(
                f"unknown admissible variant {bad[0]!r}; known: {', '.join(VARIANTS)}"
            )
        self.follow = _follower(rank_policy(policy))
        self.engine = Engine(config, self.follow)
        if "split-refreshes-tail" not in self.allow:  # (a refreshed tail ranks apart: _key)
            steer(self.engine, self.follow.inner.rank, self.follow.choose_victim)
        if (m := self.engine.movement) is not None:  # room drops follow the implementation's
            m.copies.chooser = self.follow.choose_copy
            m.reclaims_dead = declared_reclaim(self.follow.inner) is Reclaim.DEAD  # (MV2)
        self.ops = 0
        #: each op and whether it was adopted; its records are recalled when a rebuild needs
        #: them: from ``recall`` (the caller's: a log read op by op from its file) or, without
        #: one, kept here
        self._seen: list[tuple[Op, bool]] = []
        self._recall = recall
        self._kept: dict[int, Sequence[Record]] = {}

    def _records(self, j: int) -> Sequence[Record]:
        """The implementation's records for op ``j`` (an op already stepped)."""
        return self._recall(j) if self._recall is not None else self._kept.get(j, ())

    def _rebuilt(self, i: int) -> Conformance:
        """A reference that has applied ops ``0..i-1`` as this one did, rebuilt on demand (only
        a divergence needs it, and snapshotting every op would cost O(resident) per op)."""
        again = Conformance(self.policy, self.config, allow=self.allow, recall=self._records)
        for j, (op, adopted) in enumerate(self._seen[:i]):
            records = self._records(j)
            if adopted:  # an adopted op's victims are the puppet's to take, not the follower's
                again._apply_adopted(j, op, records)
            else:
                again.follow.expect(records)
                seen = len(again.engine.log)
                again._before(op, records)
                again.engine.apply(op)
                again._after(op, seen, records)
            again._seen.append((op, adopted))
            again.engine.log.forget()  # (a rebuild of a long prefix holds none of its records)
        again.ops = i
        return again

    def _after(self, op: Op, seen: int, records: Sequence[Record]) -> None:
        """What the opt-in variants add after an op (``seen``: the log's length before it)."""
        self._evict_extra(op, seen)
        refused = any(o.kind == "reject" for o in self.engine.log.since(seen))
        if "refused-lookup-refreshes" in self.allow and refused:
            where = {self.engine.blocks[b].spec.key: b for b in self.engine.blocks}
            for r in records:
                if r["kind"] == "hit" and (b := where.get(r.get("key"))) is not None:
                    self.engine.touch_now(b)

    def _before(self, op: Op, records: Sequence[Record]) -> None:
        """What the opt-in variants add before an op: with ``split-refreshes-tail``, the tail
        the implementation's lookup refreshed, refreshed in the reference too -- before the
        op's evictions and writes, as the lookup came before them (on a refused inference, only
        with ``refused-lookup-refreshes`` too; refused as the implementation's records say)."""
        if "split-refreshes-tail" not in self.allow or not isinstance(op, Infer):
            return
        refused = any(r["kind"] == "reject" for r in records)
        if not refused or "refused-lookup-refreshes" in self.allow:
            self._touch_tail(op, records)

    def _touch_tail(self, op: Op, records: Sequence[Record]) -> None:
        """With ``split-refreshes-tail``, before ``op``: the op's ``touch`` records, each
        admissible only as the next block of the chain its hit run ends in (the first one's
        parent is the last hit, each next one's the one before: the tail of the node the lookup
        split), resident; each is then touched in the reference at the op's time, as used by
        the op's lookup (:attr:`_Follow.early`: before the op's writes). Anything else is a
        refresh the variant does not admit."""
        touches = [str(r.get("key")) for r in records if r["kind"] == "touch"]
        if not touches:
            return
        hits = [str(r.get("key")) for r in records if r["kind"] == "hit"]
        where = {self.engine.blocks[b].spec.key: b for b in self.engine.blocks}
        anchor = hits[-1] if hits else None
        for key in touches:
            b = where.get(BlockKey(key))
            if anchor is None or b is None or self.engine.blocks[b].spec.parent != anchor:
                self.follow.illegal = (
                    "refresh outside the tail of the node the lookup split",
                    (f"touch a resident block whose parent is {anchor}",)
                    if anchor is not None
                    else ("no touch: the lookup found nothing to split",),
                    f"touch {key}",
                )
                return
            at = self.engine.op_index + 1  # (the op about to be applied)
            self.engine.touch_now(b, t=op.t, op_index=at)
            self.follow.early[key] = at
            anchor = key

    def _evict_extra(self, op: Op, seen: int) -> None:
        """With the ``extra-victims`` variant: evict, in turn, the victims the implementation
        took beyond the reference's need -- if the reference needed to evict at all in this op
        (evicting while there is room is never admissible)."""
        if not self.follow.wanted or "extra-victims" not in self.allow:
            return
        if not any(o.kind == "evict" for o in self.engine.log.since(seen)):
            return
        ctx = op.ctx if isinstance(op, Infer) else None
        for bid in self.follow.extra_victims(self.engine.view):
            self.engine.evict_now(bid, ctx if ctx is not None else ContextId(""))

    def _apply_adopted(self, i: int, op: Op, records: Sequence[Record]) -> Puppet:
        """Op ``i`` with the implementation's own decisions (a puppet places, evicts and
        reclaims as its records say); then the victims it took beyond what the op needed (a
        whole tree node), followed too as invariants-only mode does, so that the reference stays
        in the implementation's state (a rebuild replays this, never the bare puppet); then
        the variants. The puppet, to ask what it missed."""
        puppet = Puppet({i: records})
        self.follow.expect(records)
        self.follow.wanted = []
        self.follow.adopt = puppet
        seen = len(self.engine.log)
        self._before(op, records)
        try:
            with listed(self.engine):  # (the puppet's order: victims as the records say)
                self.engine.apply(op)
        finally:
            self.follow.adopt = None
        victims = [r.get("key") for r in records if r["kind"] == "evict"]
        follow_every_victim(self.engine, op, victims, seen)
        self._after(op, seen, records)
        return puppet

    def _state_before(self, i: int) -> tuple[str, ...]:
        return resident_state(self._rebuilt(i).engine)

    def adopt(self, i: int, op: Op, records: Sequence[Record]) -> str | None:
        """After a divergence at op ``i`` (the last op stepped): redo it with the
        implementation's own decisions (writes and tiers, victims, reclaims, as its records say)
        so that checking can go on from the state the implementation is in. ``None`` when the
        reference could follow it there; else why not (its records are not what its own state
        allows here, or the model refuses them)."""
        again = self._rebuilt(i)
        own = own_keys(again.engine, op)
        seen = len(again.engine.log)
        try:
            puppet = again._apply_adopted(i, op, records)
        except PolicyError as e:
            return f"the implementation's decisions at op {i} are refused by the model ({e})"
        wanted = [r for r in records if r["kind"] == "evict"]
        ref = [observation_to_json(o) for o in again.engine.log.since(seen)]
        evicted = [r for r in ref if r["kind"] == "evict"]
        why = puppet.missing
        if why is None and decisions(ref, own) != decisions(records, own):
            why = "its reuse, writes or rejections differ from what the state gives"
        if why is None and len(evicted) != len(wanted):
            gone = sorted({str(r.get("key")) for r in wanted} - {str(r["key"]) for r in evicted})
            why = (
                f"it evicts {len(wanted)} block(s), of which {', '.join(gone) or 'none'} "
                "cannot be evicted in the state it had reached (not resident, or in flight or "
                "Pinned)"
            )
        if why is not None:
            return f"cannot follow the implementation past op {i}: {why}"
        again._seen.append((op, True))
        again.ops = i + 1
        self.follow, self.engine, self._seen, self.ops = (
            again.follow,
            again.engine,
            again._seen,
            again.ops,
        )
        return None

    def step(
        self, i: int, op: Op, records: Sequence[Record], *, last: bool = False
    ) -> OracleVerdict | None:
        """``last``: the implementation's log may end inside this op (a cut-short log)."""
        own = own_keys(self.engine, op)
        wanted = _victims(records)
        self.follow.expect(records)
        self._seen.append((op, False))
        if self._recall is None and records:
            self._kept[i] = records
        self.engine.log.forget()  # (every op's records are read in the op: hold none after it)
        seen = len(self.engine.log)
        try:
            self._before(op, records)
            with op_deadline(self.follow.inner):
                self.engine.apply(op)
            self._after(op, seen, records)
        except OpHung as e:
            why = f"the reference under {self.follow.inner.name!r} {HUNG} {e.seconds:g} s"
            return OracleVerdict("UNKNOWN", i, why)
        except TraceError:
            raise  # bad input: the trace's, not the reference's
        except BaseException as e:
            if is_interrupt(e):
                raise
            # the reference itself failed (its policy raised, say): nothing past here can be
            # judged, and what was judged before stands (never a crash that loses it)
            why = f"the reference under {self.follow.inner.name!r} failed at this op: {e}"
            return OracleVerdict("UNKNOWN", i, why)
        self.ops += 1
        if self.follow.illegal is not None:
            why, allowed, did = self.follow.illegal
            return OracleVerdict("ILLEGAL", i, why, allowed, (did,), self._state_before(i))
        # the reference's records as JSON, but for its evictions: decisions() does not read them
        # (victims were followed as they were taken) and they are half a long log's records
        ran = self.engine.log.since(seen)
        evicted = [o for o in ran if o.kind == "evict"]
        ref = [observation_to_json(o) for o in ran if o.kind != "evict"]
        mine, theirs = decisions(ref, own), decisions(records, own)
        n_evicted = len(evicted)
        if last and (mine != theirs or n_evicted != len(wanted)):
            return OracleVerdict("UNKNOWN", i, "the log ends before the trace does")
        if mine != theirs:
            return OracleVerdict(
                "ILLEGAL", i, "decisions differ", tuple(mine), tuple(theirs), self._state_before(i)
            )
        if n_evicted != len(wanted):
            return OracleVerdict(
                "ILLEGAL",
                i,
                f"the reference evicts {n_evicted} block(s) here, the implementation {len(wanted)}",
                tuple(f"evict {o.key}" for o in evicted),
                tuple(f"evict {k}" for k, _ in wanted),
                self._state_before(i),
            )
        return None


def _verdict(
    trace: Trace,
    by_op: Mapping[int, Sequence[Record]],
    policy: str | Policy,
    config: EngineConfig,
    *,
    complete: bool = False,
    keep_going: bool = False,
    allow: Iterable[str] = (),
    tick: Callable[[], None] | None = None,
) -> OracleVerdict:
    n_ops = len(trace.ops)
    if any(op >= n_ops or op < 0 for op in by_op):
        return OracleVerdict("UNKNOWN", reason="the log names ops the trace does not have")
    last_logged = last_complete(by_op, n_ops, complete)
    conf = Conformance(policy, config, allow=allow, recall=lambda j: by_op.get(j, ()))
    first: OracleVerdict | None = None
    found: list[Divergence] = []
    for i, op in enumerate(trace.ops):
        records = by_op.get(i, ())
        v = conf.step(i, op, records, last=i >= last_logged)
        if tick is not None:
            tick()
        if v is None:
            continue
        if not keep_going or v.verdict != "ILLEGAL":
            if first is not None:  # an UNKNOWN tail after adopted divergences
                return _with(first, found, stopped=f"op {i}: {v.reason}")
            return v
        first = first or v
        found.append(
            Divergence(
                i, divergence_class(v.reason, v.expected, v.got), v.reason, v.expected, v.got
            )
        )
        why = conf.adopt(i, op, records)
        if why is not None:
            return _with(first, found, stopped=why)
    return _with(first, found) if first is not None else OracleVerdict("OK")


def _with(first: OracleVerdict, found: Sequence[Divergence], stopped: str = "") -> OracleVerdict:
    classes: dict[str, int] = {}
    for d in found:
        classes[d.cls] = classes.get(d.cls, 0) + 1
    return attrs.evolve(first, divergences=tuple(found), classes=classes, stopped=stopped)


def check_log(
    trace: Trace,
    log: Sequence[Record] | LogStream,
    policy: str | Policy,
    config: EngineConfig,
    *,
    shorten: bool = True,
    budget: int = 300,
    complete: bool = False,
    keep_going: bool = False,
    allow: Iterable[str] = (),
    tick: Callable[[], None] | None = None,
) -> OracleVerdict:
    """Policy mode. On ILLEGAL, ``shorten`` also delta-debugs the trace prefix up to the
    divergent op (dropping ops together with their log records, ``budget`` replays at most)
    to a shorter trace whose restricted log still diverges at its last op. ``complete``: the
    log covers every op of the trace (as an ``end`` record says), so its last op is judged
    too. ``keep_going``: after a divergence, adopt the implementation's decisions and go on;
    the verdict lists every divergence with a class (the first one is shortened). ``allow``:
    opt-in admissible :data:`VARIANTS`."""
    allow = tuple(allow)
    by_op: Mapping[int, Sequence[Record]] = (
        log if isinstance(log, LogStream) else records_by_op(log)
    )
    verdict = _verdict(
        trace,
        by_op,
        policy,
        config,
        complete=complete,
        keep_going=keep_going,
        allow=allow,
        tick=tick,
    )
    if verdict.verdict != "ILLEGAL" or verdict.op is None or not shorten:
        return verdict
    at = verdict.op
    keep = list(range(at))  # op `at` itself always stays: it is the divergence

    def restricted(kept: Sequence[int]) -> tuple[Trace, dict[int, list[Record]]]:
        idx = [*kept, at]
        sub = Trace(trace.header, tuple(trace.ops[j] for j in idx))
        recs: dict[int, list[Record]] = {
            n: [{**r, "op": n} for r in by_op.get(j, ())] for n, j in enumerate(idx)
        }
        return sub, {n: r for n, r in recs.items() if r}

    cls = divergence_class(verdict.reason, verdict.expected, verdict.got)

    def diverges(kept: Sequence[int]) -> bool:
        sub, recs = restricted(kept)
        if not self_consistent(recs):  # a witness must not evict what it never wrote
            return False
        try:
            v = _verdict(sub, recs, policy, config, complete=True, allow=allow)
        except TraceError:  # e.g. an `open` dropped while its context is still used
            return False
        return (
            v.verdict == "ILLEGAL"
            and v.op == len(kept)
            and divergence_class(v.reason, v.expected, v.got) == cls
        )

    if not diverges(keep):  # a divergence that needs the ops after it cannot be cut
        return verdict

    def on_op(pick: Callable[[Op], bool]) -> Callable[[int], bool]:
        return lambda j: pick(trace.ops[j])

    def groups(kept: Sequence[int]) -> list[Callable[[int], bool]]:
        # the trace's groups (a context and its children, a session), over the kept indices
        return [on_op(pick) for pick in op_groups([trace.ops[j] for j in kept])]

    short, _ = shrink(keep, lambda ops: diverges(list(ops)), budget=budget, groups=groups)
    sub, recs = restricted(short)
    return attrs.evolve(
        verdict,
        shortened_trace=tuple(dumps_op(o) for o in sub.ops),
        shortened_log=tuple(dict(r) for n in sorted(recs) for r in recs[n]),
    )
