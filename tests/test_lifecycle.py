"""The lifecycle table (spec L3) and block-class aggregation (spec L5)."""

from __future__ import annotations

import pytest

from kvmodel.errors import IllegalTransitionError, TraceError
from kvmodel.lifecycle import (
    TRANSITIONS,
    BlockClass,
    Event,
    MsgState,
    aggregate_across_contexts,
    aggregate_within_context,
    transition,
)

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
