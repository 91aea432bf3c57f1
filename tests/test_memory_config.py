"""Tiers, free lists, endurance arithmetic and TOML configuration (spec M1-M6)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from kvmodel.config import load_config, parse_config
from kvmodel.errors import ConfigError, InternalError
from kvmodel.ids import BlockId, TierName
from kvmodel.memory import SECONDS_PER_YEAR, Memory, ModelShape, TierConfig, device_years

HBM, HBF = TierName("hbm"), TierName("hbf")


def test_free_lists_are_fifo_and_count_writes() -> None:
    m = Memory([TierConfig(HBM, 2), TierConfig(HBF, 3)])
    assert [m.alloc(HBM), m.alloc(HBM)] == [0, 1]
    assert m.alloc(HBF) == 2
    assert m.tier_of(BlockId(4)) == HBF
    m.free(BlockId(0))
    assert m.alloc(HBF) == 3  # tiers have separate lists
    assert m.free_count(HBM) == 1
    assert m.alloc(HBM) == 0
    assert m.writes == {HBM: 3, HBF: 2}
    assert m.accounting() == {HBM: (0, 2, 2), HBF: (1, 2, 3)}
    with pytest.raises(InternalError):
        m.alloc(HBM)
    m.free(BlockId(1))
    with pytest.raises(InternalError, match="double free"):
        m.free(BlockId(1))


def test_a_lazy_free_list_is_the_fifo_list_filled_at_start() -> None:
    """Never-used slots are a counter in front of the slots freed since (spec M1): the same
    slots in the same order as a list filled at start, checked against that list over random
    allocations and frees, on two tiers."""
    from collections import deque

    import numpy as np

    rng = np.random.default_rng(0)
    m = Memory([TierConfig(HBM, 5), TierConfig(HBF, 7)])
    ref = {HBM: deque(BlockId(i) for i in range(5)), HBF: deque(BlockId(5 + i) for i in range(7))}
    used: list[BlockId] = []
    for _ in range(2_000):
        tier = (HBM, HBF)[int(rng.integers(2))]
        if used and (not ref[tier] or rng.random() < 0.45):
            b = used.pop(int(rng.integers(len(used))))
            m.free(b)
            ref[m.tier_of(b)].append(b)
        elif ref[tier]:
            b = m.alloc(tier)
            assert b == ref[tier].popleft()
            used.append(b)
        for t in (HBM, HBF):
            assert m.free_blocks(t) == tuple(ref[t])
            assert m.free_count(t) == len(ref[t])
    assert sorted(m.accounting()) == [HBF, HBM]


def test_a_tier_costs_what_is_used_not_its_size() -> None:
    """A tier of 2**40 blocks (the most there may be) is built and used at once; one more
    block is refused, naming the key."""
    from kvmodel.memory import MAX_TIER_BLOCKS

    m = Memory([TierConfig(HBM, 4), TierConfig(HBF, MAX_TIER_BLOCKS)])
    assert m.alloc(HBF) == 4
    assert m.free_count(HBF) == MAX_TIER_BLOCKS - 1
    assert m.tier_of(BlockId(MAX_TIER_BLOCKS + 3)) == HBF
    m.free(BlockId(4))
    assert m.accounting()[HBF] == (MAX_TIER_BLOCKS, 0, MAX_TIER_BLOCKS)
    # a replay on it is the replay on any tier it never fills (the trace writes ~20k blocks)
    from kvmodel.config import EngineConfig
    from kvmodel.replay import replay
    from kvmodel.workloads import AgenticParams, generate_agentic

    tr = generate_agentic(AgenticParams(seed=3, sessions=2))
    runs = [replay(tr, "kvtether", EngineConfig(16, (TierConfig(HBM, n),))) for n in
            (MAX_TIER_BLOCKS, 100_000)]  # fmt: skip
    assert runs[0].summary.to_json() == runs[1].summary.to_json()
    for blocks in (MAX_TIER_BLOCKS + 1, 9_200_000_000_000_000_000, 410 * 10**21):
        with pytest.raises(
            ConfigError, match=r"x\.toml: \[\[tiers\]\] #1: .*'blocks' must be at most"
        ):
            parse_config({"tiers": [{"name": "a", "blocks": blocks}]}, source="x.toml")


def test_device_years_formula() -> None:
    # 100k P/E over 512 GB at WA 1.02, written at 1 GB/s: budget/rate seconds
    y = device_years(
        pe_cycles=100_000,
        capacity_bytes=512 * 10**9,
        write_amplification=1.02,
        bytes_written=10**9 * 3600,
        seconds=3600,
    )
    assert y == pytest.approx(100_000 * 512 / 1.02 / SECONDS_PER_YEAR)
    assert y == pytest.approx(1.5906, rel=1e-4)
    assert (
        device_years(
            pe_cycles=1, capacity_bytes=1, write_amplification=1.0, bytes_written=0, seconds=10
        )
        is None
    )


def test_bytes_per_block_from_the_model() -> None:
    llama8b = ModelShape(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)
    assert llama8b.bytes_per_token() == 131072
    assert llama8b.bytes_per_block(16) == 2 * 1024 * 1024


def test_config_derives_bytes_per_block_and_validates(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = parse_config(
        {
            "block_size": 8,
            "model": {"layers": 2, "kv_heads": 2, "head_dim": 4},
            "tiers": [
                {"name": "hbm", "blocks": 4},
                {
                    "name": "hbf",
                    "blocks": 8,
                    "bytes_per_block": 10,
                    "pe_cycles": 5,
                    "write_amplification": 1.02,
                },
            ],
        }
    )
    assert cfg.tiers[0].bytes_per_block == 2 * 2 * 4 * 2 * 2 * 8
    assert cfg.tiers[1].bytes_per_block == 10
    assert cfg.tiers[1].write_amplification == 1.02
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tiers": []}, "at least one [[tiers]]"),
        ({"tiers": [{"name": "a", "blocks": 1}], "colour": 1}, "unknown key 'colour'"),
        ({"tiers": [{"name": "a"}]}, "missing required key 'blocks'"),
        ({"tiers": [{"name": "a", "blocks": 1}, {"name": "a", "blocks": 1}]}, "unique"),
        ({"tiers": [{"name": "a", "blocks": 1, "write_amplification": 0.5}]}, ">= 1.0"),
        ({"block_size": 0, "tiers": [{"name": "a", "blocks": 1}]}, "'block_size'"),
    ]
    for bad, msg in cases:
        with pytest.raises(ConfigError, match=msg.replace("[", r"\[").replace("]", r"\]")):
            Memory(parse_config(bad, source="x.toml").tiers)
    p = tmp_path / "bad.toml"
    p.write_text("block_size = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml: invalid TOML"):
        load_config(p)


@pytest.mark.parametrize("tiers", [(("hbm", 4),), (("hbm", 2), ("hbf", 3))])
def test_the_accounting_checks_count_by_tier_and_name_what_breaks_it(
    tiers: tuple[tuple[str, int], ...],
) -> None:
    """spec I-accounting and I-prefix-closed-residency, on one tier (counted without a lookup
    each) and on two (by slot range): a clean engine has no finding; a resident block whose slot
    went back to a free list, and a block whose parent left, are named."""
    from checkers.invariants.structural import check_accounting, check_prefix_closed
    from kvmodel import EngineConfig
    from kvmodel.engine import Engine
    from kvmodel.io.trace import Append, Infer, Open
    from kvmodel.messages import Message, MessageKind, Role
    from policies.lru import LRU

    mem = Memory(tuple(TierConfig(TierName(n), b) for n, b in tiers))
    taken = [mem.alloc(TierName(n)) for n, _ in tiers]
    assert mem.count_by_tier(taken) == {TierName(n): 1 for n, _ in tiers}
    assert mem.used_slots() == set(taken)
    engine = Engine(EngineConfig(4, tuple(TierConfig(TierName(n), b) for n, b in tiers)), LRU())
    engine.apply(Open(0.0, "a", "s", "main"))  # type: ignore[arg-type]
    engine.apply(Append(0.0, "a", (Message("m", Role.USER, MessageKind.USER, 8),)))  # type: ignore[arg-type]
    engine.apply(Infer(1.0, "a"))  # type: ignore[arg-type]
    assert check_accounting(engine) == []
    assert check_prefix_closed(engine) == []
    first, second = sorted(engine.blocks)
    engine.memory.free(first)  # the slot back on a free list, the block still resident
    found = [v.message for v in check_accounting(engine)]
    assert "resident block on a free list" in found
    assert any("slots used but 2 resident blocks" in m for m in found)
    # the chain's first block gone (the resident table's own dict): the second is an orphan
    del cast("dict[BlockId, object]", engine.blocks)[first]
    assert [v.block for v in check_prefix_closed(engine)] == [second]
