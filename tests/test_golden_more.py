"""More golden scenarios: TTL pins, returns, sessions, forks with pins/temporaries, orphans,
policy misuse and policy resolution (spec L3.5, L6, P4-P11, B6.3, PP1-PP2)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import ClassVar

import pytest
from scenario import config, log_of, msg, run, trace

from kvmodel import BasePolicy, Engine, Placement, PolicyError, PolicyNotFoundError, resolve_policy
from kvmodel.ids import BlockId, ContextId, TierName
from kvmodel.io.trace import Close, Op
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.view import BlockInfo, ModelView, NewBlock

OPEN_A = {"op": "open", "t": 0, "ctx": "a", "session": "s", "agent": "main"}


def states(e: Engine, ctx: str) -> list[tuple[str, str]]:
    return [(m.id, s.value) for m, s in e.contexts[ctx].message_states()]  # type: ignore[index]


def test_pin_with_ttl_expires_before_the_first_op_at_or_after_its_deadline() -> None:
    ops = [
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("P", 4), msg("Q", 4)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "pin", "t": 2, "ctx": "a", "start": 0, "stop": 1, "ttl": 3},
        {"op": "pin", "t": 2, "ctx": "a", "start": 0, "stop": 1, "ttl": 1},
    ]
    e = run("lru", config(), *ops).engine
    assert states(e, "a") == [("P", "pinned"), ("Q", "suspended")]
    assert e.view.block(BlockId(0)).state is BlockClass.PINNED
    e.apply(trace({"op": "append", "t": 4.99, "ctx": "a", "messages": [msg("R", 4)]}).ops[0])
    assert states(e, "a")[0] == ("P", "pinned")  # the longer TTL (t=5) wins
    e.apply(trace({"op": "append", "t": 5, "ctx": "a", "messages": [msg("S", 4)]}).ops[0])
    assert states(e, "a") == [("P", "active"), ("Q", "active"), ("R", "active"), ("S", "active")]


def test_pin_does_not_stretch_a_temporary_and_forks_do_not_inherit_pins() -> None:
    e = run(
        "lru",
        config(),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("P", 4)]},
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("T", 4)], "temporary": True},
        {"op": "pin", "t": 1, "ctx": "a"},
        {"op": "fork", "t": 2, "ctx": "b", "src": "a"},
    ).engine
    assert states(e, "a") == [("P", "pinned"), ("T", "temporary")]
    assert states(e, "b") == [("P", "active"), ("T", "temporary")]
    assert sorted(e.graph().edges(data="kind")) == [("a", "b", "fork")]


def test_return_appends_the_result_and_closes_the_worker() -> None:
    e = run(
        "kvtether",
        config(),
        {"op": "open", "t": 0, "ctx": "lead", "session": "s", "agent": "lead"},
        {"op": "append", "t": 0, "ctx": "lead", "messages": [msg("L", 4)]},
        {"op": "infer", "t": 1, "ctx": "lead", "output": [msg("call", 4, "tool_call")]},
        {
            "op": "open",
            "t": 1,
            "ctx": "w",
            "session": "s",
            "agent": "worker",
            "parent": "lead",
            "spawn": {"instruction": "look", "tools": ["grep"], "context_tokens": 4},
        },
        {"op": "append", "t": 1, "ctx": "w", "messages": [msg("W", 8)]},
        {"op": "infer", "t": 2, "ctx": "w", "output": [msg("wout", 4, "output")]},
        {"op": "return", "t": 3, "ctx": "w", "into": "lead", "result": msg("res", 4, "result")},
    ).engine
    assert not e.contexts[ContextId("w")].is_open
    assert states(e, "lead") == [("L", "active"), ("call", "active"), ("res", "active")]
    assert sorted(e.graph().edges(data="kind")) == [("lead", "w", "spawn"), ("w", "lead", "return")]
    # the worker's three blocks were dead at once and reclaimed at the boundary
    assert log_of(e, 6) == ["free 2 d0 reclaim", "free 3 d1 reclaim", "free 4 d2 reclaim"]
    assert e.view.context(ContextId("w")).closed_at == 3


def test_end_session_closes_everything_and_rejects_reuse() -> None:
    from kvmodel.errors import TraceError

    ops = [
        OPEN_A,
        {"op": "fork", "t": 0, "ctx": "b", "src": "a"},
        {"op": "end_session", "t": 1, "session": "s"},
    ]
    e = run("lru", config(), *ops).engine
    assert e.view.open_contexts() == []
    for bad, what in [
        ({"op": "end_session", "t": 2, "session": "s"}, "already ended"),
        ({"op": "open", "t": 2, "ctx": "c", "session": "s", "agent": "main"}, "has ended"),
        ({"op": "open", "t": 2, "ctx": "a", "session": "s2", "agent": "main"}, "already exists"),
        ({"op": "end_session", "t": 2, "session": "nope"}, "known session"),
    ]:
        with pytest.raises(TraceError, match=what):
            run("lru", config(), *ops, bad)


def test_turn_end_strips_reasoning_and_invalidates_from_the_first() -> None:
    e = run(
        "lru",
        config(),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("U", 4)]},
        {
            "op": "infer",
            "t": 1,
            "ctx": "a",
            "output": [msg("R", 4, "reasoning"), msg("O", 4, "output")],
        },
        {"op": "turn_end", "t": 2, "ctx": "a"},
        {"op": "append", "t": 3, "ctx": "a", "messages": [msg("U2", 4)]},
        {"op": "infer", "t": 4, "ctx": "a", "output": []},
    ).engine
    assert [m for m, _ in states(e, "a")] == ["U", "O", "U2"]
    # U kept; O rematerialised at its new position (the reasoning-stripped segment)
    assert log_of(e, 5) == [
        "infer a prompt=12 hit=4 miss=8 own=1",
        "alloc 3 d1 hbm active",
        "alloc 4 d2 hbm active",
    ]


def test_an_orphan_is_recomputed_in_place() -> None:
    class EvictRootFirst(BasePolicy):
        name: ClassVar[str] = "root-first"
        from kvmodel.policy import RankTerm

        rank: ClassVar[tuple[RankTerm, ...]] = (RankTerm("depth"),)

    e = run(
        EvictRootFirst(),
        config(blocks=2),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("X", 8)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "close", "t": 2, "ctx": "a"},
        {"op": "open", "t": 3, "ctx": "b", "session": "s", "agent": "main"},
        {"op": "append", "t": 3, "ctx": "b", "messages": [msg("Y", 4)]},
        {"op": "infer", "t": 4, "ctx": "b", "output": []},
        {"op": "open", "t": 5, "ctx": "c", "session": "s", "agent": "main"},
        {"op": "append", "t": 5, "ctx": "c", "messages": [msg("X", 8)]},
        {"op": "infer", "t": 6, "ctx": "c", "output": []},
    ).engine
    # b's write evicts X's root (depth 0), leaving X's second block orphaned (dead, resident);
    # c needs both: the root is a miss, so the orphan cannot be a hit and is recomputed in place
    assert log_of(e, 6) == [
        "infer b prompt=4 hit=0 miss=4 own=0",
        "evict 0 d0 dead",
        "alloc 0 d0 hbm active",
    ]
    assert log_of(e, 9) == [
        "infer c prompt=8 hit=0 miss=8 own=0",
        "evict 0 d0 suspended",
        "alloc 0 d0 hbm active",
        "alloc 1 d1 hbm active rewrite",
    ]
    assert e.memory.writes["hbm"] == 5  # type: ignore[index]
    assert list(e.view.chain(ContextId("c"))) == [0, 1]


class _BadPlace(BasePolicy):
    name: ClassVar[str] = "bad-place"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return Placement((TierName("nvme"),))


class _BadOrder(BasePolicy):
    name: ClassVar[str] = "bad-order"

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        return [BlockId(999)]


class _BadFree(BasePolicy):
    name: ClassVar[str] = "bad-free"

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        return [BlockId(12345)]


@pytest.mark.parametrize(
    ("policy", "what"),
    [
        (_BadPlace(), "unknown tier 'nvme'"),
        (_BadOrder(), "non-candidate 999"),
        (_BadFree(), "not resident"),
    ],
)
def test_policy_misuse_is_a_policy_error(policy: BasePolicy, what: str) -> None:
    ops = [
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("X", 16)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "append", "t": 2, "ctx": "a", "messages": [msg("Y", 16)]},
        {"op": "close", "t": 3, "ctx": "a"},
        {"op": "open", "t": 4, "ctx": "b", "session": "s", "agent": "main"},
        {"op": "append", "t": 4, "ctx": "b", "messages": [msg("Z", 16)]},
        {"op": "infer", "t": 5, "ctx": "b", "output": []},
    ]
    with pytest.raises(PolicyError, match=what):
        run(policy, config(blocks=4), *ops)


def test_policies_resolve_by_name_path_and_instance(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert resolve_policy("lru").name == "lru"
    assert resolve_policy("policies.kvtether:KVTether").name == "kvtether"
    (tmp_path / "thirdparty.py").write_text(
        "from kvmodel import BasePolicy\nclass Mine(BasePolicy):\n    name = 'mine'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert resolve_policy("thirdparty:Mine").name == "mine"
    p = resolve_policy("lru")
    assert resolve_policy(p) is p
    assert resolve_policy("lru") is not p
    for bad, what in [
        ("nope", "unknown policy"),
        ("no.such.module:X", "cannot import"),
        ("thirdparty:Nope", "no attribute"),
        ("thirdparty", "unknown policy"),
        ("os.path:join", "cannot be instantiated"),
        ("os:sep", "does not provide a policy"),
    ]:
        with pytest.raises(PolicyNotFoundError, match=what):
            resolve_policy(bad)
    sys.modules.pop("thirdparty", None)


def test_message_states_follow_the_phase() -> None:
    e = run(
        "lru", config(), OPEN_A, {"op": "append", "t": 0, "ctx": "a", "messages": [msg("U", 4)]}
    ).engine
    assert states(e, "a") == [("U", "active")]
    e.apply(trace({"op": "infer", "t": 1, "ctx": "a", "output": [msg("O", 4, "output")]}).ops[0])
    assert states(e, "a") == [("U", "suspended"), ("O", "suspended")]
    assert e.contexts[ContextId("a")].phase is MsgState.SUSPENDED


def test_a_closed_context_keeps_no_packed_blocks() -> None:
    """A closed context is kept (to name it in errors) but never infers again: the specs it
    packed go with it (a 1M-op replay held 370 MiB of them: benchmarks/bench_replay.py)."""
    r = run(
        "lru",
        config(blocks=2),  # too small: the inference is rejected, its blocks packed, not kept
        {"op": "open", "t": 0, "ctx": "a", "session": "s", "agent": "main"},
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("A", 16)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
    )
    a = r.engine.contexts[ContextId("a")]
    assert len(a.packed) == 4
    r.engine.apply(Close(2.0, ContextId("a")))
    assert a.packed == []
