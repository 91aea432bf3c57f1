"""KV that moves between tiers (spec/movement.md): demotions, offloads, loads and copy drops in the
engine, the contract model and the checkers."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from scenario import msg, trace, turn

from checkers.conformance.oracle import check_log
from checkers.conformance.oracle_invariants import check_log_invariants
from checkers.invariants import INVARIANTS
from checkers.invariants.registry import STRUCTURAL
from checkers.invariants.replay import check_ops
from checkers.search.bundle import config_to_toml
from checkers.search.driver import search
from kvmodel.cli import main
from kvmodel.config import EngineConfig, parse_config
from kvmodel.errors import ConfigError, PolicyError
from kvmodel.ids import TierName
from kvmodel.io.observations import CopyObs, DropCopyObs, LoadObs, observation_to_json
from kvmodel.io.trace import Trace
from kvmodel.lifecycle import BlockClass
from kvmodel.memory import TierConfig
from kvmodel.policy import Placement, claimed_invariants, moves, resolve_policy
from kvmodel.replay import replay
from kvmodel.view import BlockInfo, ModelView, NewBlock
from kvmodel.workloads.random_ops import RandomParams, random_trace
from policies.offload import LRUDemote

MOVING = ("lru-offload", "lru-demote", "kvtether-offload", "vllm-offload")


def _cfg(hbm: int, cpu: int, *, copies: str = "inclusive", bs: int = 4) -> EngineConfig:
    return EngineConfig(
        bs,
        (
            TierConfig(TierName("hbm"), hbm),
            TierConfig(TierName("cpu"), cpu, bytes_per_block=1000, read_gbps=10.0, copies=copies),
        ),
    )


def _scenario() -> list[dict[str, object]]:
    return [
        *turn(0, "a", "s", "A", 8),  # a0 a1 in hbm
        *turn(1, "b", "s", "B", 8),  # b0 free; b1 evicts a1, demoted to cpu
        {"op": "append", "t": 2, "ctx": "a", "messages": [msg("A2", 4)]},
        {"op": "infer", "t": 2, "ctx": "a", "output": []},  # a1 loaded; b1, b0 demoted
        {"op": "close", "t": 3, "ctx": "b"},
    ]


def _kinds(records: object) -> list[str]:
    return [r.kind for r in records]  # type: ignore[attr-defined]


def test_golden_demote_then_load() -> None:
    """The movement golden scenario, record by record (MV2-MV4, MV8)."""
    r = replay(trace(*_scenario()), "lru-demote", _cfg(3, 4))
    log = r.engine.log
    by_op = {i: [o for o in log if o.op == i] for i in range(9)}
    assert _kinds(by_op[5]) == ["infer", "alloc", "copy", "evict", "alloc"]
    demote = by_op[5][2]
    assert isinstance(demote, CopyObs)
    assert (demote.depth, demote.from_tier, demote.tier, demote.reason, demote.result) == (
        1,
        "hbm",
        "cpu",
        "demote",
        "written",
    )
    assert _kinds(by_op[7]) == ["infer", "copy", "evict", "alloc", "copy", "evict", "alloc", "load"]
    load = by_op[7][-1]
    assert isinstance(load, LoadObs)
    assert (load.key, load.depth, load.from_tier, load.tier) == (demote.key, 1, "cpu", "hbm")
    infer = by_op[7][0]
    assert (infer.prompt_tokens, infer.hit_tokens, infer.miss_tokens) == (12, 4, 8)  # type: ignore[union-attr]
    s = r.summary
    assert s.writes == {"hbm": 6, "cpu": 3}  # every copy is a write to its tier (MV3)
    assert s.movement == {
        "demotions": 3,
        "offloads": 0,
        "copies_written": {"hbm": 0, "cpu": 3},
        "copies_held": 0,
        "copies_no_room": 0,
        "loads": {"cpu": 1},
        "load_tokens": 4,
        "load_bytes": {"cpu": 1000},
        "copy_drops": {},
        "copies_final": 3,
        "dead_copies_final": 2,  # b closed: its two copies are dead KV below (MV6)
        "dead_copies_max": 2,
    }
    assert "movement" in s.to_json()
    assert "movement" not in replay(trace(*_scenario()), "lru", _cfg(3, 4)).summary.to_json()


def test_exclusive_tier_drops_the_copy_it_loads() -> None:
    r = replay(trace(*_scenario()), "lru-demote", _cfg(3, 4, copies="exclusive"))
    drops = [o for o in r.engine.log if isinstance(o, DropCopyObs)]
    loads = [o for o in r.engine.log if isinstance(o, LoadObs)]
    assert [(d.key, d.tier, d.reason) for d in drops] == [(loads[0].key, "cpu", "load")]


def test_kvtether_offload_drops_dead_copies_and_demotes_only_suspended() -> None:
    r = replay(trace(*_scenario()), "kvtether-offload", _cfg(3, 4))
    drops = [o for o in r.engine.log if isinstance(o, DropCopyObs)]
    assert {d.reason for d in drops} == {"reclaim"}
    assert len(drops) == 2
    assert r.summary.movement is not None
    assert r.summary.movement["dead_copies_final"] == 0
    copies = [o for o in r.engine.log if isinstance(o, CopyObs)]
    assert copies
    assert all(c.reason == "demote" for c in copies)


def test_a_copy_holds_free_space_only() -> None:
    """A tier full of primaries takes no copy (MV3 step 4), and a primary written into a tier
    whose free space its copies fill drops the least recently used copy (MV1, MV5)."""
    cfg = _cfg(1, 1)
    ops = [*turn(0, "a", "s", "A", 4), *turn(1, "b", "s", "B", 4), *turn(2, "c", "s", "C", 4)]
    r = replay(trace(*ops), "lru-demote", cfg)
    made = [o.result for o in r.engine.log if isinstance(o, CopyObs)]
    assert made == ["written", "written"]  # a's copy, then b's after a's is dropped for room
    drops = [(o.reason) for o in r.engine.log if isinstance(o, DropCopyObs)]
    assert drops == ["room"]


def test_no_moving_policy_changes_nothing() -> None:
    """Only a policy that moves KV gets the movement layer; one that could move but never has
    to (no eviction) leaves the same log as its base policy, byte for byte (every golden test
    pins the policies that do not move)."""
    assert not moves(resolve_policy("lru"))
    assert not moves(resolve_policy("kvtether"))
    assert all(moves(resolve_policy(p)) for p in MOVING)
    ample = _cfg(64, 8)
    base = replay(trace(*_scenario()), "lru", ample).engine.log.to_jsonl()
    assert replay(trace(*_scenario()), "lru-demote", ample).engine.log.to_jsonl() == base


def test_a_copy_goes_below_or_is_refused() -> None:
    class Up(LRUDemote):
        name: ClassVar[str] = "up"

        def demote_to(self, view: ModelView, victim: BlockInfo) -> TierName | None:
            return TierName("hbm")

    with pytest.raises(PolicyError) as e:
        replay(trace(*_scenario()), Up(), _cfg(3, 4))
    assert e.value.kind == "bad-movement"
    assert "below" in str(e.value)


def test_copies_mode_in_config() -> None:
    data = {"tiers": [{"name": "hbm", "blocks": 4}, {"name": "cpu", "blocks": 8}]}
    data["tiers"][1]["copies"] = "exclusive"
    assert parse_config(data).tiers[1].copies == "exclusive"
    data["tiers"][1]["copies"] = "both"
    with pytest.raises(ConfigError, match=r"\[\[tiers\]\] #2: key 'copies'"):
        parse_config(data)


@pytest.mark.parametrize("policy", MOVING)
def test_moving_policies_keep_their_claims_and_the_contract(policy: str) -> None:
    """Random traces (seeded: the same every run) on two tiers under pressure: every claim
    holds and the contract model follows every move; the runs did move KV."""
    rng = np.random.default_rng(7)
    moved = 0
    for seed in range(12):
        ops = random_trace(RandomParams(seed=seed, ops=80)).ops
        cfg = _cfg(int(rng.integers(4, 13)), int(rng.integers(8, 33)))
        run = check_ops(ops, policy, cfg, INVARIANTS)
        claimed = claimed_invariants(resolve_policy(policy)) | {"engine-contract"}
        assert [v for v in run.violations if v.invariant in claimed] == [], (policy, seed)
        moved += sum(1 for o in run.engine.log if isinstance(o, LoadObs))
    assert moved > 0


@pytest.mark.parametrize(
    ("mutant", "caught"),
    [
        ("DemoteIntoFullTier", {"accounting"}),
        ("UncountedCopyWrite", {"accounting"}),
        ("LoadsFirstBlockOnly", {"engine-contract"}),
        ("TetherOffloadCodeReclaim", {"no-zombie-kv"}),
    ],
)
def test_the_search_catches_movement_mutants(mutant: str, caught: set[str]) -> None:
    found = search(
        f"checkers.search.movement_mutants:{mutant}",
        INVARIANTS,
        max_examples=30,
        steps=20,
        walks=60,
        hypothesis_shrink=False,
    )
    assert caught & set(found.found), (mutant, sorted(found.found))


def test_the_oracle_never_passes_or_invents_on_moves() -> None:
    """A log with movement records is never OK by omission: a non-moving reference sees the
    moves as decisions it did not make, and invariants-only mode says UNKNOWN rather than
    inventing an inconsistency; a moving reference judges them (below)."""
    tr = trace(*_scenario())
    cfg = _cfg(3, 4)
    log = [observation_to_json(o) for o in replay(tr, "lru-demote", cfg).engine.log]
    assert check_log(tr, log, "lru-demote", cfg).verdict == "OK"
    v = check_log(tr, log, "lru", cfg, shorten=False)
    assert v.verdict == "ILLEGAL"
    assert any(d.startswith("copy ") for d in v.got)
    u = check_log_invariants(tr, log, cfg, STRUCTURAL)
    assert u.verdict == "UNKNOWN"
    assert "moves KV between tiers" in u.reason


def _pressure_traces(n: int) -> list[tuple[Trace, EngineConfig]]:
    rng = np.random.default_rng(11)
    return [
        (
            random_trace(RandomParams(seed=seed, ops=60, max_context_tokens=28)),
            _cfg(int(rng.integers(5, 10)), int(rng.integers(3, 9))),
        )
        for seed in range(n)
    ]


@pytest.mark.parametrize("policy", MOVING)
def test_the_oracle_accepts_every_reference_log_of_a_moving_policy(policy: str) -> None:
    """Policy mode judges moves: each moving policy's own logs (two tiers under pressure in
    both, seeded) are OK against it, room drops followed where the rules tie them (MV13)."""
    moved = 0
    for tr, cfg in _pressure_traces(15):
        log = [observation_to_json(o) for o in replay(tr, policy, cfg).engine.log]
        moved += sum(r["kind"] == "drop-copy" and r["reason"] == "room" for r in log)
        v = check_log(tr, log, policy, cfg, complete=True, shorten=False)
        assert v.verdict == "OK", (policy, v)
    assert moved > 0


def _perturbed(log: list[dict[str, object]], kind: str) -> list[dict[str, object]] | None:
    """``log`` with one movement decision changed the way a buggy tier would: a load dropped
    (recomputed instead), a copy written that was held, or another copy dropped for room."""
    for i, r in enumerate(log):
        if kind == "load" and r["kind"] == "load":
            return log[:i] + log[i + 1 :]
        if kind == "held" and r["kind"] == "copy" and r["result"] == "held":
            return [*log[:i], {**r, "result": "written"}, *log[i + 1 :]]
        if kind == "room" and r["kind"] == "drop-copy" and r["reason"] == "room":
            others = {
                str(o["key"])
                for o in log[:i]
                if o["kind"] == "copy" and o["tier"] == r["tier"] and o["key"] != r["key"]
            }
            if others:
                return [*log[:i], {**r, "key": sorted(others)[0]}, *log[i + 1 :]]
    return None


@pytest.mark.parametrize("kind", ["load", "held", "room"])
def test_the_oracle_catches_a_wrong_move(kind: str) -> None:
    """Under vllm-offload (whose order is total: no tie to hide behind), a log with one move
    changed is ILLEGAL at that op, never OK."""
    caught = 0
    for tr, cfg in _pressure_traces(15):
        log = [observation_to_json(o) for o in replay(tr, "vllm-offload", cfg).engine.log]
        bad = _perturbed(log, kind)
        if bad is None:
            continue
        v = check_log(tr, bad, "vllm-offload", cfg, complete=True, shorten=False)
        assert v.verdict == "ILLEGAL", (kind, v)
        caught += 1
    assert caught >= 3, kind


def test_compare_prices_moving_policies_and_says_what_they_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kvmodel compare on two tiers: a moving policy's loads are reused in its cost, and the
    table says how much it loaded, since its hit rate counts hits on primaries alone."""
    cfg = tmp_path / "two.toml"
    cfg.write_text(
        'block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 300\n'
        '[[tiers]]\nname = "hbf"\nblocks = 1200\nbytes_per_block = 2097152\nread_gbps = 25\n'
    )
    args = ["compare", "--sessions", "3", "--turns", "2", "--splits", "1/7", "--quiet"]
    args += ["--config", str(cfg), "--policies", "lru-offload,kvtether-offload,kvtether"]
    assert main(args) == 0
    out = capsys.readouterr().out
    loaded = [line for line in out.splitlines() if " loaded " in line]
    assert [line.split()[0] for line in loaded] == ["lru-offload", "kvtether-offload"]
    assert all("tokens back from lower tiers" in line for line in loaded)


# ---------------------------------------------------------------- copy rules (MV13)


def _copy_log(policy: str, cfg: EngineConfig, *ops: dict[str, object]) -> list[list[str]]:
    """Per op, its movement records as short strings (key prefixes dropped: by depth)."""
    r = replay(trace(*ops), policy, cfg)
    out: list[list[str]] = [[] for _ in ops]
    depth: dict[str, str] = {}
    for o in r.engine.log:
        if isinstance(o, CopyObs):
            depth[o.key] = f"{o.ctx}{o.depth}"
            out[o.op].append(f"copy {o.ctx}{o.depth} {o.result}")
        elif isinstance(o, DropCopyObs):
            out[o.op].append(f"drop {depth.get(o.key, o.key)} {o.reason}")
        elif isinstance(o, LoadObs):
            out[o.op].append(f"load {o.ctx}{o.depth}")
    return out


def test_vllm_rules_drop_the_oldest_request_tail_first() -> None:
    """vLLM's CPU LRU stamps a request's copies head last, so the tail of the oldest request
    leaves first; the engine's default order (use order, Dead first) drops its head first."""
    ops = (*turn(0, "a", "s", "A", 12), *turn(1, "b", "s", "B", 8))
    got = _copy_log("vllm-offload", _cfg(8, 4), *ops)
    assert got[2] == ["copy a0 written", "copy a1 written", "copy a2 written"]
    assert got[5] == [
        "drop a2 room",
        "copy b0 written",
        "copy b1 written",
    ]  # (a store's room first)
    default = _copy_log("lru-offload", _cfg(8, 4), *ops)
    assert default[5] == ["copy b0 written", "drop a0 room", "copy b1 written"]


def test_vllm_rules_store_a_batch_whole_or_not_at_all() -> None:
    """A request's offloads are one store: its own copies never leave for its room, and when
    the tier cannot take every new one, none is written (MV13); copy by copy, two are."""
    ops = turn(0, "a", "s", "A", 12)
    assert _copy_log("vllm-offload", _cfg(8, 2), *ops)[2] == [
        "copy a0 no-room",
        "copy a1 no-room",
        "copy a2 no-room",
    ]
    assert _copy_log("lru-offload", _cfg(8, 2), *ops)[2] == [
        "copy a0 written",
        "copy a1 written",
        "drop a0 room",
        "copy a2 written",
    ]


def test_vllm_rules_offer_the_whole_request_unless_it_loaded() -> None:
    """A request that loaded nothing offers its whole prefix (its kept blocks renewed, one its
    tier lost written again); one that loaded offers only what it computed after its loads."""
    ops = (
        *turn(0, "a", "s", "A", 8),  # a0 a1 copied
        {"op": "append", "t": 1, "ctx": "a", "messages": [msg("A2", 4)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},  # a0 a1 held, a2 written
        *turn(2, "b", "s", "B", 8),  # with 4 slots, evicts a2 (a's tail) from hbm
        {"op": "append", "t": 3, "ctx": "a", "messages": [msg("A3", 4)]},
        {"op": "infer", "t": 3, "ctx": "a", "output": []},
    )
    got = _copy_log("vllm-offload", _cfg(4, 8), *ops)
    assert got[4] == ["copy a0 held", "copy a1 held", "copy a2 written"]
    assert got[9] == ["load a2", "copy a3 written"]  # hits a0 a1, loads a2: offers a3 alone
    roomy = _copy_log("vllm-offload", _cfg(5, 8), *ops)  # nothing evicted, nothing loaded
    assert roomy[9] == ["copy a0 held", "copy a1 held", "copy a2 held", "copy a3 written"]
    written = _copy_log("lru-offload", _cfg(4, 8), *ops)
    assert written[4] == ["copy a2 written"]  # (the default offers what it wrote)


# ---------------------------------------------------------------- copy tiers (MV15)


def _copy_tier_cfg(hbm: int, cpu: int) -> EngineConfig:
    return EngineConfig(
        4, (TierConfig(TierName("hbm"), hbm), TierConfig(TierName("cpu"), cpu, copies_only=True))
    )


def test_a_copy_tier_takes_no_primary_and_is_outside_admission() -> None:
    """LRU places in every tier; a copy tier is taken out of its placement, and a prompt that
    only the copy tier's room would admit is refused up front, evicting nothing (MV15)."""
    r = replay(
        trace(*turn(0, "a", "s", "A", 8), *turn(1, "b", "s", "B", 16)), "lru", _copy_tier_cfg(3, 8)
    )
    kinds = [(o.op, o.kind) for o in r.engine.log]
    assert all(getattr(o, "tier", "hbm") == "hbm" for o in r.engine.log if o.kind == "alloc")
    assert (5, "reject") in kinds
    assert not any(op == 5 and k in ("evict", "alloc") for op, k in kinds)
    roomy = replay(
        trace(*turn(0, "a", "s", "A", 8), *turn(1, "b", "s", "B", 16)), "lru", _cfg(3, 8)
    )
    assert any(o.op == 5 and o.kind == "alloc" and o.tier == "cpu" for o in roomy.engine.log)


def test_a_placement_in_copy_tiers_only_is_refused() -> None:
    class CPUOnly(LRUDemote):
        name: ClassVar[str] = "cpu-only"

        def place(self, view: ModelView, block: NewBlock) -> Placement:
            return Placement((TierName("cpu"),))

    with pytest.raises(PolicyError, match="copy tiers"):
        replay(trace(*turn(0, "a", "s", "A", 8)), CPUOnly(), _copy_tier_cfg(3, 8))


def test_copies_only_in_config() -> None:
    hbm = {"name": "hbm", "blocks": 4}
    cpu = {"name": "cpu", "blocks": 8, "copies_only": True}
    cfg = parse_config({"block_size": 4, "tiers": [hbm, cpu]})
    assert [t.copies_only for t in cfg.tiers] == [False, True]
    with pytest.raises(ConfigError, match="copies_only' must be true or false"):
        parse_config({"tiers": [{**hbm, "copies_only": "yes"}]})
    with pytest.raises(ConfigError, match="a primary has nowhere to go"):
        parse_config({"tiers": [{**hbm, "copies_only": True}]})
    # a finding's bundle writes it back (its replay needs the same tiers)
    assert parse_config(tomllib.loads(config_to_toml(cfg))) == cfg


def test_arc_keeps_a_reused_copy_where_lru_drops_it() -> None:
    """vLLM's ARC CPU policy (MV17): a copy read again (found held by a later request) moves to
    the frequent list, and a store's room is taken from the recent list first, so the reused
    copy outlives newer once-used ones; LRU drops it as the least recently used."""
    ops = (
        *turn(0, "a", "s", "A", 4),  # a0 stored (recent list)
        {"op": "append", "t": 1, "ctx": "a", "messages": [msg("A2", 2)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},  # a0 held: reused, to the frequent
        *turn(2, "b", "s", "B", 4),
        *turn(3, "c", "s", "C", 4),  # the copy tier (3) is full: a0 | b0 c0
        *turn(4, "d", "s", "D", 4),
    )
    cfg = _copy_tier_cfg(16, 3)
    assert _copy_log("vllm-offload-arc", cfg, *ops)[13] == ["drop b0 room", "copy d0 written"]
    assert _copy_log("vllm-offload", cfg, *ops)[13] == ["drop a0 room", "copy d0 written"]


def test_the_oracle_follows_movement_written_as_code() -> None:
    """A reference whose demotion is code (``demote_to`` overridden, asked per victim) moves in
    the oracle as it does in the engine: its own logs are OK, and a log without its demotions
    is ILLEGAL."""

    class DemoteDeep(LRUDemote):
        name: ClassVar[str] = "test-demote-deep"
        demotes: ClassVar[frozenset[BlockClass]] = frozenset()

        def demote_to(self, view: ModelView, victim: BlockInfo) -> TierName | None:
            return TierName("cpu") if victim.depth >= 1 else None

    pol = DemoteDeep()
    assert moves(pol)
    demoted = 0
    for tr, cfg in _pressure_traces(10):
        log = [observation_to_json(o) for o in replay(tr, DemoteDeep(), cfg).engine.log]
        demoted += sum(r["kind"] == "copy" for r in log)
        assert check_log(tr, log, DemoteDeep(), cfg, complete=True, shorten=False).verdict == "OK"
        if any(r["kind"] == "copy" for r in log):
            bare = [r for r in log if r["kind"] != "copy"]
            v = check_log(tr, bare, DemoteDeep(), cfg, complete=True, shorten=False)
            assert v.verdict == "ILLEGAL"
    assert demoted > 0
