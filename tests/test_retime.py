"""Untimed sessions put on the generator's clock (kvmodel/workloads/retime.py; spec/metrics.md
E9, "untimed families"): the ops and their order kept, each wait drawn by what it is on, timed
sessions untouched, the assumption in the header."""

from __future__ import annotations

import attrs

from kvmodel.ids import ContextId, MessageId, SessionId
from kvmodel.io.trace import Append, EndSession, Infer, Op, Open, Trace, TraceHeader, TurnEnd
from kvmodel.messages import AgentKind, Message, MessageKind, Role
from kvmodel.workloads import AgenticParams
from kvmodel.workloads.retime import with_waits_of
from kvmodel.workloads.stats import workload_stats


def _m(i: str, kind: MessageKind = MessageKind.OBSERVATION, role: Role = Role.TOOL) -> Message:
    return Message(MessageId(i), role, kind, 100)


def _session(s: str, t0: float) -> list[Op]:
    c = ContextId(f"{s}.c")
    out = (_m(f"{s}.o", MessageKind.OUTPUT, Role.ASSISTANT),)
    user = _m(f"{s}.u2", MessageKind.USER, Role.USER)
    return [
        Open(t0, c, SessionId(s), AgentKind.MAIN),
        Append(t0 + 1, c, (_m(f"{s}.u", MessageKind.USER, Role.USER),)),
        Infer(t0 + 2, c, out, 0.5),
        Append(t0 + 3, c, (_m(f"{s}.tool"),)),  # a wait on a tool
        Infer(t0 + 4, c, (_m(f"{s}.o2", MessageKind.OUTPUT, Role.ASSISTANT),)),
        TurnEnd(t0 + 5, c),  # (bookkeeping: the context still waits)
        Append(t0 + 6, c, (user,)),  # a wait on the user
        Infer(t0 + 7, c, (_m(f"{s}.o3", MessageKind.OUTPUT, Role.ASSISTANT),)),
        EndSession(t0 + 8, SessionId(s)),
    ]


def _trace() -> Trace:
    ops = sorted([*_session("a", 0.0), *_session("b", 100.0)], key=lambda o: o.t)
    return Trace(TraceHeader(1, {"untimed_sessions": ["a"]}), tuple(ops))


def _of_a(op: Op) -> bool:
    return getattr(op, "ctx", None) == "a.c" or getattr(op, "session", None) == "a"


def test_an_untimed_session_waits_as_the_generator_draws_and_nothing_else_moves() -> None:
    p = AgenticParams(tool_wait_median_s=5.0, tool_wait_sigma=0.0, user_delay_median_s=60.0)
    tr = _trace()
    got = with_waits_of(tr, p, seed=3)
    a = [op for op in got.ops if _of_a(op)]
    t = [op.t for op in a]
    # the open and first append at the session's start; no wait before the first inference
    assert t[:3] == [0.0, 0.0, 0.0]
    assert t[3] == 5.0  # the tool's result: the median, sigma 0
    assert t[4] == t[3]
    assert t[5] == t[4]
    assert t[6] > t[5]  # the user's message after a drawn think time
    assert t[6] == t[7] == t[8]
    assert all(op.duration == 0.0 for op in a if isinstance(op, Infer))
    # the ops themselves are the log's, in its order; the timed session is untouched
    assert [attrs.evolve(op, t=0.0) for op in a if not isinstance(op, Infer)] == [
        attrs.evolve(op, t=0.0) for op in tr.ops if not isinstance(op, Infer) and _of_a(op)
    ]
    b = [op for op in got.ops if op not in a]
    assert b == [op for op in tr.ops if op in b]
    assert [op.t for op in b] == [op.t for op in _session("b", 100.0)]
    meta = got.header.meta
    assert "untimed_sessions" not in meta
    assert meta["retimed"]["sessions"] == ["a"]
    assert meta["retimed"]["seed"] == 3
    st = workload_stats(got)
    assert st.wait_tool_p50_s is not None  # (measured now: the assumption is the header's)
    assert with_waits_of(tr, p, seed=3) == got  # seeded
    assert with_waits_of(tr, p, seed=4) != got


def test_a_timed_trace_is_returned_as_it_is() -> None:
    tr = Trace(TraceHeader(1, {}), _trace().ops)
    assert with_waits_of(tr, AgenticParams()) is tr
