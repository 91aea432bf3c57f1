"""Engine mutants: the reference engine with one bug planted, the way a port or a refactor errs.

The policy mutants (:mod:`checkers.search.mutants`) test the invariants; these test the checks of
the *engine* itself (spec/invariants.md §Self-checks of the engine). Each is an :class:`Engine`
subclass that runs any policy, and is listed in :data:`ENGINE_MUTANTS` with the self-check that
must catch it. ``<Name>Tether`` is KVTether on it, the form in which ``kvmodel check`` and the
zoo's tests meet it (``kvmodel check checkers.search.engine_mutants:EagerEditsTether``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

from kvmodel._engine_view import EngineView, Features
from kvmodel._resident import ResidentBlock
from kvmodel.contexts import Context
from kvmodel.engine import Engine
from kvmodel.io.observations import FreeReason
from kvmodel.io.trace import Fork, Op, Pin, Remove, Replace, Return, TurnEnd, Unpin
from kvmodel.lifecycle import BlockClass, Event, MsgState
from kvmodel.messages import MessageKind
from policies.kvtether import KVTether

__all__ = [
    "ENGINE_MUTANTS",
    "EagerEdits",
    "EagerEditsTether",
    "ForkWithoutPrefix",
    "ForkWithoutPrefixTether",
    "IndexesPartial",
    "IndexesPartialTether",
    "LatestSuspension",
    "LatestSuspensionTether",
    "ReturnWithoutRun",
    "ReturnWithoutRunTether",
    "StaleFeaturesAfterPin",
    "StaleFeaturesAfterPinTether",
    "StripsLastReasoning",
    "StripsLastReasoningTether",
]


class EagerEdits(Engine):
    """Applies an edit's invalidation to the chain at the edit, not at the next inference (P3):
    the invalid tail is dropped (and, once unheld, Dead) before the harness even infers."""

    def apply(self, op: Op) -> None:
        super().apply(op)
        if isinstance(op, Replace | Remove | TurnEnd) and op.ctx in self.contexts:
            c = self.contexts[op.ctx]
            self.residency.detach_from(c, c.valid)


class ForkWithoutPrefix(Engine):
    """A fork starts with an empty chain: its first inference looks the shared prefix up (or
    writes it again) instead of holding it from its creation (P5)."""

    def apply(self, op: Op) -> None:
        super().apply(op)
        if isinstance(op, Fork):
            c = self.contexts[op.ctx]
            self.residency.detach_from(c, 0)
            c.valid = 0


class IndexesPartial(Engine):
    """Keeps the partial tail block of an inference resident instead of freeing it (B4): the
    slot is never given back, and the block lingers as reusable-looking KV."""

    def free(self, b: ResidentBlock, reason: str) -> None:
        if reason == FreeReason.PARTIAL:
            return
        super().free(b, reason)


class _LatestView(EngineView):
    def features(self, b: ResidentBlock) -> Features:
        f = super().features(b)
        waits = [
            c.suspended_at
            for h in b.holders
            if (c := self._e.contexts[h]).block_class(b.depth) is BlockClass.SUSPENDED
            and c.suspended_at is not None
        ]
        return f if not waits else f._replace(suspend_time=max(waits))


class LatestSuspension(Engine):
    """A block's ``suspend_time`` is the *latest* suspension among its waiting holders, not the
    earliest (PP3): shared KV looks more recently suspended than it is."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.use_view(_LatestView(self))


class ReturnWithoutRun(Engine):
    """A ``return`` appends the result to its parent without the ``run`` event (L2): a waiting
    parent stays Suspended although it now has input to run on."""

    def _return(self, op: Return) -> None:
        into = self.context(op.into, "into")
        waiting = into.phase is MsgState.SUSPENDED
        super()._return(op)
        if waiting:
            into.phase = MsgState.SUSPENDED


class StripsLastReasoning(Engine):
    """``turn_end`` strips only the last reasoning message, not every one (P9)."""

    def apply(self, op: Op) -> None:
        if not isinstance(op, TurnEnd) or op.ctx not in self.contexts:
            super().apply(op)
            return
        saved = Context.strip_reasoning
        Context.strip_reasoning = _strip_last  # type: ignore[method-assign]
        try:
            super().apply(op)
        finally:
            Context.strip_reasoning = saved  # type: ignore[method-assign]


def _strip_last(self: Context) -> int:
    last = max(
        (i for i, (m, _) in enumerate(self.entries) if m.kind is MessageKind.REASONING),
        default=None,
    )
    if last is None:
        return 0
    self._own()  # (the edit needs the context's own copy of a sequence a fork may share)
    self._expire(self.entries[last][1], Event.INVALIDATE)
    self._invalidate_from(last)
    del self.entries[last]
    self._restart(last)
    return 1


class StaleFeaturesAfterPin(Engine):
    """Forgets to mark a context changed on ``pin``/``unpin``: the feature cache keeps serving
    the blocks' pre-pin class to the policy and to every reader of the view. The rank index
    keys blocks from their features, not the cached snapshot (since 7f30835), so the eviction
    order stays right and ``kvmodel prove``'s exhaustive search finds no invariant broken within
    its depth (every rung ``unknown``, expected_proofs.toml); the contract model's comparison of
    the view catches it (engine-contract)."""

    _quiet = False

    def apply(self, op: Op) -> None:
        self._quiet = isinstance(op, Pin | Unpin)
        try:
            super().apply(op)
        finally:
            self._quiet = False

    def _bump(self, x: ResidentBlock | Context) -> None:
        if self._quiet and isinstance(x, Context):
            return
        super()._bump(x)


# -- KVTether on each engine: how `kvmodel check` meets them (through engine_class)


class EagerEditsTether(KVTether):
    """KVTether on :class:`EagerEdits`."""

    name: ClassVar[str] = "engine-mutant-eager-edits"
    engine_class: ClassVar[type[Engine]] = EagerEdits


class ForkWithoutPrefixTether(KVTether):
    """KVTether on :class:`ForkWithoutPrefix`."""

    name: ClassVar[str] = "engine-mutant-fork-without-prefix"
    engine_class: ClassVar[type[Engine]] = ForkWithoutPrefix


class IndexesPartialTether(KVTether):
    """KVTether on :class:`IndexesPartial`."""

    name: ClassVar[str] = "engine-mutant-indexes-partial"
    engine_class: ClassVar[type[Engine]] = IndexesPartial


class LatestSuspensionTether(KVTether):
    """KVTether on :class:`LatestSuspension`."""

    name: ClassVar[str] = "engine-mutant-latest-suspension"
    engine_class: ClassVar[type[Engine]] = LatestSuspension


class ReturnWithoutRunTether(KVTether):
    """KVTether on :class:`ReturnWithoutRun`."""

    name: ClassVar[str] = "engine-mutant-return-without-run"
    engine_class: ClassVar[type[Engine]] = ReturnWithoutRun


class StripsLastReasoningTether(KVTether):
    """KVTether on :class:`StripsLastReasoning`."""

    name: ClassVar[str] = "engine-mutant-strips-last-reasoning"
    engine_class: ClassVar[type[Engine]] = StripsLastReasoning


class StaleFeaturesAfterPinTether(KVTether):
    """KVTether on :class:`StaleFeaturesAfterPin`."""

    name: ClassVar[str] = "engine-mutant-stale-features-after-pin"
    engine_class: ClassVar[type[Engine]] = StaleFeaturesAfterPin


#: mutant (a policy on a broken engine) -> the finding that must catch it; merged into
#: :data:`checkers.search.mutants.MUTANTS`, the one manifest of the zoo
ENGINE_MUTANTS: Mapping[str, str] = MappingProxyType(
    {
        "checkers.search.engine_mutants:EagerEditsTether": "engine-contract",
        "checkers.search.engine_mutants:ForkWithoutPrefixTether": "engine-contract",
        "checkers.search.engine_mutants:IndexesPartialTether": "engine-contract",
        "checkers.search.engine_mutants:LatestSuspensionTether": "engine-contract",
        "checkers.search.engine_mutants:ReturnWithoutRunTether": "engine-contract",
        "checkers.search.engine_mutants:StripsLastReasoningTether": "engine-contract",
        "checkers.search.engine_mutants:StaleFeaturesAfterPinTether": "engine-contract",
    }
)
