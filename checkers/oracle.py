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
* **invariants-only mode** (:func:`check_log_invariants`): no policy is assumed. The reference
  engine is driven by the log itself (a puppet policy places, evicts and reclaims exactly as the
  log says) and the invariant monitor judges the run it reconstructs, as a history checker
  judges a database against an isolation level rather than against one execution.

Verdicts: ``OK``; ``ILLEGAL`` with the first divergent op, what the reference allowed and what
the implementation did, the resident state just before, and (policy mode) a shortened trace
prefix that still diverges; ``UNKNOWN`` when the log cannot decide (it ends before the trace
does, or names ops the trace does not have).

:class:`Conformance` is incremental (one op and its records at a time), so the same code checks
a finished log and drives lockstep differential testing (:mod:`checkers.lockstep`).
"""

from __future__ import annotations

import heapq
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from checkers.harness import shrink
from checkers.invariants import Monitor
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import ConfigError, PolicyError, TraceError
from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.jsonl import read_jsonl
from kvmodel.observations import AllocObs, observation_to_json
from kvmodel.policy import BasePolicy, Placement, Policy, declared_rank, rank_key, resolve_policy
from kvmodel.trace import MAX_STRING, Infer, Op, Trace, dumps_op
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

Record = Mapping[str, Any]


@attrs.frozen
class Divergence:
    """One op where the implementation did what the reference does not allow (``--keep-going``
    lists them all; ``cls`` is a label to count them by, see :func:`divergence_class`)."""

    op: int
    cls: str
    reason: str
    expected: tuple[str, ...] = ()
    got: tuple[str, ...] = ()


@attrs.frozen
class OracleVerdict:
    verdict: str  # OK | ILLEGAL | UNKNOWN
    op: int | None = None
    reason: str = ""
    expected: tuple[str, ...] = ()
    got: tuple[str, ...] = ()
    state_before: tuple[str, ...] = ()
    #: policy mode, ILLEGAL: a shortened trace (JSON lines) and log that still diverge
    shortened_trace: tuple[str, ...] = ()
    shortened_log: tuple[dict[str, Any], ...] = ()
    #: ``keep_going``: every divergence, the first included, and how many per class; ``stopped``
    #: says why the check ended before the trace did (a divergence it could not adopt)
    divergences: tuple[Divergence, ...] = ()
    classes: dict[str, int] = attrs.field(factory=dict)
    stopped: str = ""

    def render(self) -> str:
        lines = [
            f"{self.verdict}"
            + (f" at op {self.op}" if self.op is not None else "")
            + (f": {self.reason}" if self.reason else "")
        ]
        if self.expected or self.got:
            lines.append("  reference allows: " + ("; ".join(self.expected) or "(nothing)"))
            lines.append("  implementation:   " + ("; ".join(self.got) or "(nothing)"))
        if self.state_before:
            lines.append("  resident before the op:")
            lines += [f"    {s}" for s in self.state_before]
        if self.shortened_trace:
            lines.append(
                f"  shortened trace that still diverges ({len(self.shortened_trace)} ops):"
            )
            lines += [f"    {s}" for s in self.shortened_trace]
        if self.divergences:
            lines.append(
                f"  {len(self.divergences)} divergence(s) in {len(self.classes)} class(es) "
                "(--keep-going: each adopted, then checking went on):"
            )
            for cls, n in sorted(self.classes.items(), key=lambda x: (-x[1], x[0])):
                first = next(d.op for d in self.divergences if d.cls == cls)
                lines.append(f"    {n:6d}  {cls}  (first at op {first})")
        if self.stopped:
            lines.append(f"  stopped: {self.stopped}")
        return "\n".join(lines)


#: the type of each spec T4 field the oracle reads, where present (null allowed where named);
#: integers >= 0. A record of another shape is a located error, never a crash.
_FIELDS: dict[str, tuple[str, bool]] = {
    "seq": ("integer", False),
    "op": ("integer", False),
    "own_blocks": ("integer", True),
    "depth": ("integer", True),
    "block": ("integer", True),
    "prompt_tokens": ("integer", True),
    "hit_tokens": ("integer", True),
    "miss_tokens": ("integer", True),
    "output_tokens": ("integer", True),
    "kind": ("string", False),
    "ctx": ("string", True),
    "key": ("string", True),
    "tier": ("string", True),
    "state": ("string", True),
    "reason": ("string", True),
    "rewrite": ("boolean", True),
    "t": ("number", True),
}


def _field_ok(v: object, kind: str, nullable: bool) -> bool:
    if v is None:
        return nullable
    if kind == "integer":  # counts and positions: any length of run is allowed
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0
    if kind == "string":
        return isinstance(v, str) and len(v) <= MAX_STRING
    if kind == "boolean":
        return isinstance(v, bool)
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def load_log(path: str | Path) -> list[dict[str, Any]]:
    out = []
    for n, rec in read_jsonl(path, "implementation log"):
        if (
            not isinstance(rec, dict)
            or not isinstance(rec.get("op"), int)
            or not isinstance(rec.get("kind"), str)
        ):
            raise TraceError(
                "expected an observation record with integer 'op' and 'kind'",
                file=str(path),
                line=n,
                field="op",
            )
        for name, (kind, nullable) in _FIELDS.items():
            if name in rec and not _field_ok(rec[name], kind, nullable):
                what = f"{'an' if kind[0] in 'aeiu' else 'a'} {kind}" + (
                    " >= 0" if kind == "integer" else ""
                )
                raise TraceError(
                    f"expected {what}{' or null' if nullable else ''} (got {rec[name]!r:.60})",
                    file=str(path),
                    line=n,
                    op=str(rec["kind"])[:40],
                    field=name,
                )
        out.append(rec)
    return out


def _by_op(log: Iterable[Record]) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = defaultdict(list)
    for r in log:
        out[int(r["op"])].append(r)
    return out


def _decisions(records: Iterable[Record], own_keys: Sequence[BlockKey]) -> list[str]:
    """The comparable decisions of one op (eviction victims are checked separately).

    Reuse is compared by key: an implementation may report its context's own kept prefix as
    ``own_blocks`` on the ``infer`` record (as the reference does) or as ``hit`` records (as a
    cache that looks every block up does); ``own_keys`` names those blocks. A rejected
    inference reuses nothing, so its lookups are not compared.
    """
    out: list[str] = []
    for r in records:
        k = r["kind"]
        if k == "infer":
            out += [f"reuse {key}" for key in own_keys[: int(r.get("own_blocks") or 0)]]
        elif k == "hit":
            out.append(f"reuse {r.get('key')}")
        elif k == "alloc":
            out.append(f"write {r.get('key')} in {r.get('tier')}")
        elif k == "bypass":
            out.append(f"bypass {r.get('key')}")
        elif k == "free" and r.get("reason") == "reclaim":
            out.append(f"reclaim {r.get('key')}")
        elif k == "reject":
            out.append("reject")
    if "reject" in out:  # a refused inference reused nothing, whatever its lookup found
        out = [d for d in out if not d.startswith("reuse ")]
    return sorted(out)


def divergence_class(reason: str, expected: Sequence[str], got: Sequence[str]) -> str:
    """A label to count divergences by: the kind of decision that differs and in which direction
    (``missing``: the reference made it and the implementation did not; ``extra``: the reverse),
    e.g. ``write-extra+write-missing`` for a block written in another tier, ``reuse-missing`` for
    a hit the implementation did not take; for evictions, ``victim-not-admissible`` or
    ``evicts-more``/``evicts-fewer``."""
    if reason.startswith("eviction outside"):
        return "victim-not-admissible"
    if reason.startswith("the reference evicts"):
        return "evicts-more" if len(got) > len(expected) else "evicts-fewer"
    mine, theirs = set(expected), set(got)
    labels = {f"{d.split(' ')[0]}-missing" for d in mine - theirs}
    labels |= {f"{d.split(' ')[0]}-extra" for d in theirs - mine}
    return "+".join(sorted(labels)) or "decisions"


#: opt-in admissible variants (spec/invariants.md §Oracle): behaviours real engines have that a
#: rank does not fix, each accepted only when asked for
VARIANTS: Mapping[str, str] = {
    "extra-victims": "an inference that must evict may evict more than it needs (a whole tree "
    "node, say), each extra victim admissible in turn under the rank after the op",
    "refused-lookup-refreshes": "a refused inference's lookup refreshes the recency of the "
    "blocks it found (its hit records), as a cache that stamps nodes on match does",
}


def _victims(records: Iterable[Record]) -> list[tuple[str, object]]:
    """An op's evict records as (key, group) in log order (``group``: absent, or a label of
    the victims the implementation freed together)."""
    return [(str(r.get("key")), r.get("group")) for r in records if r["kind"] == "evict"]


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
        self.adopt: _Puppet | None = None

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

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        if self.adopt is not None:
            return self.adopt.eviction_order(view, candidates)
        return self._follow_order(view, candidates)

    def _follow_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterator[BlockId]:
        """The implementation's next victims while each is admissible, then the rank order.

        A heap of cached rank keys (as :meth:`BasePolicy.eviction_order`): O(n) to build, and
        per victim O((ties + 1) log n) -- the tied run is popped, searched, and pushed back.
        """
        rank = self.inner.rank
        cache = self._rank_cache()
        heap: list[tuple[tuple[float, ...], BlockId, BlockInfo]] = []
        for b in candidates:
            hit = cache.get(b.id)
            if hit is None or hit[0] is not b:
                hit = (b, rank_key(rank, b))
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
        key, group = self.wanted[0]
        allowed = {k for k, g in self.wanted if g == group} if group is not None else {key}
        pick = next((e for e in tied if e[2].key in allowed), None)
        if pick is None:
            self.illegal = (
                why,
                tuple(f"evict {e[2].key} ({e[2].state.value})" for e in tied),
                f"evict {' or '.join(sorted(allowed))}",
            )
            return None
        self.wanted.remove(next(w for w in self.wanted if w[0] == pick[2].key))
        return pick

    def extra_victims(self, view: ModelView) -> Iterator[BlockId]:
        """After the op: the implementation's victims beyond what the reference needed, each
        admissible in turn (tied with the best evictable candidate on the rank, its group's
        order free) -- yielded one at a time, the caller evicting each before asking again."""
        rank = self.inner.rank
        while self.wanted and self.illegal is None:
            cands = [view.block(b) for b in view.resident() if view.evictable(b)]
            if not cands:
                key, _ = self.wanted[0]
                self.illegal = ("eviction beyond need of a block not evictable", (), f"evict {key}")
                return
            keyed = sorted((rank_key(rank, b), b.id, b) for b in cands)
            best = keyed[0][0][:-1]
            tied = [e for e in keyed if e[0][:-1] == best]
            pick = self._pick(tied, "eviction beyond need outside the admissible set")
            if pick is None:
                return
            yield pick[1]


def _state(engine: Engine) -> tuple[str, ...]:
    v = engine.view
    return tuple(
        f"{b.key} depth {b.depth} {b.state.value} in {b.tier}"
        for b in (v.block(x) for x in v.resident())
    )


def _own_keys(engine: Engine, op: Op) -> list[BlockKey]:
    """Before an inference: the keys of its context's materialized chain (the own prefix)."""
    if not isinstance(op, Infer) or op.ctx not in engine.contexts:
        return []
    v = engine.view
    return [v.block(b).key or BlockKey("") for b in v.chain(op.ctx)]


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
        self, policy: str | Policy, config: EngineConfig, *, allow: Iterable[str] = ()
    ) -> None:
        self.policy, self.config = policy, config
        self.allow = frozenset(allow)
        if bad := sorted(self.allow - set(VARIANTS)):
            raise ConfigError(
                f"unknown admissible variant {bad[0]!r}; known: {', '.join(VARIANTS)}"
            )
        self.follow = _Follow(rank_policy(policy))
        self.engine = Engine(config, self.follow)
        self.ops = 0
        #: each op, the victims it followed, whether it was adopted, and the implementation's
        #: records for it
        self._seen: list[tuple[Op, list[tuple[str, object]], bool, Sequence[Record]]] = []

    def _rebuilt(self, i: int) -> Conformance:
        """A reference that has applied ops ``0..i-1`` as this one did, rebuilt on demand (only
        a divergence needs it, and snapshotting every op would cost O(resident) per op)."""
        again = Conformance(self.policy, self.config, allow=self.allow)
        for j, (op, victims, adopted, records) in enumerate(self._seen[:i]):
            # an adopted op's victims are the puppet's to take, not the follower's
            again.follow.wanted = [] if adopted else list(victims)
            again.follow.adopt = _Puppet({j: records}) if adopted else None
            seen = len(again.engine.log)
            again.engine.apply(op)
            again.follow.adopt = None
            again._after(op, seen, records)
            again._seen.append((op, victims, adopted, records))
        again.ops = i
        return again

    def _after(self, op: Op, seen: int, records: Sequence[Record]) -> None:
        """What the opt-in variants add after an op (``seen``: the log's length before it)."""
        self._evict_extra(op, seen)
        if "refused-lookup-refreshes" in self.allow and any(
            o.kind == "reject" for o in self.engine.log.since(seen)
        ):
            where = {self.engine.blocks[b].spec.key: b for b in self.engine.blocks}
            for r in records:
                if r["kind"] == "hit" and (b := where.get(r.get("key"))) is not None:
                    self.engine.touch_now(b)

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

    def _state_before(self, i: int) -> tuple[str, ...]:
        return _state(self._rebuilt(i).engine)

    def adopt(self, i: int, op: Op, records: Sequence[Record]) -> str | None:
        """After a divergence at op ``i`` (the last op stepped): redo it with the
        implementation's own decisions (writes and tiers, victims, reclaims, as its records say)
        so that checking can go on from the state the implementation is in. ``None`` when the
        reference could follow it there; else why not (its records are not what its own state
        allows here, or the model refuses them)."""
        again = self._rebuilt(i)
        own = _own_keys(again.engine, op)
        puppet = _Puppet({i: records})
        again.follow.adopt = puppet
        seen = len(again.engine.log)
        try:
            again.engine.apply(op)
        except PolicyError as e:
            return f"the implementation's decisions at op {i} are refused by the model ({e})"
        finally:
            again.follow.adopt = None
        ref = [observation_to_json(o) for o in again.engine.log.since(seen)]
        wanted = [r for r in records if r["kind"] == "evict"]
        evicted = [r for r in ref if r["kind"] == "evict"]
        if (
            puppet.missing is not None
            or _decisions(ref, own) != _decisions(records, own)
            or len(evicted) != len(wanted)
        ):
            why = (
                puppet.missing or "its reuse, writes or rejections differ from what the state gives"
            )
            return f"cannot follow the implementation past op {i}: {why}"
        again._seen.append((op, _victims(records), True, records))
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
        own = _own_keys(self.engine, op)
        wanted = _victims(records)
        self.follow.wanted = list(wanted)
        self._seen.append((op, wanted, False, records))
        seen = len(self.engine.log)
        self.engine.apply(op)
        self._after(op, seen, records)
        self.ops += 1
        if self.follow.illegal is not None:
            why, allowed, did = self.follow.illegal
            return OracleVerdict("ILLEGAL", i, why, allowed, (did,), self._state_before(i))
        ref = [observation_to_json(o) for o in self.engine.log.since(seen)]
        mine, theirs = _decisions(ref, own), _decisions(records, own)
        n_evicted = sum(r["kind"] == "evict" for r in ref)
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
                tuple(f"evict {r['key']}" for r in ref if r["kind"] == "evict"),
                tuple(f"evict {k}" for k, _ in wanted),
                self._state_before(i),
            )
        return None


def _last_complete(by_op: Mapping[int, Sequence[Record]], n_ops: int, complete: bool) -> int:
    """The first op the log may have cut short: ``n_ops`` for a complete log (``complete``, or
    an ``end`` record at the trace's last op), the op after an ``end`` record's, else the last
    op logged (spec/invariants.md §Oracle)."""
    if complete:
        return n_ops
    ends = [op for op, recs in by_op.items() if any(r["kind"] == "end" for r in recs)]
    if ends:
        return min(max(ends) + 1, n_ops)
    return max(by_op, default=-1)


def _verdict(
    trace: Trace,
    by_op: Mapping[int, Sequence[Record]],
    policy: str | Policy,
    config: EngineConfig,
    *,
    complete: bool = False,
    keep_going: bool = False,
    allow: Iterable[str] = (),
) -> OracleVerdict:
    n_ops = len(trace.ops)
    if any(op >= n_ops or op < 0 for op in by_op):
        return OracleVerdict("UNKNOWN", reason="the log names ops the trace does not have")
    last_logged = _last_complete(by_op, n_ops, complete)
    conf = Conformance(policy, config, allow=allow)
    first: OracleVerdict | None = None
    found: list[Divergence] = []
    for i, op in enumerate(trace.ops):
        records = by_op.get(i, ())
        v = conf.step(i, op, records, last=i >= last_logged)
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


def self_consistent(by_op: Mapping[int, Sequence[Record]]) -> bool:
    """Does the log only hit, evict and reclaim blocks it has written (and not evicted or freed
    since)? A shortened witness must be: dropping the op that wrote a block while keeping its
    eviction would leave a log no implementation could have produced."""
    resident: set[object] = set()
    for op in sorted(by_op):
        for r in by_op[op]:
            k, key = r["kind"], r.get("key")
            if k == "alloc" and key is not None:
                resident.add(key)
            elif k == "hit" and key not in resident:
                return False
            elif k == "evict" or (k == "free" and r.get("reason") == "reclaim"):
                if key not in resident:
                    return False
                resident.discard(key)
            elif k == "free" and key is not None:
                resident.discard(key)
    return True


def check_log(
    trace: Trace,
    log: Sequence[Record],
    policy: str | Policy,
    config: EngineConfig,
    *,
    shorten: bool = True,
    budget: int = 300,
    complete: bool = False,
    keep_going: bool = False,
    allow: Iterable[str] = (),
) -> OracleVerdict:
    """Policy mode. On ILLEGAL, ``shorten`` also delta-debugs the trace prefix up to the
    divergent op (dropping ops together with their log records, ``budget`` replays at most)
    to a shorter trace whose restricted log still diverges at its last op. ``complete``: the
    log covers every op of the trace (as an ``end`` record says), so its last op is judged
    too. ``keep_going``: after a divergence, adopt the implementation's decisions and go on;
    the verdict lists every divergence with a class (the first one is shortened). ``allow``:
    opt-in admissible :data:`VARIANTS`."""
    allow = tuple(allow)
    by_op = _by_op(log)
    verdict = _verdict(
        trace, by_op, policy, config, complete=complete, keep_going=keep_going, allow=allow
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
    short, _ = shrink(keep, lambda ops: diverges(list(ops)), budget=budget)
    sub, recs = restricted(short)
    return attrs.evolve(
        verdict,
        shortened_trace=tuple(dumps_op(o) for o in sub.ops),
        shortened_log=tuple(dict(r) for n in sorted(recs) for r in recs[n]),
    )


# ---------------------------------------------------------------- invariants-only mode


class _Puppet(BasePolicy):
    """Places, evicts and reclaims exactly as the implementation's log says, op by op."""

    name: ClassVar[str] = "oracle-puppet"
    #: no policy is assumed, so no worker is exempt from deterministic-placement
    predicts_workers: ClassVar[bool] = False

    def __init__(self, by_op: Mapping[int, Sequence[Record]]) -> None:
        self.missing: str | None = None
        #: per op: the tier of each (ctx, depth) written, bypassed keys, victims, reclaims
        self.writes: dict[int, dict[tuple[object, object], str]] = defaultdict(dict)
        #: per op: the tier of each key written (for a log without ctx and depth)
        self.key_writes: dict[int, dict[object, str]] = defaultdict(dict)
        self.bypassed: dict[int, set[object]] = defaultdict(set)
        self.victims: dict[int, list[object]] = defaultdict(list)
        self.reclaims: dict[int, list[object]] = defaultdict(list)
        for op, records in by_op.items():
            for r in records:
                k = r["kind"]
                if k == "alloc":
                    self.writes[op].setdefault((r.get("ctx"), r.get("depth")), str(r.get("tier")))
                    if r.get("key") is not None:
                        self.key_writes[op].setdefault(r.get("key"), str(r.get("tier")))
                elif k == "bypass":
                    self.bypassed[op].add(r.get("key"))
                elif k == "evict":
                    self.victims[op].append(r.get("key"))
                elif k == "free" and r.get("reason") == "reclaim":
                    self.reclaims[op].append(r.get("key"))

    def _ids(self, view: ModelView, keys: Sequence[object]) -> list[BlockId]:
        if not keys:
            return []
        where = {view.block(b).key: b for b in view.resident()}
        return [where[BlockKey(str(k))] for k in keys if BlockKey(str(k)) in where]

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        writes = self.writes.get(view.now_op, {})
        tier = (
            writes.get((block.ctx, block.depth))
            or writes.get((None, block.depth))
            or (self.key_writes.get(view.now_op, {}).get(block.key) if block.key else None)
        )
        if tier is None:
            self.missing = f"no write of block {block.depth} of {block.ctx} in the log"
            return Placement(tuple(t.name for t in view.tiers()))
        bypass = block.key is not None and block.key in self.bypassed.get(view.now_op, ())
        return Placement((TierName(tier),), bypass=bypass)

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        return self._ids(view, self.victims.get(view.now_op, []))

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        return self._ids(view, self.reclaims.get(view.now_op, []))


def check_log_invariants(
    trace: Trace,
    log: Sequence[Record],
    config: EngineConfig,
    invariants: Iterable[str],
    *,
    complete: bool = False,
) -> OracleVerdict:
    """Invariants-only mode: reconstruct the implementation's run from its log and judge it by
    the named invariants alone. A log that cannot be followed -- its hits, writes or rejections
    are not what its own residency gives on this trace -- is ILLEGAL as inconsistent."""
    by_op = _by_op(log)
    n_ops = len(trace.ops)
    if any(op >= n_ops or op < 0 for op in by_op):
        return OracleVerdict("UNKNOWN", reason="the log names ops the trace does not have")
    last_logged = _last_complete(by_op, n_ops, complete)
    puppet = _Puppet(by_op)
    engine = Engine(config, puppet)
    mon = Monitor(engine, invariants)
    for i, op in enumerate(trace.ops):
        before = _state(engine)
        own = _own_keys(engine, op)
        seen = len(engine.log)
        mon.before_op(op)
        try:
            engine.apply(op)
        except PolicyError as e:
            mon.policy_error(e)
        else:
            _follow_every_victim(engine, op, puppet.victims.get(i, []))
            mon.after_op(op)
        if mon.violations:
            v = mon.violations[0]
            why = _keyed(f"{v.invariant}: {v.message}", engine)
            return OracleVerdict("ILLEGAL", i, why, (), (), before)
        mine = _decisions((observation_to_json(o) for o in engine.log.since(seen)), own)
        theirs = _decisions(by_op.get(i, ()), own)
        if mine != theirs or puppet.missing is not None:
            if i >= last_logged:
                return OracleVerdict("UNKNOWN", i, "the log ends before the trace does")
            why = puppet.missing or "its decisions are not what its own residency gives"
            return OracleVerdict(
                "ILLEGAL", i, f"the log is inconsistent: {why}", tuple(mine), tuple(theirs), before
            )
    mon.at_end()
    if mon.violations:
        v = mon.violations[0]
        return OracleVerdict("ILLEGAL", v.op, _keyed(f"{v.invariant}: {v.message}", engine))
    return OracleVerdict("OK")


def _follow_every_victim(engine: Engine, op: Op, victims: Sequence[object]) -> None:
    """Invariants-only mode: the log's victims the engine did not need (a cache that frees a
    whole node) are evicted too, so the reconstructed run keeps the implementation's residency
    instead of drifting from it. One not evictable now stays, and the comparison of later
    decisions says the log is inconsistent."""
    if not victims:
        return
    where = {b.spec.key: b for b in engine.blocks.values()}
    ctx = op.ctx if isinstance(op, Infer) else ContextId("")
    for key in victims:
        b = where.get(BlockKey(str(key)))
        if b is None or b.id not in engine.blocks or not engine.view.evictable(b.id):
            continue
        engine.evict_now(b.id, ctx)


def _keyed(message: str, engine: Engine) -> str:
    """A monitor message with the reference's slot numbers (``block 7``) replaced by the keys
    the implementation knows its blocks by (the last block written to that slot)."""
    key_of: dict[int, str] = {}
    for o in engine.log:
        if isinstance(o, AllocObs):
            key_of[o.block] = str(o.key)
    return re.sub(
        r"\bblock (\d+)", lambda m: f"block {key_of.get(int(m.group(1)), m.group(1))}", message
    )
