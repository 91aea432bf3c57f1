"""The lifecycle table (spec L3) and block-class aggregation (spec L5)."""

from __future__ import annotations

from collections import Counter

import pytest

from checkers.invariants.replay import engine_for
from checkers.search.walk import walk_recipe
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import IllegalTransitionError, TraceError
from kvmodel.ids import BlockId, TierName
from kvmodel.io.observations import AllocObs
from kvmodel.io.trace import Op
from kvmodel.lifecycle import (
    TRANSITIONS,
    BlockClass,
    Event,
    MsgState,
    aggregate_across_contexts,
    aggregate_within_context,
    transition,
)
from kvmodel.policy import Placement, resolve_policy
from kvmodel.replay import replay
from kvmodel.view import NewBlock
from kvmodel.workloads.random_ops import random_trace
from policies.space import Candidate

S, E, C = MsgState, Event, BlockClass


def test_expired_is_absorbing() -> None:
    for e in Event:
        with pytest.raises(IllegalTransitionError):
            transition(S.EXPIRED, e, message="m", context="c")
    assert not any(s is S.EXPIRED for (s, _e) in TRANSITIONS)


def test_only_admission_applies_to_an_absent_message() -> None:
    assert {e for (s, e) in TRANSITIONS if s is None} == {E.ADMIT, E.ADMIT_TEMPORARY}


@pytest.mark.parametrize(
    ("state", "event", "after"),
    [
        (None, E.ADMIT, S.ACTIVE),
        (None, E.ADMIT_TEMPORARY, S.TEMPORARY),
        (S.ACTIVE, E.INFER_END, S.SUSPENDED),
        (S.SUSPENDED, E.RUN, S.ACTIVE),
        (S.SUSPENDED, E.INFER_START, S.ACTIVE),
        (S.TEMPORARY, E.INFER_END, S.EXPIRED),
        (S.SUSPENDED, E.PIN, S.PINNED),
        (S.PINNED, E.UNPIN_WAITING, S.SUSPENDED),
        (S.PINNED, E.UNPIN_RUNNABLE, S.ACTIVE),
        (S.PINNED, E.INFER_END, S.PINNED),
        (S.TEMPORARY, E.PIN, S.TEMPORARY),
        (S.PINNED, E.INVALIDATE, S.EXPIRED),
        (S.PINNED, E.CLOSE, S.EXPIRED),
        (S.TEMPORARY, E.CLOSE, S.EXPIRED),
    ],
)
def test_rows(state: MsgState | None, event: Event, after: MsgState) -> None:
    assert transition(state, event, message="m", context="c") is after


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (S.SUSPENDED, E.INFER_END),
        (S.SUSPENDED, E.UNPIN_RUNNABLE),
        (S.ACTIVE, E.UNPIN_WAITING),
        (None, E.RUN),
        (S.ACTIVE, E.ADMIT),
    ],
)
def test_illegal_pairs_raise_a_typed_error_naming_everything(
    state: MsgState | None, event: Event
) -> None:
    with pytest.raises(IllegalTransitionError) as ei:
        transition(state, event, message="msg-7", context="ctx-2")
    err = ei.value
    assert isinstance(err, TraceError)
    assert isinstance(err, ValueError)
    text = str(err)
    assert "msg-7" in text
    assert "ctx-2" in text
    assert event.value in text
    assert (state.value if state else "absent") in text


def test_within_context_aggregation() -> None:
    assert aggregate_within_context([S.SUSPENDED, S.ACTIVE]) is C.ACTIVE
    assert aggregate_within_context([S.PINNED, S.SUSPENDED]) is C.PINNED
    assert aggregate_within_context([S.PINNED, S.TEMPORARY]) is C.TEMPORARY
    assert aggregate_within_context([S.TEMPORARY, S.EXPIRED]) is C.EXPIRED


def test_across_context_aggregation() -> None:
    assert aggregate_across_contexts([]) is C.DEAD
    assert aggregate_across_contexts([C.TEMPORARY, C.SUSPENDED]) is C.SUSPENDED
    assert aggregate_across_contexts([C.EXPIRED, C.TEMPORARY]) is C.TEMPORARY
    assert aggregate_across_contexts([C.ACTIVE, C.PINNED, C.EXPIRED]) is C.PINNED


# ---------------------------------------------------------------- L5.4: no evictable Temporary

_WALKS = 40  # walks of the explorer's own recipe per policy (seed 0): every op kind, swarm engines


def _walks() -> list[tuple[EngineConfig, tuple[Op, ...]]]:
    out = []
    for i in range(_WALKS):
        cfg, params = walk_recipe(0, i)
        out.append((cfg, random_trace(params).ops))
    return out


class _CandidateClasses:
    """An engine probe: at every eviction, the class of every block the allocation could have
    evicted instead (resident, not in flight, spec M4.1), read from the engine's view."""

    def __init__(self) -> None:
        self.classes: Counter[BlockClass] = Counter()
        self.evictions = 0

    def before_evict(self, engine: Engine, victim: BlockId, tiers: tuple[TierName, ...]) -> None:
        self.evictions += 1
        for bid, b in engine.blocks.items():
            if b.tier in tiers and not engine.residency.in_flight(b):
                self.classes[engine.view.block(bid).state] += 1

    def after_place(
        self, engine: Engine, block: NewBlock, placement: Placement, slot: BlockId
    ) -> None:
        pass


@pytest.mark.parametrize(
    "policy",
    [
        "lru",
        "kvtether",
        "vllm-prefix",
        Candidate(bypass_temporary=False).path,
    ],  # the last: no bypass
)
def test_no_evictable_block_is_ever_temporary(policy: str) -> None:
    """L5.4 over random walks: no eviction has a Temporary candidate, and after every op no
    resident block is Temporary -- while the walks do evict among Dead, Expired, Suspended and
    Active blocks (the check is not vacuous), and do write Temporary KV."""
    probe = _CandidateClasses()
    temporary_writes = 0
    for cfg, ops in _walks():
        engine = engine_for(resolve_policy(policy), cfg)
        engine.probe = probe
        for op in ops:
            seen = len(engine.log)
            engine.apply(op)
            new = engine.log.since(seen)
            temporary_writes += sum(
                isinstance(r, AllocObs) and r.state is BlockClass.TEMPORARY for r in new
            )
            resident = {engine.view.block(b).state for b in engine.view.resident()}
            assert BlockClass.TEMPORARY not in resident, (policy, op)
    assert probe.classes[BlockClass.TEMPORARY] == 0
    assert probe.evictions > 200
    assert temporary_writes > 100
    live_or_discarded = (BlockClass.EXPIRED, BlockClass.SUSPENDED, BlockClass.ACTIVE)
    assert all(probe.classes[c] > 50 for c in live_or_discarded), probe.classes


@pytest.mark.parametrize(
    "same",
    [
        # KVTether's data (Temporary between Expired and Suspended) against Temporary moved
        # first and last: "scratch KV goes first" is KVTether, not a bug
        ((C.TEMPORARY, C.SUSPENDED, C.ACTIVE), (C.SUSPENDED, C.ACTIVE, C.TEMPORARY)),
        ((C.TEMPORARY, C.SUSPENDED, C.ACTIVE), (C.SUSPENDED, C.TEMPORARY, C.ACTIVE)),
        # and the discovered order (Active before Suspended) with Temporary moved
        ((C.ACTIVE, C.SUSPENDED, C.TEMPORARY), (C.TEMPORARY, C.ACTIVE, C.SUSPENDED)),
    ],
)
@pytest.mark.parametrize("bypass", [True, False])
def test_the_position_of_temporary_in_a_rank_is_unobservable(
    same: tuple[tuple[BlockClass, ...], tuple[BlockClass, ...]], bypass: bool
) -> None:
    """L5.4's consequence: two ranks that differ only in where Temporary goes replay every
    walk to the same observation log, record for record -- while a rank that differs in the
    order of Suspended and Active does not (the comparison can fail)."""
    a, b = (Candidate(live=o, bypass_temporary=bypass).path for o in same)
    swap = {C.SUSPENDED: C.ACTIVE, C.ACTIVE: C.SUSPENDED}
    other = Candidate(live=tuple(swap.get(c, c) for c in same[0]), bypass_temporary=bypass).path
    differs = 0
    for cfg, ops in _walks():
        log_a = list(replay(ops, a, cfg).engine.log)
        assert list(replay(ops, b, cfg).engine.log) == log_a
        differs += list(replay(ops, other, cfg).engine.log) != log_a
    assert differs > 0
