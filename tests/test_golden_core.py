"""Golden scenarios: exact hit/miss/alloc/evict sequences for the core semantics (spec P, B, M).

Block size is 4 tokens throughout, so a 4-token message is exactly one block.
"""

from __future__ import annotations

from scenario import config, log_of, msg, run

from kvmodel.ids import BlockId, ContextId

OPEN_A = {"op": "open", "t": 0, "ctx": "a", "session": "s", "agent": "main"}
ABCD = {
    "op": "append",
    "t": 0,
    "ctx": "a",
    "messages": [msg("A", 4), msg("B", 4), msg("C", 4), msg("D", 4)],
}


def test_replace_in_the_middle_invalidates_the_suffix_only() -> None:
    r = run(
        "lru",
        config(),
        OPEN_A,
        ABCD,
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "replace", "t": 2, "ctx": "a", "index": 1, "message": msg("B2", 4)},
        {"op": "infer", "t": 3, "ctx": "a", "output": []},
    )
    e = r.engine
    assert log_of(e, 2) == [
        "infer a prompt=16 hit=0 miss=16 own=0",
        "alloc 0 d0 hbm active",
        "alloc 1 d1 hbm active",
        "alloc 2 d2 hbm active",
        "alloc 3 d3 hbm active",
    ]
    # A is kept by count (minimal diff); B2 and everything after it is recomputed
    assert log_of(e, 4) == [
        "infer a prompt=16 hit=4 miss=12 own=1",
        "alloc 4 d1 hbm active",
        "alloc 5 d2 hbm active",
        "alloc 6 d3 hbm active",
    ]
    assert list(e.view.chain(ContextId("a"))) == [0, 4, 5, 6]
    assert list(e.view.dead()) == [1, 2, 3]  # the old suffix: zombie KV under LRU


def test_replace_of_the_last_message_recomputes_one_block() -> None:
    r = run(
        "lru",
        config(),
        OPEN_A,
        ABCD,
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "replace", "t": 2, "ctx": "a", "index": 3, "message": msg("D2", 4)},
        {"op": "infer", "t": 3, "ctx": "a", "output": []},
    )
    assert log_of(r.engine, 4) == ["infer a prompt=16 hit=12 miss=4 own=3", "alloc 4 d3 hbm active"]


def test_remove_in_the_middle_shifts_and_recomputes_what_follows() -> None:
    r = run(
        "lru",
        config(),
        OPEN_A,
        ABCD,
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "remove", "t": 2, "ctx": "a", "index": 2},
        {"op": "infer", "t": 3, "ctx": "a", "output": []},
    )
    e = r.engine
    assert log_of(e, 4) == ["infer a prompt=12 hit=8 miss=4 own=2", "alloc 4 d2 hbm active"]
    assert list(e.view.chain(ContextId("a"))) == [0, 1, 4]
    assert list(e.view.dead()) == [2, 3]


def test_edits_are_deferred_until_the_next_inference() -> None:
    r = run(
        "lru",
        config(),
        OPEN_A,
        ABCD,
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "remove", "t": 2, "ctx": "a", "index": 0, "count": 2},
    )
    e = r.engine
    # logically A and B are gone, but the mapping still holds all four blocks (now Expired in a)
    assert list(e.view.chain(ContextId("a"))) == [0, 1, 2, 3]
    assert e.view.context(ContextId("a")).valid_blocks == 0
    assert {e.view.block(b).state.value for b in e.view.chain(ContextId("a"))} == {"expired"}
    assert list(e.view.dead()) == []


def test_fork_shares_the_prefix_then_diverges() -> None:
    r = run(
        "lru",
        config(),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("S", 8), msg("U", 4)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "fork", "t": 2, "ctx": "b", "src": "a", "upto": 1},
        {"op": "append", "t": 2, "ctx": "b", "messages": [msg("V", 4)]},
        {"op": "infer", "t": 3, "ctx": "b", "output": []},
        {"op": "open", "t": 4, "ctx": "c", "session": "s", "agent": "worker"},
        {"op": "append", "t": 4, "ctx": "c", "messages": [msg("S", 8), msg("W", 4)]},
        {"op": "infer", "t": 5, "ctx": "c", "output": []},
    )
    e = r.engine
    assert log_of(e, 2) == [
        "infer a prompt=12 hit=0 miss=12 own=0",
        "alloc 0 d0 hbm active",
        "alloc 1 d1 hbm active",
        "alloc 2 d2 hbm active",
    ]
    # the fork inherits S's two blocks as its own chain: no lookup, no hit records
    assert log_of(e, 5) == ["infer b prompt=12 hit=8 miss=4 own=2", "alloc 3 d2 hbm active"]
    # an unrelated context with the same first message finds S by lookup (shared prefix tree)
    assert log_of(e, 8) == [
        "infer c prompt=12 hit=8 miss=4 own=0",
        "hit 0 d0",
        "hit 1 d1",
        "alloc 4 d2 hbm active",
    ]
    assert sorted(e.view.block(BlockId(0)).holders) == ["a", "b", "c"]
    g = e.graph()
    assert sorted(g.edges(data="kind")) == [("a", "b", "fork")]


TEMP_THEN_REUSE = (
    OPEN_A,
    {"op": "append", "t": 0, "ctx": "a", "messages": [msg("S", 4)]},
    {"op": "append", "t": 0, "ctx": "a", "messages": [msg("T", 4, h="t")], "temporary": True},
    {"op": "infer", "t": 1, "ctx": "a", "output": [msg("O", 4, "output")]},
    {"op": "open", "t": 2, "ctx": "b", "session": "s", "agent": "main"},
    {"op": "append", "t": 2, "ctx": "b", "messages": [msg("S", 4), msg("T2", 4, h="t")]},
    {"op": "infer", "t": 3, "ctx": "b", "output": []},
)


def test_temporary_is_bypassed_released_and_never_hit_under_kvtether() -> None:
    e = run("kvtether", config(), *TEMP_THEN_REUSE).engine
    assert log_of(e, 3) == [
        "infer a prompt=8 hit=0 miss=8 own=0",
        "alloc 0 d0 hbm active",
        "alloc 1 d1 hbm temporary",
        "bypass 1 d1",
        "alloc 2 d2 hbm active",  # O follows T: computed, but T leaves, so it is not kept
        "free 1 d1 bypass",
        "free 2 d2 reclaim",  # dead at the boundary, reclaimed at once
    ]
    assert list(e.view.chain(ContextId("a"))) == [0]
    assert [m.id for m, _ in e.contexts[ContextId("a")].message_states()] == ["S", "O"]
    # T2 has T's content key, but T's KV never entered the reuse store: a miss
    # (slot 3: freed slots go to the back of the FIFO free list)
    assert log_of(e, 6) == [
        "infer b prompt=8 hit=4 miss=4 own=0",
        "hit 0 d0",
        "alloc 3 d1 hbm active",
    ]


def test_lru_caches_a_temporary_like_any_other_kv() -> None:
    e = run("lru", config(), *TEMP_THEN_REUSE).engine
    assert log_of(e, 3) == [
        "infer a prompt=8 hit=0 miss=8 own=0",
        "alloc 0 d0 hbm active",
        "alloc 1 d1 hbm temporary",
        "alloc 2 d2 hbm active",
    ]
    assert list(e.view.dead()) == [2]  # O: computed after T, not kept when T left
    assert log_of(e, 6) == ["infer b prompt=8 hit=8 miss=0 own=0", "hit 0 d0", "hit 1 d1"]


def test_pinned_blocks_survive_pressure() -> None:
    e = run(
        "lru",
        config(blocks=4),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("P", 8)]},
        {"op": "pin", "t": 0, "ctx": "a"},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "open", "t": 2, "ctx": "b", "session": "s", "agent": "main"},
        {"op": "append", "t": 2, "ctx": "b", "messages": [msg("X", 8)]},
        {"op": "infer", "t": 3, "ctx": "b", "output": []},
        {"op": "open", "t": 4, "ctx": "c", "session": "s", "agent": "main"},
        {"op": "append", "t": 4, "ctx": "c", "messages": [msg("Y", 8)]},
        {"op": "infer", "t": 5, "ctx": "c", "output": []},
    ).engine
    # a's blocks 0,1 are older but pinned: LRU takes b's, tail first
    assert log_of(e, 9) == [
        "infer c prompt=8 hit=0 miss=8 own=0",
        "evict 3 d1 suspended",
        "alloc 3 d0 hbm active",
        "evict 2 d0 suspended",
        "alloc 2 d1 hbm active",
    ]
    assert list(e.view.chain(ContextId("a"))) == [0, 1]
    assert list(e.view.chain(ContextId("b"))) == []


def test_rejection_when_everything_resident_is_pinned() -> None:
    e = run(
        "lru",
        config(blocks=4),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("P", 16)]},
        {"op": "pin", "t": 0, "ctx": "a"},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "open", "t": 2, "ctx": "b", "session": "s", "agent": "main"},
        {"op": "append", "t": 2, "ctx": "b", "messages": [msg("X", 4)]},
        {"op": "infer", "t": 3, "ctx": "b", "output": [msg("Y", 4, "output")]},
    ).engine
    assert log_of(e, 6) == ["infer b prompt=4 hit=0 miss=4 own=0", "reject b"]
    rej = e.log.records[-1]
    assert rej.kind == "reject"
    assert "0 free and 0 evictable" in rej.reason
    assert e.stats.rejected == 1
    assert e.stats.infers == 1
    assert list(e.view.chain(ContextId("a"))) == [0, 1, 2, 3]
    # the harness still got its output: the logical sequence moved on
    assert [m.id for m, _ in e.contexts[ContextId("b")].message_states()] == ["X", "Y"]


def test_rejection_when_the_rest_is_in_flight() -> None:
    e = run(
        "lru",
        config(blocks=4),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("X", 12)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "append", "t": 2, "ctx": "a", "messages": [msg("Y", 8)]},
        {"op": "infer", "t": 3, "ctx": "a", "output": []},
    ).engine
    # 2 blocks needed, 1 free, and a's own 3 blocks are the request's prefix: in flight
    assert log_of(e, 4) == ["infer a prompt=20 hit=12 miss=8 own=3", "reject a"]
    assert e.memory.free_count("hbm") == 1  # type: ignore[arg-type]


def test_partial_tail_blocks_are_never_reused() -> None:
    e = run(
        "lru",
        config(),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("M", 6)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "open", "t": 2, "ctx": "b", "session": "s", "agent": "main"},
        {"op": "append", "t": 2, "ctx": "b", "messages": [msg("M", 6)]},
        {"op": "infer", "t": 3, "ctx": "b", "output": []},
    ).engine
    assert log_of(e, 2) == [
        "infer a prompt=6 hit=0 miss=6 own=0",
        "alloc 0 d0 hbm active",
        "alloc 1 d1 hbm active",
        "free 1 d1 partial",
    ]
    assert log_of(e, 5) == [
        "infer b prompt=6 hit=4 miss=2 own=0",
        "hit 0 d0",
        "alloc 2 d1 hbm active",
        "free 2 d1 partial",
    ]


COMPACTION = (
    OPEN_A,
    {
        "op": "append",
        "t": 0,
        "ctx": "a",
        "messages": [msg("S", 8, "system"), msg("H1", 8), msg("H2", 8)],
    },
    {"op": "infer", "t": 1, "ctx": "a", "output": []},
    {
        "op": "open",
        "t": 2,
        "ctx": "comp",
        "session": "s",
        "agent": "compactor",
        "parent": "a",
        "one_shot": True,
    },
    {
        "op": "append",
        "t": 2,
        "ctx": "comp",
        "messages": [msg("S", 8, "system"), msg("H1", 8), msg("H2", 8), msg("I", 4, "instruction")],
    },
    {"op": "infer", "t": 3, "ctx": "comp", "output": [msg("SUM", 4, "summary")]},
    {"op": "remove", "t": 4, "ctx": "a", "index": 1, "count": 2},
    {"op": "append", "t": 4, "ctx": "a", "messages": [msg("SUM", 4, "summary")]},
    {"op": "infer", "t": 5, "ctx": "a", "output": []},
    {"op": "turn_end", "t": 9, "ctx": "a"},
)


def test_compaction_leaves_zombie_kv_under_lru() -> None:
    r = run("lru", config(), *COMPACTION)
    e = r.engine
    assert log_of(e, 5) == [
        "infer comp prompt=28 hit=24 miss=4 own=0",
        "hit 0 d0",
        "hit 1 d1",
        "hit 2 d2",
        "hit 3 d3",
        "hit 4 d4",
        "hit 5 d5",
        # a one-shot context's messages are all temporary, its output included (spec P8)
        "alloc 6 d6 hbm temporary",
        "alloc 7 d7 hbm temporary",
    ]
    assert log_of(e, 8) == ["infer a prompt=12 hit=8 miss=4 own=2", "alloc 8 d2 hbm active"]
    # the old history (H1, H2) and the one-shot compaction context stay resident, dead
    assert list(e.view.dead()) == [2, 3, 4, 5, 6, 7]
    assert r.summary.dead_resident_final == 6
    # 2 dead blocks (I, SUM) for 2 s after t=3, then 6 for 4 s after t=5
    assert r.summary.zombie_block_seconds == 2 * 2 + 6 * 4


def test_compaction_leaves_nothing_dead_under_kvtether() -> None:
    r = run("kvtether", config(), *COMPACTION)
    assert r.summary.dead_resident_max == 0
    assert r.summary.zombie_block_seconds == 0
    assert log_of(r.engine, 5)[-6:] == [
        "alloc 6 d6 hbm temporary",
        "bypass 6 d6",
        "alloc 7 d7 hbm temporary",
        "bypass 7 d7",
        "free 6 d6 bypass",
        "free 7 d7 bypass",
    ]


def test_a_hit_takes_the_readers_message_states_not_the_writers() -> None:
    """A hit joins the chain as the reader's own packed block (spec B5, L5.1). Found by a
    random trace (seed 57338): after `remove` and an `append` of equal content (same hash), the
    hit kept the removed message's instance, so the block was Expired under a live pin and its
    eviction orphaned the pinned suffix."""
    r = run(
        "lru",
        config(),
        OPEN_A,
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("A", 4, h="x")]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "remove", "t": 2, "ctx": "a", "index": 0},
        {"op": "append", "t": 2, "ctx": "a", "messages": [msg("A2", 4, h="x"), msg("B", 4)]},
        {"op": "infer", "t": 3, "ctx": "a", "output": []},
        {"op": "pin", "t": 4, "ctx": "a"},
        # a second context reads the same block: its class there is its own
        {"op": "open", "t": 5, "ctx": "b", "session": "s", "agent": "worker"},
        {"op": "append", "t": 5, "ctx": "b", "messages": [msg("A3", 4, h="x")]},
        {"op": "infer", "t": 6, "ctx": "b", "output": []},
    )
    e = r.engine
    assert log_of(e, 5) == [
        "infer a prompt=8 hit=4 miss=4 own=0",
        "hit 0 d0",
        "alloc 1 d1 hbm active",
    ]
    a, b = e.contexts[ContextId("a")], e.contexts[ContextId("b")]
    assert [s.uids for s in a.materialized] == [(1,), (2,)]
    assert [a.block_class(d).name for d in range(2)] == ["PINNED", "PINNED"]
    assert b.block_class(0).name == "SUSPENDED"
    assert e.view.block(BlockId(0)).holders == ("a", "b")
