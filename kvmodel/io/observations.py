"""The observation log: one JSON record per engine action (spec §trace-format T4).

Every record has ``seq`` (0-based, dense), ``t`` (the time of the op that caused it), ``op`` (the
0-based index of that op in the trace) and ``kind``. The log is the engine's externally visible
behaviour: replay determinism, the invariant checkers and the oracle all work on it.

``state`` on ``alloc``/``evict``/``free`` is the block's lifecycle class at that moment (spec L5).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from kvmodel.errors import InternalError
from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.lifecycle import BlockClass

__all__ = [
    "AllocObs",
    "BypassObs",
    "CopyObs",
    "DropCopyObs",
    "EvictObs",
    "FreeObs",
    "FreeReason",
    "HitObs",
    "InferObs",
    "LoadObs",
    "Observation",
    "ObservationLog",
    "RejectObs",
    "observation_line",
    "observation_to_json",
]


class FreeReason:
    """Why a block left memory other than by eviction (spec M4)."""

    PARTIAL = "partial"  # the partial tail block after its inference (never reusable, B4)
    BYPASS = "bypass"  # a bypassed block after its inference
    RECLAIM = "reclaim"  # a policy's reclaim at a boundary
    REJECT = "reject"  # rolled back when a request was rejected mid-allocation
    ALL = frozenset({"partial", "bypass", "reclaim", "reject"})


@attrs.frozen(slots=True)
class InferObs:
    kind: ClassVar[Literal["infer"]] = "infer"
    seq: int
    t: float
    op: int
    ctx: ContextId
    prompt_tokens: int
    hit_tokens: int
    miss_tokens: int
    output_tokens: int
    #: leading blocks reused from the context's own valid chain without a lookup (no hit records)
    own_blocks: int


@attrs.frozen(slots=True)
class HitObs:
    kind: ClassVar[Literal["hit"]] = "hit"
    seq: int
    t: float
    op: int
    ctx: ContextId
    block: BlockId
    key: BlockKey
    tier: TierName
    depth: int


@attrs.frozen(slots=True)
class AllocObs:
    """A block written. ``rewrite`` marks an orphan recomputed into its own slot (spec B6.3)."""

    kind: ClassVar[Literal["alloc"]] = "alloc"
    seq: int
    t: float
    op: int
    ctx: ContextId
    block: BlockId
    key: BlockKey | None
    tier: TierName
    depth: int
    state: BlockClass
    rewrite: bool = False


@attrs.frozen(slots=True)
class EvictObs:
    kind: ClassVar[Literal["evict"]] = "evict"
    seq: int
    t: float
    op: int
    ctx: ContextId
    block: BlockId
    key: BlockKey | None
    tier: TierName
    depth: int
    state: BlockClass


@attrs.frozen(slots=True)
class FreeObs:
    kind: ClassVar[Literal["free"]] = "free"
    seq: int
    t: float
    op: int
    block: BlockId
    key: BlockKey | None
    tier: TierName
    depth: int
    state: BlockClass
    reason: str


@attrs.frozen(slots=True)
class BypassObs:
    """A block placed for one inference only: never indexed, freed after it (spec P8)."""

    kind: ClassVar[Literal["bypass"]] = "bypass"
    seq: int
    t: float
    op: int
    ctx: ContextId
    block: BlockId
    key: BlockKey | None
    tier: TierName
    depth: int


@attrs.frozen(slots=True)
class RejectObs:
    kind: ClassVar[Literal["reject"]] = "reject"
    seq: int
    t: float
    op: int
    ctx: ContextId
    reason: str
    needed: int
    available: int


@attrs.frozen(slots=True)
class CopyObs:
    """A copy of ``key`` into ``tier`` decided by a demotion or an offload (spec/movement.md
    MV3, MV8): ``result`` is ``written`` (one block write to the tier), ``held`` (the tier held
    one already: renewed, nothing written) or ``no-room`` (the tier is full of primaries)."""

    kind: ClassVar[Literal["copy"]] = "copy"
    seq: int
    t: float
    op: int
    ctx: ContextId
    key: BlockKey
    depth: int
    from_tier: TierName
    tier: TierName
    reason: str
    result: str


@attrs.frozen(slots=True)
class LoadObs:
    """A block of the prompt written from a copy in ``from_tier`` instead of recomputed
    (spec/movement.md MV4): ``block`` is its new slot, in ``tier``."""

    kind: ClassVar[Literal["load"]] = "load"
    seq: int
    t: float
    op: int
    ctx: ContextId
    block: BlockId
    key: BlockKey
    depth: int
    from_tier: TierName
    tier: TierName


@attrs.frozen(slots=True)
class DropCopyObs:
    """A copy left its tier (spec/movement.md MV2): ``room``, ``load`` or ``reclaim``."""

    kind: ClassVar[Literal["drop-copy"]] = "drop-copy"
    seq: int
    t: float
    op: int
    key: BlockKey
    tier: TierName
    reason: str


Observation: TypeAlias = (
    InferObs
    | HitObs
    | AllocObs
    | EvictObs
    | FreeObs
    | BypassObs
    | RejectObs
    | CopyObs
    | LoadObs
    | DropCopyObs
)


def _jsonable(v: object) -> Any:
    if isinstance(v, BlockClass):
        return v.value
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


#: field types whose values are written as they are (ints, strings and the ids over them); any
#: other field goes through :func:`_jsonable`
_PLAIN_TYPES = frozenset(
    {"int", "bool", "str", "ContextId", "BlockId", "BlockKey", "BlockKey | None", "TierName"}
)


_Layout: TypeAlias = tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], tuple[int, ...]]
_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    """A record class's fields after ``seq, t, op``, in order: their names, one getter for all
    of them, and the positions of those converted (:func:`_jsonable`) rather than written as
    they are. Computed once a class."""
    got = _LAYOUTS.get(cls)
    if got is not None:
        return got
    rest = [a for a in attrs.fields(cls) if a.name not in ("seq", "t", "op")]
    names = tuple(a.name for a in rest)
    get = operator.attrgetter(*names) if len(names) > 1 else lambda o: (getattr(o, names[0]),)
    convert = tuple(i for i, a in enumerate(rest) if a.type not in _PLAIN_TYPES)
    got = _LAYOUTS[cls] = (names, get, convert)
    return got


def observation_to_json(o: Observation) -> dict[str, Any]:
    """``{seq, t, op, kind, ...fields}`` in a fixed key order."""
    names, get, convert = _layout(type(o))
    d: dict[str, Any] = {"seq": o.seq, "t": _jsonable(o.t), "op": o.op, "kind": o.kind}
    values: tuple[Any, ...] | list[Any] = get(o)
    if convert:
        values = list(values)
        for i in convert:
            values[i] = _jsonable(values[i])
    d.update(zip(names, values, strict=True))
    return d


#: ``json.dumps(d, separators=(",", ":"))``, the encoder made once (dumps makes one a call)
_ENCODE = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def observation_line(o: Observation) -> str:
    """A record as a line of a JSONL log (T4), its newline included."""
    return _ENCODE(observation_to_json(o)) + "\n"


class ObservationLog:
    """Append-only list of observations with a dense ``seq``. :meth:`forget` lets a reader
    that has read every record so far drop them (a judge of a long log holds one op's records,
    not the run's); ``seq``, ``len`` and :meth:`since` still count from the run's first."""

    def __init__(self) -> None:
        self.records: list[Observation] = []
        #: records forgotten: ``records[0]`` has this seq
        self._base = 0

    @property
    def next_seq(self) -> int:
        return self._base + len(self.records)

    def add(self, record: Observation) -> None:
        self.records.append(record)

    def forget(self) -> None:
        """Drop every record kept so far (their seqs are not given again)."""
        self._base += len(self.records)
        self.records = []

    def __len__(self) -> int:
        return self._base + len(self.records)

    def __iter__(self) -> Iterator[Observation]:
        """The records kept (every record, unless some were forgotten)."""
        return iter(self.records)

    def since(self, seq: int) -> list[Observation]:
        if seq < self._base:
            raise InternalError(f"records from seq {seq} were forgotten (kept from {self._base})")
        return self.records[seq - self._base :]

    def to_jsonl(self) -> str:
        return "".join(observation_line(o) for o in self.records)
