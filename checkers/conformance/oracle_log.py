"""The implementation's side of log conformance: what its observation log says.

Shared by both oracle modes (:mod:`checkers.conformance.oracle` judges a log against a rank policy,
:mod:`checkers.conformance.oracle_invariants` against the invariants alone): the verdict types, the
log reader with its field checks (spec T4), the per-op decisions a log can show, the reading of an
``end`` record, self-consistency, the divergence classes, and :class:`Puppet` -- a policy that
places, evicts and reclaims exactly as a log says (invariants-only mode drives the reference
with it; policy mode's ``--keep-going`` adopts a divergent op with it).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from kvmodel.engine import Engine
from kvmodel.errors import TraceError
from kvmodel.ids import BlockId, BlockKey, TierName
from kvmodel.io.jsonl import iter_jsonl
from kvmodel.io.trace import MAX_STRING, Infer, Op
from kvmodel.policy import BasePolicy, Placement
from kvmodel.view import BlockInfo, ModelView, NewBlock

__all__ = [
    "MOVE_KINDS",
    "Divergence",
    "LogStream",
    "OracleVerdict",
    "Puppet",
    "Record",
    "decisions",
    "divergence_class",
    "last_complete",
    "load_log",
    "own_keys",
    "records_by_op",
    "resident_state",
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
    """What :func:`check_log` (``kvmodel oracle``) decided: ``OK`` (the log is a behaviour the
    reference allows), ``ILLEGAL`` (at ``op``: what the reference ``expected`` and what the log
    ``got``, the state before, and a shortened trace and log that still diverge) or
    ``UNKNOWN`` (the log cannot decide: ``reason`` says why). :meth:`render` is the text."""

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
        if len(self.expected) > _SHOWN or len(self.got) > _SHOWN:
            # a long op (a whole request's writes, copies and loads): what differs, first
            mine, theirs = set(self.expected), set(self.got)
            only_ref = [d for d in self.expected if d not in theirs]
            only_impl = [d for d in self.got if d not in mine]
            shared = len(self.expected) - len(only_ref)
            lines.append("  only the reference: " + ("; ".join(only_ref) or "(nothing)"))
            lines.append("  only the implementation: " + ("; ".join(only_impl) or "(nothing)"))
            lines.append(f"  (and {shared} decision(s) both made; --json lists them all)")
        elif self.expected or self.got:
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


#: above this many decisions on either side, a report shows what differs rather than both lists
_SHOWN = 20

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


def _checked(rec: Any, path: str | Path, n: int) -> dict[str, Any]:
    """A log line's record, its fields checked (spec T4), or a located error."""
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
    for name, value in rec.items():  # (a record's own fields: fewer than _FIELDS)
        spec = _FIELDS.get(name)
        if spec is None:
            continue
        kind, nullable = spec
        # (the usual values, decided by their exact type, as JSON gives them; any other goes
        # to _field_ok, which decides: a log has about a million records)
        t = type(value)
        if t is int:
            if kind == "number" or (kind == "integer" and value >= 0):
                continue
        elif t is str:
            if kind == "string" and len(value) <= MAX_STRING:
                continue
        elif value is None and nullable:
            continue
        if not _field_ok(value, kind, nullable):
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
    return rec


def load_log(path: str | Path) -> list[dict[str, Any]]:
    """Every record of an implementation's log, checked (the whole log in memory: for a long
    log, :class:`LogStream`)."""
    return [_checked(rec, path, n) for n, _, _, rec in iter_jsonl(path, "implementation log")]


class LogStream(Mapping[int, Sequence[Record]]):
    """An implementation's log as its records by op, read from the file when asked for.

    One pass checks every record (as :func:`load_log` does) and keeps, per op, where its
    records are in the file, and the ops of its ``end`` records; an op's records are parsed
    again each time they are read. So a judge holds an offset per op, not the log: a 152 MB log
    of 4,860 ops is a few hundred KB. A log whose ops are not in order (records of an op after
    a later op's) is read whole instead, as :func:`records_by_op` groups it -- the same records
    either way.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._spans: dict[int, list[tuple[int, int]]] = {}
        self._whole: dict[int, list[Record]] | None = None
        self.end_ops: list[int] = []
        #: the first record that moves KV (MOVE_KINDS), as (op, kind): what invariants-only
        #: mode cannot follow yet
        self.first_move: tuple[int, str] | None = None
        last = -1
        for n, start, stop, rec in iter_jsonl(path, "implementation log"):
            op = int(_checked(rec, path, n)["op"])
            if rec["kind"] == "end":
                self.end_ops.append(op)
            elif self.first_move is None and rec["kind"] in MOVE_KINDS:
                self.first_move = (op, rec["kind"])
            spans = self._spans.setdefault(op, [])
            if spans and spans[-1][1] == start:
                spans[-1] = (spans[-1][0], stop)
            else:
                spans.append((start, stop))
            if op < last and self._whole is None:
                self._whole = {}  # out of order: read it whole below
            last = max(last, op)
        if self._whole is not None:
            self._whole = records_by_op(load_log(path))
            self._spans = {}

    def __getitem__(self, op: int) -> Sequence[Record]:
        if self._whole is not None:
            return self._whole[op]
        spans = self._spans[op]  # (KeyError: no records for op)
        out: list[Record] = []
        with self.path.open("rb") as f:
            for start, stop in spans:
                f.seek(start)
                # (decoded once, here: the first pass found it UTF-8; json.loads of bytes would
                # detect the encoding again line by line)
                for line in f.read(stop - start).decode("utf-8").split("\n"):
                    if line.strip():
                        out.append(json.loads(line))
        return out

    def __iter__(self) -> Iterator[int]:
        return iter(self._whole if self._whole is not None else self._spans)

    def __len__(self) -> int:
        return len(self._whole if self._whole is not None else self._spans)


#: the records of the movement layer (spec/movement.md MV8)
MOVE_KINDS = frozenset({"copy", "load", "drop-copy"})


def records_by_op(log: Iterable[Record]) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = defaultdict(list)
    for r in log:
        out[int(r["op"])].append(r)
    return out


def decisions(records: Iterable[Record], own_keys: Sequence[BlockKey]) -> list[str]:
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
        # moves (spec/movement.md MV8): copies, loads and drops by key (a drop for room is
        # followed where the rules admit more than one, as a victim is: MV5, MV13)
        elif k == "copy":
            out.append(f"copy {r.get('key')} to {r.get('tier')}: {r.get('result')}")
        elif k == "load":
            out.append(f"load {r.get('key')} from {r.get('from_tier')}")
        elif k == "drop-copy":
            out.append(f"drop {r.get('key')} from {r.get('tier')} ({r.get('reason')})")
    if "reject" in out:  # a refused inference reused nothing, whatever its lookup found
        out = [d for d in out if not d.startswith("reuse ")]
    return sorted(out)


def divergence_class(reason: str, expected: Sequence[str], got: Sequence[str]) -> str:
    """A label to count divergences by: the kind of decision that differs and in which direction
    (``missing``: the reference made it and the implementation did not; ``extra``: the reverse),
    e.g. ``write-extra+write-missing`` for a block written in another tier, ``reuse-missing`` for
    a hit the implementation did not take; for evictions, ``victim-not-admissible`` or
    ``evicts-more``/``evicts-fewer``."""
    if reason.startswith("refresh outside"):
        return "refresh-not-admissible"
    if reason.startswith("copy dropped for room"):
        return "copy-drop-not-admissible"
    if "outside the admissible set" in reason or reason.startswith("eviction beyond need"):
        # (a victim taken beyond need and not admissible is one too: it was classed by its
        # records, evict-extra+evict-missing, until issue 57)
        return "victim-not-admissible"
    if reason.startswith("the reference evicts"):
        return "evicts-more" if len(got) > len(expected) else "evicts-fewer"
    mine, theirs = set(expected), set(got)
    labels = {f"{d.split(' ')[0]}-missing" for d in mine - theirs}
    labels |= {f"{d.split(' ')[0]}-extra" for d in theirs - mine}
    return "+".join(sorted(labels)) or "decisions"


def resident_state(engine: Engine) -> tuple[str, ...]:
    v = engine.view
    return tuple(
        f"{b.key} depth {b.depth} {b.state.value} in {b.tier}"
        for b in (v.block(x) for x in v.resident())
    )


def own_keys(engine: Engine, op: Op) -> list[BlockKey]:
    """Before an inference: the keys of its context's materialized chain (the own prefix)."""
    if not isinstance(op, Infer) or op.ctx not in engine.contexts:
        return []
    v = engine.view
    return [v.block(b).key or BlockKey("") for b in v.chain(op.ctx)]


def last_complete(by_op: Mapping[int, Sequence[Record]], n_ops: int, complete: bool) -> int:
    """The first op the log may have cut short: ``n_ops`` for a complete log (``complete``, or
    an ``end`` record at the trace's last op), the op after an ``end`` record's, else the last
    op logged (spec/invariants.md §Oracle)."""
    if complete:
        return n_ops
    ends = (
        by_op.end_ops
        if isinstance(by_op, LogStream)
        else [op for op, recs in by_op.items() if any(r["kind"] == "end" for r in recs)]
    )
    if ends:
        return min(max(ends) + 1, n_ops)
    return max(by_op, default=-1)


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


class Puppet(BasePolicy):
    """Places, evicts and reclaims exactly as the implementation's log says, op by op."""

    name: ClassVar[str] = "oracle-puppet"
    #: no policy is assumed, so no worker is exempt from deterministic-placement
    predicts_workers: ClassVar[bool] = False

    def __init__(self, by_op: Mapping[int, Sequence[Record]]) -> None:
        self.missing: str | None = None
        self.by_op = by_op
        #: the op whose tables are below (-1: none yet); built from its records when first
        #: asked, so a puppet over a long log read op by op (LogStream) holds one op's
        self._op = -1
        #: the op's tier of each (ctx, depth) written, bypassed keys, victims, reclaims
        self.writes: dict[tuple[object, object], str] = {}
        #: the op's tier of each key written (for a log without ctx and depth)
        self.key_writes: dict[object, str] = {}
        self.bypassed: set[object] = set()
        self._victims: list[object] = []
        self.reclaims: list[object] = []

    def _at(self, op: int) -> None:
        """The tables of ``op``, from its records."""
        if op == self._op:
            return
        self._op = op
        self.writes, self.key_writes, self.bypassed = {}, {}, set()
        self._victims, self.reclaims = [], []
        for r in self.by_op.get(op, ()):
            k = r["kind"]
            if k == "alloc":
                self.writes.setdefault((r.get("ctx"), r.get("depth")), str(r.get("tier")))
                if r.get("key") is not None:
                    self.key_writes.setdefault(r.get("key"), str(r.get("tier")))
            elif k == "bypass":
                self.bypassed.add(r.get("key"))
            elif k == "evict":
                self._victims.append(r.get("key"))
            elif k == "free" and r.get("reason") == "reclaim":
                self.reclaims.append(r.get("key"))

    def victims(self, op: int) -> list[object]:
        """The log's victims of ``op``, in its order."""
        self._at(op)
        return self._victims

    def _ids(self, view: ModelView, keys: Sequence[object]) -> list[BlockId]:
        if not keys:
            return []
        where = {view.block(b).key: b for b in view.resident()}
        return [where[BlockKey(str(k))] for k in keys if BlockKey(str(k)) in where]

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        self._at(view.now_op)
        writes = self.writes
        tier = (
            writes.get((block.ctx, block.depth))
            or writes.get((None, block.depth))
            or (self.key_writes.get(block.key) if block.key else None)
        )
        if tier is None:
            self.missing = f"no write of block {block.depth} of {block.ctx} in the log"
            return Placement(tuple(t.name for t in view.tiers()))
        bypass = block.key is not None and block.key in self.bypassed
        return Placement((TierName(tier),), bypass=bypass)

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        return self._ids(view, self.victims(view.now_op))

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        self._at(view.now_op)
        return self._ids(view, self.reclaims)
