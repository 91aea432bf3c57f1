"""Search power (spec/invariants.md §Counterexamples): swarm configurations, the random-walk
explorer, pressure and coverage, and the CLI's budget and parallelism."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import attrs
import numpy as np
import pytest
from hypothesis import given, settings

from checkers.invariants import INVARIANTS, Monitor
from checkers.invariants.predicates import ORDER, _ordered, contested
from checkers.invariants.replay import check_ops, engine_for
from checkers.search.coverage import SearchStats, at_deadlines
from checkers.search.driver import search
from checkers.search.outside_mutants import OUTSIDE_MUTANTS, SCOPE_NEEDED
from checkers.search.scope import (
    CROWD,
    DEFAULT_SCOPE,
    TIER_BLOCKS,
    WIDE_EVERY,
    WIDE_TIER_BLOCKS,
    WalkScope,
)
from checkers.search.shrink import shrink_clock, shrink_scale
from checkers.search.swarm import BLOCK_SIZES, check_config, draw_config, swarm_configs
from checkers.search.walk import (
    CLOCK_SCALES,
    TOKEN_SCALES,
    WalkFind,
    explore,
    run_walk,
    walk_recipe,
)
from kvmodel.cli import main
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import ConfigError
from kvmodel.ids import BlockId, ContextId, MessageId, SessionId, TierName
from kvmodel.io.observations import InferObs
from kvmodel.io.trace import (
    OP_NAMES,
    Append,
    Infer,
    Op,
    Open,
    Pin,
    Remove,
    Trace,
    TraceHeader,
    carried_messages,
    dump_trace,
    dumps_op,
    op_name,
    scaled_clock,
)
from kvmodel.lifecycle import BlockClass
from kvmodel.memory import TierConfig
from kvmodel.messages import AgentKind, Message, MessageKind, Role
from kvmodel.policy import claimed_invariants, resolve_policy
from kvmodel.view import BlockInfo, ModelView
from kvmodel.workloads.random_ops import OP_WEIGHTS, RandomParams, random_trace
from policies.lru import LRU

#: every walk narrow: the scope every walk had before one in four became wide
NARROW = WalkScope(tier_blocks=TIER_BLOCKS)


def test_the_swarm_spans_block_sizes_tier_counts_and_wear() -> None:
    rng = np.random.default_rng(0)
    cfgs = [draw_config(rng) for _ in range(300)]
    assert {c.block_size for c in cfgs} == set(BLOCK_SIZES)
    assert {len(c.tiers) for c in cfgs} == {1, 2, 3}
    assert {t.blocks for c in cfgs for t in c.tiers} == set(range(2, 17))
    assert all(c.tiers[0].pe_cycles is None for c in cfgs)  # the first tier is HBM
    assert {t.pe_cycles for c in cfgs for t in c.tiers[1:]} == {3, 1_000, 100_000}
    # seeded: the same generator state gives the same engines
    again = np.random.default_rng(0)
    assert [draw_config(again) for _ in range(300)] == cfgs


@settings(max_examples=50)
@given(swarm_configs())
def test_every_swarm_config_is_a_valid_engine(cfg: EngineConfig) -> None:
    assert 1 <= len(cfg.tiers) <= 3
    run = check_ops(random_trace(RandomParams(seed=1, ops=30)).ops, "kvtether", cfg, INVARIANTS)
    assert run.trace_error is None
    # kvtether keeps its claims on every engine of the swarm
    claimed = {v.invariant for v in run.violations} & set(
        claimed_invariants(resolve_policy("kvtether"))
    )
    assert not claimed, run.violations


def test_op_weights_name_every_op_and_switch_ops_off() -> None:
    assert tuple(OP_WEIGHTS) == OP_NAMES
    off = ("fork", "remove", "return", "close", "end_session", "unpin")
    tr = random_trace(RandomParams(seed=5, ops=300, weights=tuple((o, 0.0) for o in off)))
    seen = Counter(op_name(op) for op in tr.ops)
    assert not set(off) & set(seen)
    assert min(seen["infer"], seen["append"], seen["pin"]) > 0
    with pytest.raises(ValueError, match="weights"):
        RandomParams(weights=(("frobnicate", 1.0),))
    with pytest.raises(ValueError, match="weights"):
        RandomParams(weights=(("infer", -1.0),))


def test_a_default_trace_is_drawn_as_before_weights_existed() -> None:
    # the default mix keeps its draws, so seeded traces in tests and bundles stay what they
    # were (the digest is of this trace as generated before op weights existed)
    tr = random_trace(RandomParams(seed=57338, ops=200))
    assert not {"weights", "mean_gap"} & set(tr.header.meta)
    text = "\n".join(dumps_op(op) for op in tr.ops).encode()
    assert hashlib.sha256(text).hexdigest() == (
        "cdd7aa4855c001d7376fe1f8542cad6f44aa51bd07b43ede2121a604d447c681"
    )


def test_a_context_cap_compacts_down_to_half_of_it() -> None:
    # no random edits: every remove is a compaction, and it happens at the cap, to half of it
    cap = 40
    off = (("remove", 0.0), ("close", 0.0), ("return", 0.0), ("end_session", 0.0))
    tr = random_trace(RandomParams(seed=3, ops=400, max_context_tokens=cap, weights=off))
    assert tr.header.meta["max_context_tokens"] == cap
    assert "max_context_tokens" not in random_trace(RandomParams(seed=3, ops=5)).header.meta
    engine = Engine(check_config(), resolve_policy("lru"))
    compactions = 0
    for op in tr.ops:
        if isinstance(op, Append):
            assert engine.contexts[op.ctx].total_tokens < cap
            assert all(m.tokens <= cap // 4 for m in op.messages)
        was = engine.contexts[op.ctx].total_tokens if isinstance(op, Remove) else 0
        engine.apply(op)
        if isinstance(op, Remove):
            compactions += 1
            assert was >= cap >= 2 * engine.contexts[op.ctx].total_tokens
    assert compactions >= 10
    with pytest.raises(ValueError, match="max_context_tokens"):
        RandomParams(max_context_tokens=1)


def test_a_system_prompt_opens_contexts_and_is_shared() -> None:
    tr = random_trace(RandomParams(seed=4, ops=300, p_system=1.0))
    assert tr.header.meta["p_system"] == 1.0
    assert "p_system" not in random_trace(RandomParams(seed=4, ops=5)).header.meta
    opens = [i for i, op in enumerate(tr.ops) if isinstance(op, Open)]
    prompts = [tr.ops[i + 1] for i in opens if i + 1 < len(tr.ops)]
    assert len(prompts) >= 10
    for i, op in zip(opens, prompts, strict=False):
        # each opened context's next op: its system prompt, at the same time
        opened = tr.ops[i]
        assert isinstance(op, Append)
        assert isinstance(opened, Open)
        assert (op.ctx, op.t) == (opened.ctx, opened.t)
        (m,) = op.messages
        assert m.kind is MessageKind.SYSTEM
        assert m.hash in {"system-0", "system-1", "system-2"}
    hashes = {(m.hash, m.tokens) for op in prompts if isinstance(op, Append) for m in op.messages}
    assert len(hashes) <= 3
    with pytest.raises(ValueError, match="p_system"):
        RandomParams(p_system=1.5)


def test_walks_land_ops_on_ttl_pin_deadlines() -> None:
    """A pin that ends one op late differs from one that ends on time only at an op exactly on
    its deadline, which a clock drawn from a continuous distribution never meets (one op in 200
    walks did, before): a swarm walk may aim its ops at the nearest deadline ahead."""
    off = random_trace(RandomParams(seed=7, ops=300, p_ttl=1.0))
    on = random_trace(RandomParams(seed=7, ops=300, p_ttl=1.0, p_deadline=0.5))
    assert at_deadlines(off.ops) == 0
    assert at_deadlines(on.ops) >= 20
    assert on.header.meta["p_deadline"] == 0.5
    assert "p_deadline" not in off.header.meta
    assert all(a.t <= b.t for a, b in itertools.pairwise(on.ops))
    # no draw is spent on deadlines before the first TTL pin
    first = next(i for i, op in enumerate(off.ops) if isinstance(op, Pin) and op.ttl is not None)
    assert on.ops[: first + 1] == off.ops[: first + 1]
    # the engine reads the same float: at an op on a deadline, that pin has ended
    engine = Engine(EngineConfig(4, (TierConfig(TierName("hbm"), 64),)), resolve_policy("lru"))
    ends: dict[float, list[tuple[ContextId, int]]] = {}
    checked = 0
    for op in on.ops:
        engine.apply(op)  # (pins due at or before op.t end before the op: spec P6)
        for cid, uid in ends.pop(op.t, []):
            c = engine.contexts.get(cid)
            if c is not None and c.is_open and uid in c.messages_by_uid:
                assert c.pin_deadline.get(uid) != op.t  # ended (or pinned again, for later)
                checked += 1
        if isinstance(op, Pin) and op.deadline is not None:
            c = engine.contexts[op.ctx]
            pinned = [u for u, d in c.pin_deadline.items() if d == op.deadline]
            ends.setdefault(op.deadline, []).extend((op.ctx, u) for u in pinned)
    assert checked >= 10
    # seed 0's 50 walks (the dev profile's): most draw landings, and ops meet deadlines
    landing = [walk_recipe(0, i)[1].p_deadline for i in range(50)]
    assert 0.0 in landing
    assert sum(p > 0 for p in landing) >= 25
    walks = [random_trace(walk_recipe(0, i)[1]).ops for i in range(50)]
    assert sum(at_deadlines(ops) for ops in walks) >= 40
    # an op after one on a deadline (off the 3-decimal grid) with no time between them: the
    # clock is rounded, and must not run back (the engine refuses such a trace)
    assert all(a.t <= b.t for ops in walks for a, b in itertools.pairwise(ops))
    with pytest.raises(ValueError, match="p_deadline"):
        RandomParams(p_deadline=1.5)


def test_a_walk_the_model_refuses_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A walk is valid input by construction: if the engine refuses one of its ops (a bug in the
    generator, or in the engine under test), the search fails saying which walk and op, rather
    than checking the walk's prefix and going on in silence."""
    import checkers.search.walk as walk_module
    from checkers.invariants.replay import CheckRun, RefusedTraceError
    from kvmodel.errors import TraceError

    def backwards(params: RandomParams) -> Trace:
        tr = random_trace(params)
        return attrs.evolve(tr, ops=(*tr.ops[:3], attrs.evolve(tr.ops[3], t=-1.0), *tr.ops[4:]))

    monkeypatch.setattr(walk_module, "random_trace", backwards)
    with pytest.raises(RefusedTraceError, match=r"walk 2 of seed 0 under lru: op 3 .* time went"):
        run_walk("lru", list(INVARIANTS), 0, 2, None)
    # the trace-level search (offline policies) the same: a refusal is not read as a find
    import checkers.search.driver as driver_module

    def refusing(ops: list[Op], *args: object, **kwargs: object) -> CheckRun:
        run = check_ops(ops, *args, **kwargs)  # type: ignore[arg-type]
        return attrs.evolve(run, applied=0, trace_error=TraceError("planted", field="t"))

    # ... and in the search itself it is the checker's error, reported beside what was found
    # (issue 57: it once ended `kvmodel check` with no table)
    monkeypatch.setattr(driver_module, "check_ops", refusing)
    r = search("belady", ["no-zombie-kv"], max_examples=3, steps=5, walks=0)
    assert len(r.checker_errors) == 1
    assert r.checker_errors[0].startswith("the trace search: RefusedTraceError: a generated trace")
    assert "under belady: op 0" in r.checker_errors[0]


def test_capped_walks_trade_rejections_for_evictions() -> None:
    # the search's walks cap a context at a multiple of the engine's capacity (or not at all):
    # uncapped, the swarm's small engines (narrow walks') reject most inferences and few walks
    # evict
    def totals(capped: bool) -> tuple[float, int]:
        rejected = infers = evicting = 0
        for i in range(60):
            cfg, p = walk_recipe(0, i, None, NARROW)
            p = attrs.evolve(p, crowd=0)  # (the walk's own contexts: a crowd is not capped)
            if not capped:
                p = attrs.evolve(p, max_context_tokens=None)
            stats = check_ops(random_trace(p).ops, "kvtether", cfg, ()).engine.stats
            rejected, infers = rejected + stats.rejected, infers + stats.infers
            evicting += sum(stats.evictions.values()) > 0
        return rejected / (rejected + infers), evicting

    # measured: 27% of inferences rejected and 21 walks of 60 evicting, against 66% and 8
    (rejected, evicting), (rejected0, evicting0) = totals(True), totals(False)
    assert rejected < 0.6 * rejected0
    assert evicting > 2 * evicting0


def test_a_walk_replays_on_its_own() -> None:
    a = run_walk("kvtether", tuple(INVARIANTS), 3, 7, None)
    b = run_walk("kvtether", tuple(INVARIANTS), 3, 7, None)
    assert a == b
    cfg, params = walk_recipe(3, 7)
    assert cfg == walk_recipe(3, 7)[0]
    assert params.weights is not None
    assert walk_recipe(3, 7, check_config())[0] == check_config()


def test_jobs_change_speed_not_finds() -> None:
    def finds(jobs: int) -> list[WalkFind]:
        out: list[WalkFind] = []
        explore(
            "checkers.search.mutants:FreesSharedAtReturn", INVARIANTS, seed=1, walks=24, jobs=jobs,
            on_find=out.append,
        )  # fmt: skip
        return out

    one, two = finds(1), finds(2)
    assert one == two
    # walks 1, 4 and 21 catch it (only 21 before walks were capped to the engine)
    assert [f.walk for f in one if f.invariant == "reclaim-dead-only"] == [1, 4, 21]


def test_walks_put_pressure_on_every_trigger() -> None:
    st = explore("kvtether", INVARIANTS, seed=0, walks=60)
    assert st.walks == 60
    for k in ("evictions", "evict:suspended", "evict:dead", "rejections", "spills", "reclaims"):
        assert st.coverage[k] > 0, k
    for k in ("temporaries", "bypasses", "worn tiers"):
        assert st.coverage[k] > 0, k
    assert st.coverage["tiers>1"] < st.coverage["runs"] == 60  # one-tier engines are drawn too
    assert not st.unexercised(INVARIANTS)
    assert not [n for n in st.never_fired() if n.startswith("op:")]


def test_the_coverage_counts_the_most_contexts_open_at_once() -> None:
    # a magnitude a policy's table reads (a slot per agent in flight): the most contexts open
    # at once in any run, counted by the monitor after each open and fork; here recounted by
    # replaying each walk op by op. Walks open at most 6 contexts at once (RandomParams.max_open
    # is drawn from 1-6), and the coverage line says so
    most: list[int] = []
    crowded: list[int] = []
    for i in range(12):
        cfg, params = walk_recipe(0, i)
        ops = random_trace(params).ops
        engine = Engine(cfg, resolve_policy("lru"))
        n = 0
        for op in ops:
            engine.apply(op)
            n = max(n, sum(1 for c in engine.contexts.values() if c.is_open))
        (crowded if params.crowd else most).append(n)
        assert run_walk("lru", (), 0, i, None).coverage["most open"] == n
    assert 1 < max(most) <= 6 < 40 < min(crowded)  # (a crowd's agents stay open to the end)
    st = explore("lru", (), walks=12)
    assert st.coverage["most open"] == max(crowded)  # (a maximum over the runs, not a sum)
    assert f"up to {max(crowded)} contexts open at once" in st.coverage_line()


def test_crowded_walks_reach_a_slot_table_the_walks_own_contexts_miss() -> None:
    # KVTether keeping suspension times in a table of 32 slots, one per agent in flight: a
    # walk's own contexts number at most 6, the machine's examples 26, and none catches it;
    # one walk in eight draws a crowd of 40 background agents (last: the walk's own ops are
    # what they were) and those catch it (spec/invariants.md, swarm testing)
    assert {walk_recipe(0, i)[1].crowd for i in range(40)} == {0, CROWD} == {0, 40}
    mutant = "checkers.search.outside_mutants:SlotTableTether"
    inv = [OUTSIDE_MUTANTS[mutant]]
    finds: list[WalkFind] = []
    stats = explore(mutant, inv, walks=40, on_find=finds.append)
    assert finds
    assert all(walk_recipe(0, f.walk)[1].crowd for f in finds)
    assert stats.coverage["most open"] > 32
    for i in range(40):  # the same walks without their crowd: none fails, their own ops stand
        cfg, params = walk_recipe(0, i)
        alone = random_trace(attrs.evolve(params, crowd=0)).ops
        assert random_trace(params).ops[3 * params.crowd :] == alone
        run = check_ops(alone, mutant, cfg, inv)
        assert run.first(inv[0]) is None
    # the find has more agents open than the table has slots (the zoo's test shrinks it)
    assert sum(isinstance(o, Open) for o in finds[0].ops) > 32


def test_a_larger_crowd_reaches_a_table_the_default_crowd_misses() -> None:
    # the same slot table with 128 slots: the default crowd of 40 (45 contexts open at most)
    # misses it, a crowd of 160 (kvmodel check --crowd 160, the scope it is kept with) finds
    # it; a walk differs between crowd sizes by its crowd alone, and --crowd 0 draws none
    mutant = "checkers.search.outside_mutants:WideSlotTableTether"
    assert SCOPE_NEEDED[mutant] == WalkScope(crowd=160)
    short, finds = _missed_then_found(mutant, walks=16)
    assert 40 < short.coverage["most open"] <= 128
    assert [f.walk for f in finds] == [11]  # (seed 0: the one crowded walk of the 16)
    assert sum(isinstance(o, Open) for o in finds[0].ops) > 128
    for i in range(16):
        cfg, params = walk_recipe(0, i)
        wide_cfg, wide = walk_recipe(0, i, scope=SCOPE_NEEDED[mutant])
        assert wide_cfg == cfg
        assert wide == (attrs.evolve(params, crowd=160) if params.crowd else params)
        assert not walk_recipe(0, i, scope=WalkScope(crowd=0))[1].crowd
    with pytest.raises(ConfigError, match="crowd"):
        WalkScope(crowd=-1)


def test_a_swarm_find_carries_the_engine_it_fails_on() -> None:
    mutant = "checkers.search.mutants:FreesSharedAtReturn"
    r = search(
        mutant, ["reclaim-dead-only"], max_examples=5, steps=10, seed=1, walks=24,
        hypothesis_shrink=False,
    )  # fmt: skip
    c = r.found["reclaim-dead-only"]
    again = check_ops(c.ops, mutant, c.config, ["reclaim-dead-only"])
    assert again.first("reclaim-dead-only") == c.violation
    assert c.one_minimal
    assert r.stats.walks == 24
    assert r.stats.examples >= 5


def test_the_machine_targets_pressure_and_counts_what_it_did() -> None:
    r = search("kvtether", INVARIANTS, max_examples=20, steps=15, hypothesis_shrink=False)
    st: SearchStats = r.stats
    assert st.walks == 0
    assert st.examples >= 20
    assert min(st.coverage["evictions"], st.coverage["spills"]) > 0
    assert st.coverage["runs"] == st.examples
    line = st.coverage_line()
    assert line.startswith("coverage: evictions ")
    assert "multi-tier runs" in line


def test_check_cli_budget_walks_and_jobs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from checkers.search.bundle import config_to_toml

    base = ["check", "kvtether", "--invariants", "no-zombie-kv", "--max-examples", "3", "-v"]
    walks = ["--steps", "5", "--walks", "16", "-j", "2", "--walk-ops", "300", "--tier-blocks", "64"]
    assert main([*base, *walks]) == 0
    out = capsys.readouterr().out
    for text in (
        "16 random walks (up to 300 ops, tiers of up to 16 blocks, up to 64 in one walk in 4, "
        "a crowd of 40 agents in one walk in 8)",
        "coverage: evictions",
        "ops applied:",
    ):
        assert text in out
    assert main([*base, "--steps", "5", "--walks", "0", "--budget", "1s"]) == 0
    assert f"random walks ({WalkScope().describe()})" in capsys.readouterr().out
    assert main([*base, "--steps", "5", "--walks", "2", "--crowd", "0"]) == 0
    assert (
        "2 random walks (up to 120 ops, tiers of up to 16 blocks, up to 128 in one walk in 4, "
        "no crowds)" in capsys.readouterr().out
    )
    (tmp_path / "c.toml").write_text(config_to_toml(check_config()))
    config = ["--config", str(tmp_path / "c.toml")]
    for bad in (
        ["--budget", "soon"],
        ["--budget=-3s"],
        ["-j", "0"],
        ["--walk-ops", "0"],
        ["--tier-blocks", "1"],
        ["--crowd=-1"],
        ["--crowd", "1025"],
        ["--tier-blocks", "32", *config],  # the walks draw their engines, or --config fixes one
    ):
        assert main([*base, *bad]) == 2
        assert "error" in capsys.readouterr().err.lower()


def test_replay_check_reports_a_nondeterministic_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from checkers.search.bundle import config_to_toml

    trace = tmp_path / "t.jsonl"
    cfg = tmp_path / "c.toml"
    dump_trace(random_trace(RandomParams(seed=0, ops=60)), trace)
    cfg.write_text(config_to_toml(check_config()))
    args = ["replay", str(trace), "--config", str(cfg), "--check", "accounting"]
    assert main([*args, "--policy", "lru"]) == 0
    # what the replay exercised (as a search reports it); what the self-checks compared
    # (contract.whole_state_due): the first 16 ops and every fourth after, following; every op
    # on ample memory, where at most 256 blocks are resident
    lines = capsys.readouterr().out.splitlines()
    # each pass's CPU time, last (the optional ones may be skipped: below)
    assert re.fullmatch(r"passes \(CPU s\): monitor [\d.]+, nondeterminism [\d.]+, "
                        r"ample-contract [\d.]+", lines.pop()), lines  # fmt: skip
    assert lines == [
        "0 violated, 1 held over 60 ops: accounting",
        "coverage: evictions 4 (dead 4), the widest choosing among 8 blocks, rejections 11, "
        "spills 13, reclaims 0, temporaries 7, bypasses 0, prompts of up to 124 tokens, chains "
        "of up to 10 blocks, a clock of up to 45 s, up to 2 contexts open at once, forks 1, pins "
        "3 (0 ops at a TTL deadline), worn tiers 1, multi-tier runs 1/1",
        "engine-contract compared every op's figures and message states; the whole state:",
        "  following the engine: after 27 of 60 ops",
        "  on ample memory under lru: after 60 of 60 ops (up to 93 resident blocks)",
        "  on ample memory under kvtether: after 60 of 60 ops (up to 46 resident blocks)",
    ]
    assert main([*args, "--policy", "lru", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["ops"], out["never_exercised"]) == (60, [])
    assert out["engine_contract"] == {
        "followed": {"ops": 60, "whole_state": 27},
        "ample": {
            "lru": {"ops": 60, "whole_state": 60, "widest": 93},
            "kvtether": {"ops": 60, "whole_state": 60, "widest": 46},
        },
    }
    assert sorted(out["passes"]) == ["ample-contract", "monitor", "nondeterminism"]
    assert all(p["cpu_seconds"] >= 0 for p in out["passes"].values())
    # a long trace may skip the optional passes: the report says what was not looked for, and
    # a nondeterministic policy then goes unreported (exit 0: nothing found is not clean)
    nondet = "checkers.search.mutants:SharedCursorLRU"
    skip = ["--skip", "nondeterminism,ample-contract"]
    assert main([*args, "--policy", nondet, *skip]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  on ample memory: skipped (--skip ample-contract)" in lines
    warned = "warning: pass nondeterminism skipped (--skip): not looked for: a policy or engine"
    assert any(ln.startswith(warned) for ln in lines), lines
    assert re.fullmatch(r"passes \(CPU s\): monitor [\d.]+", lines[-1]), lines
    assert main([*args, "--policy", nondet, *skip, "--json"]) == 0
    passes = json.loads(capsys.readouterr().out)["passes"]
    assert passes["nondeterminism"]["skipped"] is True
    assert "engine-contract" in passes["ample-contract"]["would_find"]
    assert main([*args[:-2], "--skip", "nondeterminism"]) == 2  # (--skip without --check)
    assert "give --check too" in capsys.readouterr().err
    assert main([*args, "--skip", "bogus"]) == 2
    assert "unknown pass 'bogus'" in capsys.readouterr().err
    assert main([*args, "--policy", "checkers.search.mutants:SharedCursorLRU"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED nondeterministic at op 54: two replays of the same trace differ" in out
    # an invariant whose trigger never happened held vacuously, and the report says so
    empty = tmp_path / "empty.jsonl"
    dump_trace(Trace(TraceHeader(), ()), empty)
    assert main(["replay", str(empty), "--check", "accounting,suspended-mru"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "0 violated, 2 held over 0 ops: accounting, suspended-mru"
    assert lines[2] == (
        "warning: suspended-mru never exercised: no eviction it constrained (each chose among "
        "blocks it does not order)"
    )


def test_replay_check_draws_progress_on_a_terminal_only(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    progress_seen: Callable[[ModuleType], Any],  # (conftest.ProgressSeen)
) -> None:
    import sys

    import checkers.cli.check as check_cli

    trace = tmp_path / "t.jsonl"
    dump_trace(random_trace(RandomParams(seed=0, ops=60)), trace)
    args = ["replay", str(trace), "--check", "accounting"]
    assert main(args) == 0
    assert capsys.readouterr().err == ""  # a pipe gets no progress
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    seen = progress_seen(check_cli)
    assert main(args) == 0
    # every op of each pass: the monitored replay, three replays, two self-checks
    assert Counter(seen.ticks) == {
        "monitor": 60,
        "nondeterministic": 180,
        "engine-contract under lru on ample memory": 60,
        "engine-contract under kvtether on ample memory": 60,
    }
    assert "replay --check" in capsys.readouterr().err  # drawn, on what claims to be a terminal
    assert main([*args, "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_generate_reaches_every_op_kind(tmp_path: Path) -> None:
    from kvmodel.io.trace import load_trace

    out = tmp_path / "r.jsonl"
    assert main(["generate", "--random-ops", "400", "--seed", "3", "-o", str(out)]) == 0
    seen = {op_name(op) for op in load_trace(out).ops}
    assert seen == set(OP_NAMES)
    assert main(["generate", "--random-ops", "0"]) == 2


@attrs.frozen
class _Candidate:
    """The terms an eviction-order predicate reads of one candidate block."""

    id: BlockId
    state: BlockClass
    suspend_time: float | None = None


def test_an_eviction_constrains_an_order_only_between_blocks_it_orders() -> None:
    s1, s2 = (
        _Candidate(BlockId(1), BlockClass.SUSPENDED, 1.0),
        _Candidate(BlockId(2), BlockClass.SUSPENDED, 2.0),
    )
    same = _Candidate(BlockId(3), BlockClass.SUSPENDED, 1.0)
    dead, active = (
        _Candidate(BlockId(4), BlockClass.DEAD),
        _Candidate(BlockId(5), BlockClass.ACTIVE),
    )
    mru, prio = "suspended-mru", "state-priority-eviction"
    dead_first = "no-live-eviction-before-dead-reclaim"
    assert not contested([mru], s1, [s1, same])  # one suspension time: no MRU decision
    assert contested([mru], s1, [s2]) == [mru]  # either way round: a decision it orders
    assert contested([mru], s2, [s1]) == [mru]
    assert not contested([prio], s1, [s2, same])
    assert contested([prio], active, [s1]) == [prio]
    assert not contested([dead_first], active, [s1])
    assert contested([dead_first], active, [dead]) == [dead_first]
    assert contested([dead_first], dead, [active]) == [dead_first]
    # several at once, in the order asked: each as it is alone
    every = [dead_first, prio, mru]
    assert contested(every, s1, [s2]) == [mru]  # one class: the priority puts no order to it
    assert contested(every, active, [dead, s1]) == [dead_first, prio]
    assert contested(every[::-1], active, [dead, s1]) == [prio, dead_first]


def test_contested_reads_one_pair_of_each_class_and_agrees_with_every_pair() -> None:
    # contested evaluates ORDER on one representative pair per (state, state, how the
    # suspension times compare), not on every pair of distinct terms: the same answer on 3,000
    # random evictions (seeded), among them crowds of distinct suspension times
    rng = np.random.default_rng(7)
    classes = list(BlockClass)
    seen = Counter[bool]()
    for _ in range(3000):
        n = int(rng.integers(1, 9))
        spread = int(rng.choice([1, 2, 3, 50]))
        blocks = []
        for i in range(n):
            state = classes[int(rng.integers(0, len(classes)))]
            t = None if rng.random() < 0.3 else float(rng.integers(0, spread))
            blocks.append(_Candidate(BlockId(i), state, t))
        terms = {(b.state, b.suspend_time) for b in blocks}
        names = list(ORDER)
        asked = contested(names, blocks[0], blocks[1:])
        for name in names:
            every = any(_ordered(name, a, b) for a in terms for b in terms if a != b)
            assert (name in asked) == every, (name, terms)
            assert (contested([name], blocks[0], blocks[1:]) == [name]) == every
            seen[every] += 1
    assert min(seen.values()) > 1000  # both answers, many times


def test_an_order_no_eviction_constrained_is_reported_unexercised() -> None:
    # two contexts suspended at the same time fill memory, a third evicts two of their blocks:
    # evictions happen, but among Suspended blocks of one suspension time, so neither MRU nor
    # the class order is put to the test
    c1, c2, c3 = ContextId("c1"), ContextId("c2"), ContextId("c3")
    ops: list[Op] = [Open(0.0, c, SessionId("s"), AgentKind.MAIN) for c in (c1, c2, c3)]
    for i, c in enumerate((c1, c2, c3)):
        ops.append(Append(0.0, c, (Message(MessageId(f"m{i}"), Role.USER, MessageKind.USER, 8),)))
    ops += [Infer(1.0, c1, (), 0.5), Infer(1.0, c2, (), 0.5), Infer(2.0, c3, (), 0.5)]
    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), 4),))
    run = check_ops(ops, "kvtether", cfg, INVARIANTS)
    assert run.trace_error is None
    assert not run.violations
    st = SearchStats()
    st.observe(run.engine, ops)
    assert st.coverage["evictions"] == 2
    assert st.coverage["contested:suspended-mru"] == 0
    warnings = " ".join(st.unexercised(INVARIANTS))
    assert "suspended-mru never exercised: no eviction it constrained" in warnings
    assert "state-priority-eviction never exercised" in warnings
    # c2 suspended after c1 makes the same evictions MRU decisions
    ops[7] = attrs.evolve(ops[7], t=1.2)
    st = SearchStats()
    st.observe(check_ops(ops, "kvtether", cfg, INVARIANTS).engine, ops)
    assert st.coverage["contested:suspended-mru"] == 2
    assert "constraining mru 2" in st.coverage_line()


def test_search_draws_do_not_depend_on_the_modules_loaded(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Hypothesis mixes the literals of every loaded local module into its draws; the searches
    (and this suite) pin that pool empty (checkers/search/pool.py). Shown both ways: unpinned,
    importing a module of literals moves a derandomized test's draws; pinned, it does not."""
    import importlib

    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.internal.conjecture import providers

    from checkers.search import pool

    assert pool.PINNED  # the pinned Hypothesis has the pool; a release that renames it fails here

    def draws() -> list[int]:
        seen: list[int] = []

        @settings(max_examples=300, derandomize=True, database=None)
        @given(st.integers(-(10**6), 10**6))
        def t(x: int) -> None:
            seen.append(x)

        t()
        return seen

    def unpinned() -> list[int]:
        with monkeypatch.context() as m:
            m.setattr(providers, "_get_local_constants", pool._HARVEST)
            providers.CONSTANTS_CACHE.cache.clear()
            out = draws()
        providers.CONSTANTS_CACHE.cache.clear()
        return out

    pinned_before, unpinned_before = draws(), unpinned()
    literals = ", ".join(str(1000 + 7 * i) for i in range(300))
    (tmp_path / "kvlits_probe.py").write_text(f"LITERALS = ({literals})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("kvlits_probe")
    assert unpinned() != unpinned_before  # the hazard: a new module's literals moved the draws
    assert draws() == pinned_before  # pinned: the same draws


class _RaisesOnEvict(LRU):
    """A policy whose order raises on every eviction (an outside author's crash)."""

    name: ClassVar[str] = "raises-on-evict"

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        raise RuntimeError("no order")


def test_a_run_stopped_mid_op_stays_stopped() -> None:
    # memory for three blocks: a's two, then b's inference takes the free slot and must evict
    # for its second block -- the policy raises with one of b's blocks already written
    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), 3),))
    engine = engine_for(_RaisesOnEvict(), cfg)
    mon = Monitor(engine, INVARIANTS)

    def say(ctx: str, n: int, mid: str) -> list[Op]:
        c = ContextId(ctx)
        msg = Message(MessageId(mid), Role.USER, MessageKind.INSTRUCTION, n)
        return [Open(0.0, c, SessionId(ctx), AgentKind.MAIN), Append(0.0, c, (msg,))]

    for op in [*say("a", 8, "m1"), Infer(0.0, ContextId("a"), ()), *say("b", 8, "m2")]:
        assert mon.apply(op)
    assert not mon.apply(Infer(1.0, ContextId("b"), ()))
    assert [v.invariant for v in mon.violations] == ["policy-protocol"]
    assert "raised RuntimeError in eviction_order" in mon.violations[0].message
    # the engine stopped in the middle of that inference: a later op is refused unapplied,
    # never checked against a state no trace reaches (where it had been: an engine-contract
    # finding that did not replay, reported as the policy being nondeterministic)
    seen, at = len(engine.log), mon.op_index
    assert not mon.apply(Open(2.0, ContextId("c"), SessionId("c"), AgentKind.MAIN))
    assert (len(engine.log), mon.op_index, len(mon.violations)) == (seen, at, 1)
    assert ContextId("c") not in engine.contexts


def _missed_then_found(
    mutant: str, walks: int, missing: WalkScope = DEFAULT_SCOPE, finding: WalkScope | None = None
) -> tuple[SearchStats, list[WalkFind]]:
    """40 walks of the ``missing`` scope (the default) put ``mutant`` under pressure and find
    nothing (their stats are returned); so are the finds of ``walks`` walks within ``finding``
    (the scope it needs, :data:`SCOPE_NEEDED`)."""
    inv = [OUTSIDE_MUTANTS[mutant]]
    missed: list[WalkFind] = []
    short = explore(mutant, inv, walks=40, scope=missing, on_find=missed.append)
    assert short.coverage["evictions"] > 0  # pressure,
    assert missed == []  # yet nothing found
    finds: list[WalkFind] = []
    scope = finding if finding is not None else SCOPE_NEEDED[mutant]
    explore(mutant, inv, walks=walks, scope=scope, on_find=finds.append)
    return short, finds


def test_clock_scaled_walks_reach_clock_rules_unscaled_walks_miss() -> None:
    # an LRU whose recency wraps every hour, and KVTether sending KV idle for a day ahead of dead
    # KV: no walk at clock scale 1 runs its clock past minutes, and none of these 40 catches
    # either at scale 1; the walks drawn at a clock scale do, and the coverage line says how far
    # the clock ran (spec/invariants.md, swarm testing)
    unscaled = [
        random_trace(attrs.evolve(walk_recipe(0, i)[1], clock_scale=1)).ops for i in range(40)
    ]
    assert max(o.t for ops in unscaled for o in ops) < 3600
    for name, limit in (("HourClockLRU", 3600), ("IdleDayTether", 86_400)):
        mutant = f"checkers.search.outside_mutants:{name}"
        inv = [OUTSIDE_MUTANTS[mutant]]
        finds: list[WalkFind] = []
        stats = explore(mutant, inv, walks=40, on_find=finds.append)
        assert finds, name
        assert all(f.clock_scale == walk_recipe(0, f.walk)[1].clock_scale > 1 for f in finds)
        assert max(o.t for o in finds[0].ops) > limit
        assert stats.coverage["latest clock"] > limit
        assert f"a clock of up to {stats.coverage['latest clock']:,} s" in stats.coverage_line()
        for i, ops in enumerate(unscaled):  # the same walks at scale 1: none fails
            assert check_ops(ops, mutant, walk_recipe(0, i)[0], inv).first(inv[0]) is None
    # the counterexample keeps the clock the fault needs: the hour turns between two uses
    mutant = "checkers.search.outside_mutants:HourClockLRU"
    inv = [OUTSIDE_MUTANTS[mutant]]
    r = search(mutant, inv, max_examples=1, steps=1, walks=40, hypothesis_shrink=False)
    c = r.found[inv[0]]
    assert c.found_by == "walk"
    assert max(o.t for o in c.ops) >= 3600


def test_a_narrow_walk_is_the_same_walk_in_every_scope_of_its_length() -> None:
    # the default's walk 5 is what it was before wide walks and before the options
    scope = WalkScope(ops=2000, tier_blocks=16)
    assert scope.tier_cap(5) == DEFAULT_SCOPE.tier_cap(5) == TIER_BLOCKS
    assert walk_recipe(0, 5) == walk_recipe(0, 5, None, NARROW)
    assert attrs.evolve(walk_recipe(0, 5, None, scope)[1], ops=0) == attrs.evolve(
        walk_recipe(0, 5)[1], ops=0
    )


def test_the_wide_walks_reach_a_bounded_scan_the_narrow_ones_miss() -> None:
    # KVTether with its order over the first 32 candidates: narrow engines hold up to 48
    # blocks, but no eviction of narrow walks chooses among more than 33 (the coverage's widest
    # choice over these 40 walks: 24 before crowds, 33 in the crowded walk 11), and none
    # reaches past the window; the default search's wide walks, one in four, do
    # (spec/invariants.md, the scope)
    mutant = "checkers.search.outside_mutants:WindowedTether"
    short, finds = _missed_then_found(mutant, walks=40, missing=NARROW, finding=DEFAULT_SCOPE)
    assert short.coverage["widest choice"] <= 33
    assert [f.walk for f in finds] == [11, 15, 19, 23, 31, 39]  # (seed 0; 11 crowded too)
    assert all(DEFAULT_SCOPE.tier_cap(f.walk) == WIDE_TIER_BLOCKS for f in finds)


def test_wider_tiers_reach_what_the_default_wide_walks_miss() -> None:
    # an LRU that reads depth from an 8-bit field: its bug needs more than 256 blocks of one
    # context in memory. The default's wide walks choose among up to 308 blocks, yet none keeps
    # a context that deep; walks whose wide tiers hold up to 512 blocks do
    mutant = "checkers.search.outside_mutants:ByteDepthLRU"
    assert SCOPE_NEEDED[mutant] == WalkScope(tier_blocks=512)
    short, finds = _missed_then_found(mutant, walks=40)
    assert short.coverage["widest choice"] > 256
    # the coverage says why: no default walk wrote a chain of more than 256 blocks
    assert 0 < short.coverage["longest chain"] <= 256
    assert f"chains of up to {short.coverage['longest chain']:,} blocks" in short.coverage_line()
    assert [f.walk for f in finds] == [39]  # (seed 0)
    assert sum(t.blocks for t in finds[0].config.tiers) > 256


def test_larger_tiers_reach_what_the_narrow_walks_miss() -> None:
    # an LRU that sorts only the first 64 candidates: no narrow engine holds 64 blocks, while
    # the default's wide walks, on tiers of up to 128 blocks, catch it at the default length
    mutant = "checkers.search.outside_mutants:WindowedLRU"
    assert mutant not in SCOPE_NEEDED
    short, finds = _missed_then_found(mutant, walks=8, missing=NARROW, finding=DEFAULT_SCOPE)
    # the coverage says why: no eviction of the narrow walks chose among more than 64 blocks
    assert 0 < short.coverage["widest choice"] <= 64
    assert f"the widest choosing among {short.coverage['widest choice']} blocks" in (
        short.coverage_line()
    )
    assert [f.walk for f in finds] == [3]  # (seed 0)
    assert all(sum(t.blocks for t in f.config.tiers) > 64 for f in finds)
    # the counterexample's engine is shrunk with its trace: to as few blocks as the bug needs,
    # more than the 64 candidates the order sorts; one block fewer in any tier, or the last
    # tier dropped, and the trace no longer fails
    r = search(mutant, inv := ["prefix-closed-residency"], max_examples=1, steps=1, walks=4,
               hypothesis_shrink=False)  # fmt: skip
    c = r.found[inv[0]]
    assert c.found_by == "walk"
    assert (c.one_minimal, len(c.ops)) == (True, 7)
    assert sum(t.blocks for t in c.config.tiers) > 64
    assert sum(t.blocks for t in c.config.tiers) < sum(t.blocks for t in finds[0].config.tiers)
    assert check_ops(c.ops, mutant, c.config, inv).first(inv[0]) == c.violation
    smaller = [attrs.evolve(c.config, tiers=c.config.tiers[:-1])] if len(c.config.tiers) > 1 else []
    for i, t in enumerate(c.config.tiers):
        if t.blocks > 1:
            tiers = list(c.config.tiers)
            tiers[i] = attrs.evolve(t, blocks=t.blocks - 1)
            smaller.append(attrs.evolve(c.config, tiers=tuple(tiers)))
    assert smaller
    for cfg in smaller:
        assert check_ops(c.ops, mutant, cfg, inv).first(inv[0]) is None
    # a wide walk draws the engine its narrow self would, its tiers larger, and the same walk
    # but for the context cap, a share of the engine's capacity; a narrow walk is the same
    for i in range(20):
        (a, pa), (b, pb) = walk_recipe(0, i, None, NARROW), walk_recipe(0, i)
        if i % WIDE_EVERY != WIDE_EVERY - 1:
            assert (a, pa) == (b, pb)
            continue
        assert (a.block_size, a.model) == (b.block_size, b.model)
        assert [attrs.evolve(t, blocks=2) for t in a.tiers] == [
            attrs.evolve(t, blocks=2) for t in b.tiers
        ]
        assert all(ta.blocks <= tb.blocks <= 128 for ta, tb in zip(a.tiers, b.tiers, strict=True))
        assert attrs.evolve(pa, max_context_tokens=None) == attrs.evolve(
            pb, max_context_tokens=None
        )


def _scaled_walks(n: int) -> list[int]:
    return [i for i in range(n) if walk_recipe(0, i)[1].token_scale > 1]


def test_a_token_scaled_walk_is_the_same_walk_block_for_block() -> None:
    # two walks in three are drawn at a token scale, last (every earlier draw is as before):
    # their token counts and block size multiplied by one factor, so a message boundary falls
    # in the same block and the engine does the same thing to the same blocks; only what reads
    # token counts sees a difference (spec/invariants.md, swarm testing)
    scales = Counter(walk_recipe(0, i)[1].token_scale for i in range(60))
    assert set(scales) == set(TOKEN_SCALES) == {1, 16, 256}
    for i in _scaled_walks(12):
        cfg, params = walk_recipe(0, i)
        k = params.token_scale
        small_cfg = attrs.evolve(cfg, block_size=cfg.block_size // k)
        small = attrs.evolve(params, token_scale=1)
        assert walk_recipe(0, i, cfg)[1].token_scale == 1  # (a fixed engine keeps its scale)
        big_ops, small_ops = random_trace(params).ops, random_trace(small).ops
        assert [type(o) for o in big_ops] == [type(o) for o in small_ops]
        assert sum(m.tokens for o in big_ops for m in carried_messages(o)) == k * sum(
            m.tokens for o in small_ops for m in carried_messages(o)
        )
        big_run = check_ops(big_ops, "lru", cfg, ())
        small_run = check_ops(small_ops, "lru", small_cfg, ())

        def shape(run: object) -> list[tuple[object, ...]]:
            log = run.engine.log  # type: ignore[attr-defined]
            return [
                (type(r).__name__, *(getattr(r, f, None) for f in ("block", "depth", "tier")))
                for r in log
            ]

        assert shape(big_run) == shape(small_run)
        assert big_run.engine.stats.evictions == small_run.engine.stats.evictions
        assert big_run.engine.stats.prompt_tokens == k * small_run.engine.stats.prompt_tokens


def test_a_clock_scaled_walk_is_the_same_walk_op_for_op() -> None:
    # two walks in three are drawn at a clock scale, last: every time multiplied by a power of
    # two, exactly, so every comparison of times -- deadlines, landings, suspensions -- comes
    # out as at scale 1 and the engine does the same thing to the same blocks; only what reads
    # a time's magnitude sees a difference (MORI's 600-second window)
    scales = Counter(walk_recipe(0, i)[1].clock_scale for i in range(60))
    assert set(scales) == set(CLOCK_SCALES) == {1, 64, 4096}
    fixed = walk_recipe(0, 0)[0]  # (a fixed engine's walks are drawn at a clock scale too)
    assert {walk_recipe(0, i, fixed)[1].clock_scale for i in range(30)} == set(CLOCK_SCALES)
    mori_differs = 0
    for i in [i for i in range(24) if walk_recipe(0, i)[1].clock_scale > 1]:
        cfg, params = walk_recipe(0, i)
        k = params.clock_scale
        big_ops = random_trace(params).ops
        small_ops = random_trace(attrs.evolve(params, clock_scale=1)).ops
        assert big_ops == tuple(scaled_clock(o, k) for o in small_ops)
        assert [scaled_clock(o, 1 / k) for o in big_ops] == list(small_ops)  # (exact)

        def shape(run: object) -> list[tuple[object, ...]]:
            log = run.engine.log  # type: ignore[attr-defined]
            return [
                (type(r).__name__, *(getattr(r, f, None) for f in ("block", "depth", "tier")))
                for r in log
            ]

        for policy in ("lru", "kvtether"):
            big_run = check_ops(big_ops, policy, cfg, ())
            small_run = check_ops(small_ops, policy, cfg, ())
            assert shape(big_run) == shape(small_run), (i, policy)
            assert big_run.engine.stats.evictions == small_run.engine.stats.evictions
            assert at_deadlines(big_ops) == at_deadlines(small_ops)
        big_mori, small_mori = (check_ops(x, "mori", cfg, ()) for x in (big_ops, small_ops))
        mori_differs += shape(big_mori) != shape(small_mori)
    assert mori_differs


def test_shrink_clock_undoes_a_clock_scale_as_far_as_the_fault_allows() -> None:
    c = ContextId("c")
    m = Message(MessageId("m1"), Role.USER, MessageKind.USER, 4)
    ops: list[Op] = [
        Open(0.0, c, SessionId("s"), AgentKind.MAIN),
        Append(0.5, c, (m,)),
        Pin(1.25, c, 0, 1, ttl=3.0),
        Infer(3.75, c, (), duration=0.5),
    ]
    scaled = [scaled_clock(o, 64) for o in ops]
    assert scaled[2] == Pin(80.0, c, 0, 1, ttl=192.0)

    def ordered(xs: Sequence[Op]) -> bool:  # a fault that reads the order of times alone
        pin = xs[2]
        assert isinstance(pin, Pin)
        assert pin.deadline is not None
        return xs[1].t < pin.t < xs[3].t < pin.deadline

    assert shrink_clock(scaled, 64, ordered) == ops  # back to the clock it was drawn on
    # a fault that needs a clock past 100 s: the largest division that keeps it (by 2)
    late = shrink_clock(scaled, 64, lambda xs: max(o.t for o in xs) > 100)
    assert late == [scaled_clock(o, 32) for o in ops]
    # none: unchanged
    assert shrink_clock(scaled, 64, lambda xs: max(o.t for o in xs) > 10**6) == scaled


def test_token_scaled_walks_reach_a_size_rule_small_prompts_miss() -> None:
    # KVTether sending the blocks of contexts over 8,192 tokens first, ahead of dead KV: no
    # walk at scale 1 makes such a prompt, and none of these 24 catches it at scale 1; the
    # walks drawn at a token scale do, and the coverage line says how large prompts grew
    mutant = "checkers.search.outside_mutants:BigContextFirstTether"
    inv = [OUTSIDE_MUTANTS[mutant]]
    finds: list[WalkFind] = []
    stats = explore(mutant, inv, walks=24, on_find=finds.append)
    assert finds
    assert all(walk_recipe(0, f.walk)[1].token_scale > 1 for f in finds)
    assert stats.coverage["largest prompt"] > 8192
    assert f"prompts of up to {stats.coverage['largest prompt']:,} tokens" in stats.coverage_line()
    for i in range(24):  # the same walks at scale 1: none fails, none has such a prompt
        cfg, params = walk_recipe(0, i)
        k = params.token_scale
        cfg = attrs.evolve(cfg, block_size=cfg.block_size // k)
        ops = random_trace(attrs.evolve(params, token_scale=1)).ops
        run = check_ops(ops, mutant, cfg, inv)
        assert run.first(inv[0]) is None
        assert all(o.prompt_tokens + o.output_tokens <= 8192
                   for o in run.engine.log if isinstance(o, InferObs))  # fmt: skip
    # the counterexample keeps the scale the fault needs, and no more: its numbers shrunk to
    # the threshold, a context of 8,193 tokens (a prompt and its output)
    r = search(mutant, inv, max_examples=1, steps=1, walks=24, hypothesis_shrink=False)
    c = r.found[inv[0]]
    assert c.found_by == "walk"
    sizes = [o.prompt_tokens + o.output_tokens
             for o in check_ops(c.ops, mutant, c.config, ()).engine.log
             if isinstance(o, InferObs)]  # fmt: skip
    assert max(sizes) == 8193


def test_shrink_scale_undoes_a_token_scale_as_far_as_the_fault_allows() -> None:
    def msg(i: int, tokens: int) -> Message:
        return Message(MessageId(f"m{i}"), Role.USER, MessageKind.USER, tokens)

    c = ContextId("c")
    ops: list[Op] = [
        Open(0.0, c, SessionId("s"), AgentKind.MAIN),
        Append(0.0, c, (msg(1, 48 * 16), msg(2, 16))),
        Infer(0.0, c, (msg(3, 32 * 16),)),
    ]
    cfg = EngineConfig(4 * 16, (TierConfig(TierName("hbm"), 8),))

    def tokens(xs: Sequence[Op]) -> int:
        return sum(m.tokens for o in xs for m in carried_messages(o))

    # a fault that reads blocks alone: back to scale 1 (the gcd of the sizes and the block size)
    blind, blind_cfg = shrink_scale(ops, cfg, lambda xs, k: tokens(xs) // k.block_size >= 20)
    assert (tokens(blind), blind_cfg.block_size) == (81, 4)
    # a fault that needs 300 tokens: the largest common factor that keeps them (16 -> 4)
    sized, sized_cfg = shrink_scale(ops, cfg, lambda xs, k: tokens(xs) >= 300)
    assert (tokens(sized), sized_cfg.block_size) == (81 * 4, 16)
    # none: unchanged
    assert shrink_scale(ops, cfg, lambda xs, k: tokens(xs) > 10**6) == (ops, cfg)
