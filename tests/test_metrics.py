"""Metrics (cost, latency, regretted evictions) and hardware presets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scenario import config, msg, run
from scenario import trace as scenario_trace

from kvmodel.cli import main
from kvmodel.errors import ConfigError
from kvmodel.studies.compare import PLACEMENT_POLICIES
from kvmodel.studies.metrics import (
    Prices,
    Timing,
    compute_metrics,
    queued_ttfts,
    regretted_evictions,
    share_of_optimum,
)
from kvmodel.studies.presets import HBF_STACK_BYTES, HBM_STACK_BYTES, MODELS, hardware_config
from kvmodel.workloads import AgenticParams, generate_agentic


def test_cost_and_latency_formulas() -> None:
    r = run(
        "lru",
        config(),
        {"op": "open", "t": 0, "ctx": "a", "session": "s", "agent": "main"},
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("A", 8)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": [msg("O", 4, "output")]},
        {"op": "append", "t": 2, "ctx": "a", "messages": [msg("B", 4)]},
        {"op": "infer", "t": 3, "ctx": "a", "output": []},
    )
    m = compute_metrics(
        r,
        Prices(input=1.0, cached_input=0.5, output=2.0),
        Timing(prefill_tok_per_s=4.0, ttft_overhead_s=1.0, tpot_s=0.5),
    )
    # infer 1: 8 missed; infer 2: 16 prompt, 12 hit (A and O), 4 missed; 4 output tokens
    assert m.recomputed_tokens == 12
    assert m.cost_usd == pytest.approx((12 * 1.0 + 12 * 0.5 + 4 * 2.0) / 1e6)
    assert m.ttft_s_mean == pytest.approx(((8 / 4 + 1) + (4 / 4 + 1)) / 2)
    assert m.latency_s_total == pytest.approx((8 / 4 + 1) + (4 / 4 + 1) + 4 * 0.5)


def test_queued_ttft_waits_for_the_prefill_servers() -> None:
    # spec E5: three requests (arrival, order, prefill tokens) at 4 tokens/s, overhead 1 s
    reqs = [(0.0, 0, 8), (0.0, 1, 4), (10.0, 2, 4)]
    one = queued_ttfts(reqs, Timing(prefill_tok_per_s=4.0, ttft_overhead_s=1.0))
    assert one == [2 + 1, 2 + 1 + 1, 1 + 1]  # the second waits 2 s behind the first
    two = queued_ttfts(reqs, Timing(prefill_tok_per_s=4.0, ttft_overhead_s=1.0, prefill_servers=2))
    assert two == [3, 2, 2]  # with a second server nobody waits


def test_a_rejected_inference_is_costed_as_a_full_recompute() -> None:
    """Spec E1-E3: b's prompt (12 tokens, 3 blocks) cannot fit 2 blocks while a's 2 are Pinned,
    so b is rejected (P7.7); it still costs its whole prompt at the input price and its output
    at the output price. On 8 blocks the same trace is served, and costs no more."""
    ops = [
        {"op": "open", "t": 0, "ctx": "a", "session": "s", "agent": "main"},
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("A", 8, "system")]},
        {"op": "pin", "t": 0, "ctx": "a", "start": 0, "stop": 1},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "open", "t": 2, "ctx": "b", "session": "s", "agent": "main"},
        {"op": "append", "t": 2, "ctx": "b", "messages": [msg("B", 12)]},
        {"op": "infer", "t": 3, "ctx": "b", "output": [msg("O", 2, "output")]},
    ]
    prices = Prices(input=1.0, cached_input=0.5, output=2.0)
    r = run("kvtether", config(blocks=2), *ops)
    assert r.summary.rejected == 1
    m = compute_metrics(r, prices)
    assert (m.rejected, m.rejected_prompt_tokens) == (1, 12)
    assert m.input_cost_usd == pytest.approx((8 * 1.0 + 12 * 1.0) / 1e6)  # a's 8 missed, b's 12
    assert m.output_cost_usd == pytest.approx(2 * 2.0 / 1e6)
    assert m.cost_usd == pytest.approx(m.input_cost_usd + m.output_cost_usd)
    served = compute_metrics(run("kvtether", config(blocks=8), *ops), prices)
    assert served.rejected == 0
    assert served.cost_usd == pytest.approx(m.cost_usd)  # b shares nothing with a: all missed
    # E5: the rejected inference still queues, for its whole prompt; E4 leaves it out
    t = Timing(prefill_tok_per_s=4.0, ttft_overhead_s=1.0)
    m = compute_metrics(r, prices, t)
    assert m.ttft_s_mean == pytest.approx(8 / 4 + 1)
    assert m.queued_ttft_s_mean == pytest.approx(((8 / 4 + 1) + (12 / 4 + 1)) / 2)


def test_regretted_evictions_count_keys_written_again() -> None:
    ops = [
        {"op": "open", "t": 0, "ctx": "a", "session": "s", "agent": "main"},
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("A", 8)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
        {"op": "open", "t": 2, "ctx": "b", "session": "s", "agent": "main"},
        {"op": "append", "t": 2, "ctx": "b", "messages": [msg("B", 8)]},
        {"op": "infer", "t": 3, "ctx": "b", "output": []},  # evicts A's second block
        {"op": "append", "t": 4, "ctx": "a", "messages": [msg("A2", 4)]},
        {"op": "infer", "t": 5, "ctx": "a", "output": []},
    ]  # ... which a needs again
    e = run("lru", config(blocks=3), *ops).engine
    assert regretted_evictions(e) == 1
    assert sum(1 for o in e.log if o.kind == "evict") == 3  # b's two blocks went for A2
    assert share_of_optimum(3, 4) == 0.75


def test_presets_use_documented_numbers() -> None:
    assert MODELS["llama-4-maverick"].bytes_per_token() == 48 * 8 * 128 * 2 * 2
    assert MODELS["qwen3-235b-a22b"].bytes_per_token() == 94 * 4 * 128 * 2 * 2
    assert HBF_STACK_BYTES == 16 * HBM_STACK_BYTES
    c = hardware_config("1/7", "qwen3-235b-a22b", kv_fraction=1.0)
    bpb = MODELS["qwen3-235b-a22b"].bytes_per_block(16)
    assert c.tiers[0].blocks == HBM_STACK_BYTES // bpb
    assert c.tiers[1].blocks == 7 * HBF_STACK_BYTES // bpb
    assert (c.tiers[1].pe_cycles, c.tiers[1].write_amplification) == (100_000, 1.02)
    h3 = hardware_config("8/8*", "llama-4-maverick", scale=0.01)
    assert h3.tiers[1].blocks > 0
    with pytest.raises(ConfigError, match="unknown split"):
        hardware_config("5/5", "llama-4-maverick")


def test_lachesis_turns_hbm_over_where_hbm_first_does_not() -> None:
    from kvmodel.replay import replay

    tr = generate_agentic(AgenticParams(seed=0, sessions=4, turns=3, p_spawn=0.4))
    cfg = hardware_config("2/6", "llama-4-maverick", scale=0.005)
    base = compute_metrics(replay(tr, "hbm-first", cfg))
    lach = compute_metrics(replay(tr, "lachesis-det", cfg))
    opt = compute_metrics(replay(tr, "opt-placement", cfg))
    assert lach.writes["hbm"] > 5 * base.writes["hbm"]
    assert base.device_years["hbf"] < lach.device_years["hbf"] <= opt.device_years["hbf"]  # type: ignore[operator]


def test_simulate_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["simulate", "--policy", "lachesis", "--preset", "2/6", "--sessions", "2", "--json"])
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["policy"] == "lachesis"
    assert set(d["writes"]) == {"hbm", "hbf"}


def test_compare_prints_ratios_beside_the_papers_and_plots(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    assert (
        main(
            [
                "compare",
                "--sessions",
                "2",
                "--turns",
                "2",
                "--splits",
                "2/6,8/8*",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "(paper: -40.0% on average (KVTether))" in out
    assert "lachesis_years_vs_hbm_first: 2/6" in out
    assert (tmp_path / "cache.png").stat().st_size > 1000
    assert (tmp_path / "placement.png").stat().st_size > 1000


def test_compare_json_has_every_policy_and_split(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["compare", "--sessions", "2", "--turns", "1", "--splits", "1/7", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["cache"]) == {"kvtether", "lru", "mori", "belady"}
    assert set(d["placement"]["1/7"]) == set(PLACEMENT_POLICIES)
    # Belady bounds the online cache policies' hits on this workload
    assert all(
        d["cache"]["belady"]["token_hit_rate"] >= m["token_hit_rate"] for m in d["cache"].values()
    )


def test_comparison_reproduces_the_papers_directions() -> None:
    """On the built-in multi-agent workload: KVTether below LRU and MORI in estimated cost,
    Lachesis ahead of HBM-first in device-years at every split, and no online policy beating
    its offline optimum (Belady on hits, opt-placement on HBM writes)."""
    import attrs as _attrs

    from kvmodel.config import default_config
    from kvmodel.studies.compare import compare
    from kvmodel.studies.presets import SPLITS
    from kvmodel.workloads import PRESETS

    trace = generate_agentic(_attrs.evolve(PRESETS["multi-agent"], sessions=8))
    cmp = compare(
        trace,
        default_config(hbm_blocks=256, hbf_blocks=1024),
        splits=list(SPLITS),
        model="llama-4-maverick",
        scale=0.005,
        # the policies the directions are about (hbm-first-static has its own tests)
        placement_policies=["lachesis", "lachesis-det", "hbm-first", "opt-placement"],
        progress=False,
    )
    c = cmp.cache
    exact = 0
    assert c["kvtether"].cost_usd < c["lru"].cost_usd
    assert c["kvtether"].cost_usd < c["mori"].cost_usd
    assert all(c["belady"].token_hit_rate >= m.token_hit_rate for m in c.values())
    for split, row in cmp.placement.items():
        years = {p: m.device_years["hbf"] for p, m in row.items()}
        assert years["lachesis"] > years["hbm-first"], split  # type: ignore[operator]
        assert years["lachesis-det"] > years["hbm-first"], split  # type: ignore[operator]
        opt = row["opt-placement"]
        if opt.evictions == 0:  # the bound is exact only when nothing is evicted (spec)
            # OPT writes the fewest blocks to flash (policies that churn write *more* in total)
            assert all(m.writes["hbf"] >= opt.writes["hbf"] for m in row.values()), split
            assert all(
                m.device_years["hbf"] <= opt.device_years["hbf"]  # type: ignore[operator]
                for m in row.values()
            ), split
            exact += 1
    assert exact >= 3


@pytest.mark.parametrize("seed", range(6))
def test_cost_lies_between_all_cached_and_all_recomputed(seed: int) -> None:
    """Over random traces on a small memory (rejections included, spec E3): the cost is at most
    what recomputing every prompt costs and at least what reusing every token would, so no
    accounting (a refused inference, a partial tail) lets a run fall below the floor."""
    from kvmodel import replay
    from kvmodel.io.observations import InferObs
    from kvmodel.workloads import RandomParams, random_trace

    prices = Prices(input=1.0, cached_input=0.25, output=2.0)
    r = replay(random_trace(RandomParams(seed=seed, ops=300)), "kvtether", config(blocks=32))
    assert r.summary.rejected  # both kinds are in every one of these
    assert r.summary.infers
    m = compute_metrics(r, prices)
    infers = [o for o in r.engine.log if isinstance(o, InferObs)]
    prompt = sum(o.prompt_tokens for o in infers)
    out = sum(o.output_tokens for o in infers) * prices.output
    assert m.rejected == r.summary.rejected
    assert (prompt * prices.cached_input + out) / 1e6 <= m.cost_usd + 1e-12
    assert m.cost_usd <= (prompt * prices.input + out) / 1e6 + 1e-12
    assert m.output_cost_usd == pytest.approx(out / 1e6)


# ------------------------------------------------------------- E8: capacity from the footprint

FOOTPRINT_OPS = (
    {"op": "open", "t": 0, "ctx": "a", "session": "s", "agent": "main"},
    {"op": "append", "t": 0, "ctx": "a", "messages": [msg("A", 16)]},
    {"op": "infer", "t": 1, "ctx": "a", "output": []},
    {"op": "open", "t": 1, "ctx": "b", "session": "s", "agent": "main"},
    {"op": "append", "t": 1, "ctx": "b", "messages": [msg("B", 8)]},
    {"op": "infer", "t": 2, "ctx": "b", "output": []},
    {"op": "close", "t": 3, "ctx": "a"},
    {"op": "close", "t": 3, "ctx": "b"},
    {"op": "open", "t": 4, "ctx": "c", "session": "s", "agent": "main"},
    {"op": "append", "t": 4, "ctx": "c", "messages": [msg("C", 4)]},
    {"op": "infer", "t": 5, "ctx": "c", "output": []},
)


def test_the_footprint_is_the_most_kv_held_at_once() -> None:
    from kvmodel.studies.compare import capacity_config, footprint

    t = scenario_trace(*FOOTPRINT_OPS)
    # a's 4 blocks and b's 2 are held together; after both close (eager reclaim) c needs 1
    assert footprint(t, 4) == 6
    cfg, cap = capacity_config(t, 0.5, 4)
    assert cap == (0.5, 6, 3)
    assert [(x.name, x.blocks) for x in cfg.tiers] == [("hbm", 3)]
    assert capacity_config(t, 0.01, 4)[1] == (0.01, 6, 1)  # never an empty memory


def test_compare_sizes_the_cache_from_the_footprint(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare", "--sessions", "2", "--turns", "1", "--policies", "kvtether,lru",
            "--capacity", "0.5", "--quiet"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    cap = json.loads(capsys.readouterr().out)["capacity"]
    assert cap["fraction"] == 0.5
    assert cap["blocks"] == round(0.5 * cap["footprint"])
    assert main(args) == 0
    assert f"0.5 x the footprint of {cap['footprint']:,} blocks" in capsys.readouterr().out
    assert main([*args, "--config", "nope.toml"]) == 2
    assert "drop --config" in capsys.readouterr().err


def test_paper_claims_say_what_cache_memory_they_were_measured_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from kvmodel.studies.compare import PAPER_CAPACITY

    args = ["compare", "--sessions", "2", "--turns", "1", "--policies", "kvtether,lru",
            "--paper", "--quiet"]  # fmt: skip
    # --paper sizes the memory from the workload unless told otherwise (spec E8)
    assert main([*args, "--json"]) == 0
    cap = json.loads(capsys.readouterr().out)["capacity"]
    assert cap["fraction"] == PAPER_CAPACITY
    assert main(args) == 0
    out = capsys.readouterr().out
    assert (
        f"cache memory: one tier of {PAPER_CAPACITY:g} x the workload's footprint of "
        f"{cap['footprint']:,} blocks = {cap['blocks']:,}"
    ) in out
    assert "KVTether cost vs LRU" in out
    cfg = tmp_path / "c.toml"
    cfg.write_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 64\n')
    assert main([*args, "--config", str(cfg)]) == 0
    assert "cache memory: the configuration given (--config)" in capsys.readouterr().out


def test_the_footprint_is_not_capped_by_its_first_guess() -> None:
    """Forks and edits rewrite the same tokens under new keys, so the blocks held at once can
    exceed the tokens appended: the footprint grows its memory until nothing is evicted."""
    from kvmodel.studies.compare import footprint

    ops: list[dict[str, object]] = [
        {"op": "open", "t": 0, "ctx": "a", "session": "s", "agent": "main"},
        {"op": "append", "t": 0, "ctx": "a", "messages": [msg("A", 64)]},
        {"op": "infer", "t": 1, "ctx": "a", "output": []},
    ]
    for i in range(8):  # eight branches, each rewriting all 16 blocks under a new first message
        ops += [
            {"op": "fork", "t": 2 + i, "src": "a", "ctx": f"b{i}"},
            {"op": "replace", "t": 2 + i, "ctx": f"b{i}", "index": 0, "message": msg(f"R{i}", 64)},
            {"op": "infer", "t": 2 + i, "ctx": f"b{i}", "output": []},
        ]
    t = scenario_trace(*ops)
    assert footprint(t, 4) == 16 * 9  # a's 16 blocks and each branch's 16, all held
