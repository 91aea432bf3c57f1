"""Forks share their source's sequence (kvmodel/contexts.py, spec P5 "cost"): every context must
read exactly what copying the sequence at each fork gives, whichever views share a log, append
at its end, copy, or are read in between.

The oracle below is the copying semantics written plainly: a list of ``(message, uid)`` per
context, a uid counter per context that a fork inherits, and the uids a context knows.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmodel.contexts import Context
from kvmodel.errors import TraceError
from kvmodel.ids import ContextId, MessageId, SessionId
from kvmodel.lifecycle import MsgState
from kvmodel.messages import AgentKind, Message, MessageKind, Role


@attrs.define
class _Ref:
    entries: list[tuple[Message, int]]
    known: dict[int, Message]
    next_uid: int


def _msg(i: int, tokens: int, reasoning: bool = False) -> Message:
    kind = MessageKind.REASONING if reasoning else MessageKind.USER
    return Message(MessageId(f"m{i}"), Role.ASSISTANT if reasoning else Role.USER, kind, tokens)


def _new(i: int) -> Context:
    return Context(ContextId(f"c{i}"), SessionId("s"), AgentKind.MAIN, block_size=4, t=0.0)


def _check(c: Context, r: _Ref) -> None:
    assert c.entries == r.entries
    assert len(c) == len(r.entries)
    starts, pos = [], 0
    for m, _ in r.entries:
        starts.append(pos)
        pos += m.tokens
    assert c.starts == starts
    assert c.total_tokens == pos
    assert c.live_ids == {m.id: uid for m, uid in r.entries}
    assert c.messages_by_uid == r.known
    assert set(c.states()) == set(r.known)
    assert all(c.state(u) is not None for u in r.known)
    assert c.state(r.next_uid) is None


_OP = st.tuples(
    st.sampled_from(
        ["append", "dup", "fork", "replace", "remove", "strip", "pin", "temp", "close"]
    ),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(1, 9),
)


@settings(max_examples=400)  # (cheap: ~1 ms an example)
@given(program=st.lists(_OP, max_size=60), reads=st.lists(st.integers(0, 50), max_size=60))
def test_shared_sequences_read_as_copies(
    program: list[tuple[str, int, int, int]], reads: list[int]
) -> None:
    ctxs = [_new(0)]
    refs = [_Ref([], {}, 0)]
    serial = 0
    for step, (what, a, b, tokens) in enumerate(program):
        open_ = [i for i, c in enumerate(ctxs) if c.is_open]
        if not open_:
            break
        i = open_[a % len(open_)]
        c, r = ctxs[i], refs[i]
        n = len(r.entries)
        if what in ("append", "temp"):
            k = 1 + b % 3
            ms = [_msg(serial + j, tokens, reasoning=(b + j) % 2 == 0) for j in range(k)]
            serial += k
            c.admit(ms, temporary=what == "temp")
            for m in ms:
                r.entries.append((m, r.next_uid))
                r.known[r.next_uid] = m
                r.next_uid += 1
            if what == "temp":  # (the inference that follows drops them, spec P8)
                c.drop_temporaries()
                r.entries = [(m, u) for m, u in r.entries if all(m is not x for x in ms)]
        elif what == "dup":  # an id from any context, live here or not
            others = [m for rr in refs for m, _ in rr.entries]
            if not others:
                continue
            m = others[b % len(others)]
            live_here = any(x.id == m.id for x, _ in r.entries)
            if live_here:
                with pytest.raises(TraceError):
                    c.admit([m], temporary=False)
            else:
                c.admit([m], temporary=False)
                r.entries.append((m, r.next_uid))
                r.known[r.next_uid] = m
                r.next_uid += 1
        elif what == "fork":
            upto = b % (n + 1)
            ctxs.append(c.fork(ContextId(f"c{len(ctxs)}"), upto, 0.0))
            shared = r.entries[:upto]
            refs.append(_Ref(list(shared), {u: m for m, u in shared}, r.next_uid))
        elif what == "replace" and n:
            m = _msg(serial, tokens)
            serial += 1
            c.replace(b % n, m)
            r.entries[b % n] = (m, r.next_uid)
            r.known[r.next_uid] = m
            r.next_uid += 1
        elif what == "remove" and n:
            lo = b % n
            count = 1 + tokens % (n - lo)
            c.remove(lo, count)
            del r.entries[lo : lo + count]
        elif what == "strip":
            c.end_turn()
            r.entries = [(m, u) for m, u in r.entries if m.kind is not MessageKind.REASONING]
        elif what == "pin" and n:
            c.pin(b % n, n, None)
        elif what == "close":
            c.close(1.0)
            r.entries = []
        if step < len(reads):  # read one context now: a read may copy a view (or not)
            j = reads[step] % len(ctxs)
            _check(ctxs[j], refs[j])
    for c, r in zip(ctxs, refs, strict=True):
        _check(c, r)


def test_a_chain_of_forks_shares_one_sequence() -> None:
    """Each context forked from the last and given a message: one log holds every message, each
    once (O(1) per fork, O(depth) memory), and each context still reads its own prefix."""
    ctxs = [_new(0)]
    ctxs[0].admit([_msg(0, 3)], temporary=False)
    for i in range(1, 500):
        child = ctxs[-1].fork(ContextId(f"c{i}"), len(ctxs[-1]), 0.0)
        child.admit([_msg(i, 3)], temporary=False)
        ctxs.append(child)
    logs = {id(c._log) for c in ctxs}
    assert len(logs) == 1
    assert ctxs[0]._log is not None
    assert len(ctxs[0]._log.entries) == 500
    assert [m.id for m, _ in ctxs[7].entries] == [f"m{i}" for i in range(8)]  # (a copy, now)
    assert ctxs[7]._log is None
    assert ctxs[8]._log is ctxs[0]._log
    assert ctxs[-1].entries is ctxs[0]._log.entries  # the last view is the whole log


def test_an_edit_of_a_shared_sequence_is_refused_loudly() -> None:
    """A change that bypasses the copy (an engine mutant's own edit) must not corrupt the views
    of other contexts silently: the offsets' recomputation refuses it."""
    from kvmodel.errors import InternalError

    a = _new(0)
    a.admit([_msg(0, 3), _msg(1, 3)], temporary=False)
    b = a.fork(ContextId("b"), 2, 0.0)
    assert b._log is a._log
    with pytest.raises(InternalError, match="shared sequence"):
        b._restart(0)


def test_a_forked_view_keeps_pins_and_states_its_own() -> None:
    """States are per context (spec L6): pinning in the child leaves the source's states, and a
    pin's state reads come from the shared view without copying it."""
    a = _new(0)
    a.admit([_msg(0, 3), _msg(1, 3)], temporary=False)
    b = a.fork(ContextId("b"), 2, 0.0)
    b.pin(0, 1, None)
    uid0 = b.entries[0][1]
    assert b.state(uid0) is MsgState.PINNED
    assert a.state(uid0) is not MsgState.PINNED
    assert b._log is a._log  # (both views are the whole log: nothing was copied)


def test_a_fork_below_the_first_reasoning_strips_its_own() -> None:
    """The source's cached first-reasoning index is inherited only where it lies in the shared
    messages: a fork cut below it and given reasoning strips that reasoning at its turn end."""
    a = _new(0)
    a.admit([_msg(0, 3), _msg(1, 3), _msg(2, 3, reasoning=True)], temporary=False)
    assert a.first_reasoning_index() == 2
    b = a.fork(ContextId("b"), 1, 0.0)
    b.admit([_msg(3, 3, reasoning=True), _msg(4, 3)], temporary=False)
    assert b.end_turn() == 1
    assert [m.id for m, _ in b.entries] == ["m0", "m4"]
    assert a.end_turn() == 1
    assert [m.id for m, _ in a.entries] == ["m0", "m1"]
