"""The lifecycle state machine as data (spec §lifecycle L1-L6).

Message states live per (context, message). The transition table :data:`TRANSITIONS` is the
whole machine: an event on a state with no row is illegal and raises
:class:`IllegalTransitionError`. Nothing here depends on the order of enum values (STYLE §3);
priorities used to aggregate block states are written out as explicit tables too.

::

     (new) --ADMIT--> Active --INFER_END--> Suspended --RUN/INFER_START--> Active
     (new) --ADMIT_TEMPORARY--> Temporary --INFER_END--> Expired
     Active/Suspended --PIN--> Pinned --UNPIN_RUNNABLE--> Active | --UNPIN_WAITING--> Suspended
     any live state --INVALIDATE/CLOSE--> Expired            (Expired is absorbing: no rows)
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from kvmodel.errors import IllegalTransitionError

__all__ = [
    "BLOCK_CLASS_PRIORITY",
    "LIVE_STATES",
    "TRANSITIONS",
    "BlockClass",
    "Event",
    "MsgState",
    "aggregate_across_contexts",
    "aggregate_within_context",
    "transition",
]


class MsgState(enum.Enum):
    """Lifecycle state of one message in one context (spec L1)."""

    # members are singletons compared by identity: hash them by identity too (the C slot), not
    # by Enum's Python-level hash of the name -- sets and tables of them are on the hot path
    __hash__ = object.__hash__

    PINNED = "pinned"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    TEMPORARY = "temporary"
    EXPIRED = "expired"


class Event(enum.Enum):
    """Lifecycle events (spec L2). Each names the trace op(s) that raise it."""

    # members are singletons compared by identity: hash them by identity too (the C slot), not
    # by Enum's Python-level hash of the name -- sets and tables of them are on the hot path
    __hash__ = object.__hash__

    ADMIT = "admit"  # append / replace / return / infer output: a new live message
    ADMIT_TEMPORARY = (
        "admit_temporary"  # append temporary=true, or any append to a one-shot context
    )
    RUN = "run"  # the context received input (append, replace, return into it, fork creation)
    INFER_START = "infer_start"  # the context's inference begins
    INFER_END = "infer_end"  # decode began; the context now waits (tool, scheduler, sub-agent)
    PIN = "pin"
    UNPIN_RUNNABLE = "unpin_runnable"  # unpin or TTL expiry while the context is runnable
    UNPIN_WAITING = "unpin_waiting"  # unpin or TTL expiry while the context waits
    INVALIDATE = "invalidate"  # remove, replace (the old message), turn_end (reasoning)
    CLOSE = "close"  # close, return (the returning context), end_session, one-shot completion


_S = MsgState
_E = Event

#: (state before, event) -> state after. ``None`` as the state means "not yet in the context".
#: Rows that leave the state unchanged are listed on purpose: they are legal no-ops.
TRANSITIONS: Mapping[tuple[MsgState | None, Event], MsgState] = MappingProxyType(
    {
        (None, _E.ADMIT): _S.ACTIVE,
        (None, _E.ADMIT_TEMPORARY): _S.TEMPORARY,
        # the context becomes runnable
        (_S.ACTIVE, _E.RUN): _S.ACTIVE,
        (_S.SUSPENDED, _E.RUN): _S.ACTIVE,
        (_S.PINNED, _E.RUN): _S.PINNED,
        (_S.TEMPORARY, _E.RUN): _S.TEMPORARY,
        # inference
        (_S.ACTIVE, _E.INFER_START): _S.ACTIVE,
        (_S.SUSPENDED, _E.INFER_START): _S.ACTIVE,
        (_S.PINNED, _E.INFER_START): _S.PINNED,
        (_S.TEMPORARY, _E.INFER_START): _S.TEMPORARY,
        (_S.ACTIVE, _E.INFER_END): _S.SUSPENDED,
        (_S.PINNED, _E.INFER_END): _S.PINNED,
        (_S.TEMPORARY, _E.INFER_END): _S.EXPIRED,
        # protection; a pin cannot stretch a lifetime declared for one inference (spec L3.4)
        (_S.ACTIVE, _E.PIN): _S.PINNED,
        (_S.SUSPENDED, _E.PIN): _S.PINNED,
        (_S.PINNED, _E.PIN): _S.PINNED,
        (_S.TEMPORARY, _E.PIN): _S.TEMPORARY,
        (_S.PINNED, _E.UNPIN_RUNNABLE): _S.ACTIVE,
        (_S.PINNED, _E.UNPIN_WAITING): _S.SUSPENDED,
        (_S.ACTIVE, _E.UNPIN_RUNNABLE): _S.ACTIVE,
        (_S.SUSPENDED, _E.UNPIN_WAITING): _S.SUSPENDED,
        (_S.TEMPORARY, _E.UNPIN_RUNNABLE): _S.TEMPORARY,
        (_S.TEMPORARY, _E.UNPIN_WAITING): _S.TEMPORARY,
        # end of life
        (_S.ACTIVE, _E.INVALIDATE): _S.EXPIRED,
        (_S.SUSPENDED, _E.INVALIDATE): _S.EXPIRED,
        (_S.PINNED, _E.INVALIDATE): _S.EXPIRED,
        (_S.TEMPORARY, _E.INVALIDATE): _S.EXPIRED,
        (_S.ACTIVE, _E.CLOSE): _S.EXPIRED,
        (_S.SUSPENDED, _E.CLOSE): _S.EXPIRED,
        (_S.PINNED, _E.CLOSE): _S.EXPIRED,
        (_S.TEMPORARY, _E.CLOSE): _S.EXPIRED,
    }
)

LIVE_STATES = frozenset({MsgState.PINNED, MsgState.ACTIVE, MsgState.SUSPENDED})


def transition(state: MsgState | None, event: Event, *, message: str, context: str) -> MsgState:
    """Apply one event (spec L3); raise :class:`IllegalTransitionError` if the table has no row."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransitionError(
            state.value if state is not None else "absent", event.value, message, context
        ) from None


class BlockClass(enum.Enum):
    """Lifecycle class of a resident block, aggregated over messages and contexts (spec L5)."""

    # members are singletons compared by identity: hash them by identity too (the C slot), not
    # by Enum's Python-level hash of the name -- sets and tables of them are on the hot path
    __hash__ = object.__hash__

    DEAD = "dead"  # on no open context's materialized chain
    EXPIRED = "expired"  # held only by contexts in which it is invalidated
    TEMPORARY = "temporary"  # held only for a temporary message's single inference
    SUSPENDED = "suspended"
    ACTIVE = "active"
    PINNED = "pinned"


#: Priority used to aggregate (higher wins). Written out, not derived from enum order.
BLOCK_CLASS_PRIORITY: Mapping[BlockClass, int] = MappingProxyType(
    {
        BlockClass.DEAD: 0,
        BlockClass.EXPIRED: 1,
        BlockClass.TEMPORARY: 2,
        BlockClass.SUSPENDED: 3,
        BlockClass.ACTIVE: 4,
        BlockClass.PINNED: 5,
    }
)

_LIVE_CLASS: Mapping[MsgState, BlockClass] = MappingProxyType(
    {
        MsgState.PINNED: BlockClass.PINNED,
        MsgState.ACTIVE: BlockClass.ACTIVE,
        MsgState.SUSPENDED: BlockClass.SUSPENDED,
    }
)


def aggregate_within_context(states: Iterable[MsgState]) -> BlockClass:
    """A block's class in one context from the states of the messages it covers (spec L5.1).

    Expired if any covered message is Expired, else Temporary if any is Temporary, else the highest
    of Pinned > Active > Suspended.
    """
    best = BlockClass.DEAD
    temporary = False
    for s in states:
        if s is MsgState.EXPIRED:
            return BlockClass.EXPIRED
        if s is MsgState.TEMPORARY:
            temporary = True
            continue
        c = _LIVE_CLASS[s]
        if BLOCK_CLASS_PRIORITY[c] > BLOCK_CLASS_PRIORITY[best]:
            best = c
    if temporary:
        return BlockClass.TEMPORARY
    if best is BlockClass.DEAD:
        raise ValueError("a block covers at least one message")
    return best


def aggregate_across_contexts(classes: Iterable[BlockClass]) -> BlockClass:
    """A block's class over all holding contexts (spec L5.2): the highest; Dead if none holds it."""
    best = BlockClass.DEAD
    for c in classes:
        if BLOCK_CLASS_PRIORITY[c] > BLOCK_CLASS_PRIORITY[best]:
            best = c
    return best
