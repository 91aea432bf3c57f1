"""Outside mutants that are engines: the model's engine with one step of an op done otherwise
(each with a KVTether twin that runs on it; the package docstring tells each one's story)."""

from __future__ import annotations

import heapq
import math
from typing import Any, ClassVar

from kvmodel.engine import Engine
from kvmodel.errors import TraceError
from kvmodel.ids import TierName
from kvmodel.io.trace import Fork, Infer, Op, Pin
from kvmodel.lifecycle import MsgState
from kvmodel.memory import Memory
from policies.kvtether import KVTether

__all__ = [
    "CountsFreeOnly",
    "CountsFreeOnlyTether",
    "EvictsBeforeSpilling",
    "EvictsBeforeSpillingTether",
    "ForkCopiesPins",
    "ForkCopiesPinsTether",
    "ForkKeepsInvalidTail",
    "ForkKeepsInvalidTailTether",
    "LastPinWins",
    "LastPinWinsTether",
    "OptimisticAdmission",
    "OptimisticAdmissionTether",
    "PinEndsLate",
    "PinEndsLateTether",
    "RefusesEmptyPin",
    "RefusesEmptyPinTether",
    "SpillsToLastTier",
    "SpillsToLastTierTether",
    "SuspendAtStart",
    "SuspendAtStartTether",
]


class PinEndsLate(Engine):
    """A TTL pin ends after its deadline, not at it: still pinned at the op at the deadline."""

    def _expire_pins(self, t: float) -> None:
        super()._expire_pins(math.nextafter(t, -math.inf))  # deadline < t, not <= t


class ForkKeepsInvalidTail(Engine):
    """A fork keeps the source's whole chain inside the shared messages, valid or not."""

    def _fork(self, op: Fork) -> None:
        src = self.contexts.get(op.src)
        if src is None:
            super()._fork(op)
            return
        valid, src.valid = src.valid, len(src.materialized)
        try:
            super()._fork(op)
        finally:
            src.valid = valid


class SuspendAtStart(Engine):
    """A context is suspended from its inference's start, not its end."""

    def apply(self, op: Op) -> None:
        super().apply(op)
        if isinstance(op, Infer) and op.ctx in self.contexts:
            c = self.contexts[op.ctx]
            if c.is_open and c.suspended_at is not None:
                c.suspended_at = op.t
                self._bump(c)


class ForkCopiesPins(Engine):
    """A fork's copies of pinned messages are pinned too, until the source's deadlines."""

    def _fork(self, op: Fork) -> None:
        super()._fork(op)
        src, child = self.contexts[op.src], self.contexts[op.ctx]
        for i, (_m, uid) in enumerate(child.entries):
            if src.stored.get(uid) is MsgState.PINNED:
                deadline = src.pin_deadline.get(uid)
                ttl = None if deadline is None else deadline - op.t
                self._pin(Pin(op.t, child.id, i, i + 1, ttl))


class RefusesEmptyPin(Engine):
    """A pin over an empty range is refused as bad input."""

    def _pin(self, op: Pin) -> None:
        c = self.contexts.get(op.ctx)
        if c is not None:
            start = 0 if op.start is None else op.start
            stop = len(c) if op.stop is None else op.stop
            if start >= stop:
                raise TraceError(f"pin range [{start}, {stop}) covers no message", field="stop")
        super()._pin(op)


class LastPinWins(Engine):
    """A pin over a message already pinned sets its deadline anew: the last pin wins."""

    def _pin(self, op: Pin) -> None:
        c = self.context(op.ctx)
        before = set(c.pin_deadline)
        super()._pin(op)
        lo = 0 if op.start is None else op.start
        hi = len(c) if op.stop is None else op.stop
        for _m, uid in c.entries[lo:hi]:
            if uid in before and uid in c.pin_deadline:
                c.pin_deadline[uid] = op.deadline
                if op.deadline is not None:
                    heapq.heappush(self._pins, (op.deadline, self._pin_seq, c.id, uid))
                    self._pin_seq += 1


class _Counted:
    """The engine's victim source with another count of evictable blocks for the admission
    pre-check (M4.4); every other question goes to the source itself."""

    def __init__(self, source: Any, count: int | None) -> None:
        self._source = source
        self._count = count

    def evictable(self) -> int:
        n: int = self._source.evictable()
        return n if self._count is None else self._count

    def __getattr__(self, name: str) -> Any:
        source = self.__dict__.get("_source")  # (absent while a copy is being built)
        if source is None:
            raise AttributeError(name)
        return getattr(source, name)


class CountsFreeOnly(Engine):
    """Admission counts the free slots only: a full cache rejects instead of evicting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.victims = _Counted(self.victims, 0)  # type: ignore[assignment]


class OptimisticAdmission(Engine):
    """No admission pre-check: blocks are written (evicting as needed) until one finds no slot,
    and then the request is rolled back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.victims = _Counted(self.victims, 1 << 40)  # type: ignore[assignment]


class _FastMemoryFirst(Memory):
    """Free slots of a tier but the first hidden while the engine has an evictable block."""

    victims: _Counted | None = None  # (set by the engine: its victim source)

    def free_count(self, tier: TierName) -> int:
        if tier != self.names[0] and self.victims is not None and self.victims.evictable():
            return 0
        return super().free_count(tier)


class EvictsBeforeSpilling(Engine):
    """While anything is evictable, a full first tier evicts instead of spilling."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memory.__class__ = _FastMemoryFirst  # its own free-slot lookup, same slots
        assert isinstance(self.memory, _FastMemoryFirst)
        self.memory.victims = _Counted(self.victims, None)


class _LastTierFirst(Memory):
    """Free slots of a tier past the first hidden while a later tier has one."""

    def free_count(self, tier: TierName) -> int:
        at = self.names.index(tier)
        if at and any(super(_LastTierFirst, self).free_count(t) for t in self.names[at + 1 :]):
            return 0
        return super().free_count(tier)


class SpillsToLastTier(Engine):
    """What the first preferred tier cannot take goes to the last tier with a free slot."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memory.__class__ = _LastTierFirst  # its own free-slot lookup, same slots


class PinEndsLateTether(KVTether):
    name: ClassVar[str] = "mutant-pin-ends-late"
    engine_class: ClassVar[type[Engine]] = PinEndsLate


class ForkKeepsInvalidTailTether(KVTether):
    name: ClassVar[str] = "mutant-fork-keeps-invalid-tail"
    engine_class: ClassVar[type[Engine]] = ForkKeepsInvalidTail


class SuspendAtStartTether(KVTether):
    name: ClassVar[str] = "mutant-suspend-at-start"
    engine_class: ClassVar[type[Engine]] = SuspendAtStart


class ForkCopiesPinsTether(KVTether):
    name: ClassVar[str] = "mutant-fork-copies-pins"
    engine_class: ClassVar[type[Engine]] = ForkCopiesPins


class RefusesEmptyPinTether(KVTether):
    name: ClassVar[str] = "mutant-refuses-empty-pin"
    engine_class: ClassVar[type[Engine]] = RefusesEmptyPin


class LastPinWinsTether(KVTether):
    name: ClassVar[str] = "mutant-last-pin-wins"
    engine_class: ClassVar[type[Engine]] = LastPinWins


class CountsFreeOnlyTether(KVTether):
    name: ClassVar[str] = "mutant-counts-free-only"
    engine_class: ClassVar[type[Engine]] = CountsFreeOnly


class OptimisticAdmissionTether(KVTether):
    name: ClassVar[str] = "mutant-optimistic-admission"
    engine_class: ClassVar[type[Engine]] = OptimisticAdmission


class EvictsBeforeSpillingTether(KVTether):
    name: ClassVar[str] = "mutant-evicts-before-spilling"
    engine_class: ClassVar[type[Engine]] = EvictsBeforeSpilling


class SpillsToLastTierTether(KVTether):
    name: ClassVar[str] = "mutant-spills-to-last-tier"
    engine_class: ClassVar[type[Engine]] = SpillsToLastTier
