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
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from checkers.harness import shrink
from checkers.invariants import Monitor
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import ConfigError, PolicyError, TraceError
from kvmodel.ids import BlockId, BlockKey, TierName
from kvmodel.jsonl import read_jsonl
from kvmodel.observations import observation_to_json
from kvmodel.policy import BasePolicy, Placement, Policy, declared_rank, rank_key, resolve_policy
from kvmodel.trace import MAX_STRING, Infer, Op, Trace, dumps_op
from kvmodel.view import BlockInfo, ModelView, NewBlock

__all__ = [
    "Conformance",
    "OracleVerdict",
    "check_log",
    "check_log_invariants",
    "load_log",
    "rank_policy",
]

Record = Mapping[str, Any]


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


class _Follow(BasePolicy):
    """The reference policy, steered at evictions by the implementation's admissible choices."""

    name: ClassVar[str] = "oracle-follow"

    def __init__(self, inner: BasePolicy) -> None:
        self.inner = inner
        self.wanted: list[str] = []
        self.illegal: tuple[str, tuple[str, ...], str] | None = None

    @property
    def claims(self) -> frozenset[str]:  # type: ignore[override]
        return self.inner.claims

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return self.inner.place(view, block)

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        return self.inner.on_op(view, op)

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
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
            key = self.wanted[0]
            pick = next((e for e in tied if e[2].key == key), None)
            if pick is None:
                self.illegal = (
                    "eviction outside the admissible set",
                    tuple(f"evict {e[2].key} ({e[2].state.value})" for e in tied),
                    f"evict {key}",
                )
                break
            self.wanted.pop(0)
            for e in tied:
                if e is not pick:
                    heapq.heappush(heap, e)
            yield pick[1]
        while heap:
            yield heapq.heappop(heap)[1]


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

    def __init__(self, policy: str | Policy, config: EngineConfig) -> None:
        self.policy, self.config = policy, config
        self.follow = _Follow(rank_policy(policy))
        self.engine = Engine(config, self.follow)
        self.ops = 0
        self._seen: list[tuple[Op, list[str]]] = []  # each op and the victims it followed

    def _state_before(self, i: int) -> tuple[str, ...]:
        """The resident state before op ``i``, rebuilt on demand (only a divergence needs it,
        and snapshotting every op would cost O(resident) per op)."""
        again = Conformance(self.policy, self.config)
        for op, victims in self._seen[:i]:
            again.follow.wanted = list(victims)
            again.engine.apply(op)
        return _state(again.engine)

    def step(
        self, i: int, op: Op, records: Sequence[Record], *, last: bool = False
    ) -> OracleVerdict | None:
        """``last``: the implementation's log may end inside this op (a cut-short log)."""
        own = _own_keys(self.engine, op)
        wanted = [str(r.get("key")) for r in records if r["kind"] == "evict"]
        self.follow.wanted = list(wanted)
        self._seen.append((op, wanted))
        seen = len(self.engine.log)
        self.engine.apply(op)
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
                tuple(f"evict {k}" for k in wanted),
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
) -> OracleVerdict:
    n_ops = len(trace.ops)
    if any(op >= n_ops or op < 0 for op in by_op):
        return OracleVerdict("UNKNOWN", reason="the log names ops the trace does not have")
    last_logged = len(trace.ops) if complete else max(by_op, default=-1)
    conf = Conformance(policy, config)
    for i, op in enumerate(trace.ops):
        v = conf.step(i, op, by_op.get(i, ()), last=i >= last_logged)
        if v is not None:
            return v
    return OracleVerdict("OK")


def check_log(
    trace: Trace,
    log: Sequence[Record],
    policy: str | Policy,
    config: EngineConfig,
    *,
    shorten: bool = True,
    budget: int = 300,
) -> OracleVerdict:
    """Policy mode. On ILLEGAL, ``shorten`` also delta-debugs the trace prefix up to the
    divergent op (dropping ops together with their log records, ``budget`` replays at most)
    to a shorter trace whose restricted log still diverges at its last op."""
    by_op = _by_op(log)
    verdict = _verdict(trace, by_op, policy, config)
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

    def diverges(kept: Sequence[int]) -> bool:
        sub, recs = restricted(kept)
        try:
            v = _verdict(sub, recs, policy, config, complete=True)
        except TraceError:  # e.g. an `open` dropped while its context is still used
            return False
        return v.verdict == "ILLEGAL" and v.op == len(kept)

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
        self.bypassed: dict[int, set[object]] = defaultdict(set)
        self.victims: dict[int, list[object]] = defaultdict(list)
        self.reclaims: dict[int, list[object]] = defaultdict(list)
        for op, records in by_op.items():
            for r in records:
                k = r["kind"]
                if k == "alloc":
                    self.writes[op].setdefault((r.get("ctx"), r.get("depth")), str(r.get("tier")))
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
        tier = writes.get((block.ctx, block.depth)) or writes.get((None, block.depth))
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
    trace: Trace, log: Sequence[Record], config: EngineConfig, invariants: Iterable[str]
) -> OracleVerdict:
    """Invariants-only mode: reconstruct the implementation's run from its log and judge it by
    the named invariants alone. A log that cannot be followed -- its hits, writes or rejections
    are not what its own residency gives on this trace -- is ILLEGAL as inconsistent."""
    by_op = _by_op(log)
    n_ops = len(trace.ops)
    if any(op >= n_ops or op < 0 for op in by_op):
        return OracleVerdict("UNKNOWN", reason="the log names ops the trace does not have")
    last_logged = max(by_op, default=-1)
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
            mon.after_op(op)
        if mon.violations:
            v = mon.violations[0]
            return OracleVerdict("ILLEGAL", i, f"{v.invariant}: {v.message}", (), (), before)
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
        return OracleVerdict("ILLEGAL", v.op, f"{v.invariant}: {v.message}")
    return OracleVerdict("OK")
