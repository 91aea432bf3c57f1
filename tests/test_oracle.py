"""Log conformance (checkers.oracle): no false alarms on the reference's own logs, every
perturbation caught, truncation reported as UNKNOWN."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkers.oracle import check_log
from kvmodel import EngineConfig, TierConfig
from kvmodel.cli import main
from kvmodel.ids import TierName
from kvmodel.observations import observation_to_json
from kvmodel.replay import replay
from kvmodel.trace import dump_trace
from kvmodel.workloads import AgenticParams, RandomParams, generate_agentic, random_trace

CFG = EngineConfig(4, (TierConfig(TierName("hbm"), 8), TierConfig(TierName("hbf"), 8)))
RANKED = ["kvtether", "lru", "vllm-prefix", "hbm-first", "lachesis-det", "tether-lachesis"]


def _log(trace, policy, cfg=CFG):  # type: ignore[no-untyped-def]
    return [observation_to_json(o) for o in replay(trace, policy, cfg).engine.log]


@pytest.mark.parametrize("policy", RANKED)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_reference_log_is_always_ok(policy: str, seed: int) -> None:
    tr = random_trace(RandomParams(seed=seed, ops=60))
    assert check_log(tr, _log(tr, policy), policy, CFG).verdict == "OK"


def test_another_policys_log_is_illegal_at_its_first_different_eviction() -> None:
    tr = generate_agentic(AgenticParams(seed=3, sessions=3, turns=2))
    cfg = EngineConfig(16, (TierConfig(TierName("hbm"), 96), TierConfig(TierName("hbf"), 160)))
    v = check_log(tr, _log(tr, "lru", cfg), "kvtether", cfg)
    assert v.verdict == "ILLEGAL"
    assert v.reason == "eviction outside the admissible set"
    assert v.expected
    assert v.got
    assert v.state_before


def test_perturbed_logs_are_caught() -> None:
    tr = generate_agentic(AgenticParams(seed=3, sessions=3, turns=2))
    cfg = EngineConfig(16, (TierConfig(TierName("hbm"), 96), TierConfig(TierName("hbf"), 160)))
    log = _log(tr, "kvtether", cfg)
    i = next(k for k, r in enumerate(log) if r["kind"] == "evict")
    j = next(k for k, r in enumerate(log) if r["kind"] == "alloc" and r["op"] == log[i]["op"])
    dropped = log[:i] + log[i + 1 :]  # one eviction fewer than needed
    assert check_log(tr, dropped, "kvtether", cfg).verdict == "ILLEGAL"
    moved = [dict(r) for r in log]
    moved[j]["tier"] = "hbf" if moved[j]["tier"] == "hbm" else "hbm"  # a write in the wrong tier
    v = check_log(tr, moved, "kvtether", cfg)
    assert (v.verdict, v.op, v.reason) == ("ILLEGAL", log[j]["op"], "decisions differ")
    assert check_log(tr, log[: len(log) // 2], "kvtether", cfg).verdict == "UNKNOWN"
    beyond = [*log, {**log[-1], "op": len(tr.ops) + 5}]
    assert check_log(tr, beyond, "kvtether", cfg).verdict == "UNKNOWN"


def test_oracle_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tr = random_trace(RandomParams(seed=4, ops=60))
    trace_file, log_file, cfg_file = tmp_path / "t.jsonl", tmp_path / "l.jsonl", tmp_path / "c.toml"
    dump_trace(tr, trace_file)
    cfg_file.write_text(
        'block_size = 4\n[[tiers]]\nname = "hbm"\nblocks = 8\n[[tiers]]\nname = "hbf"\nblocks = 8\n'
    )
    log_file.write_text("".join(json.dumps(r) + "\n" for r in _log(tr, "lru")))
    assert (
        main(
            ["oracle", str(trace_file), str(log_file), "--policy", "lru", "--config", str(cfg_file)]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("OK")
    log_file.write_text('{"op": 0, "kind": "alloc"}\nnot json\n')
    assert main(["oracle", str(trace_file), str(log_file), "--policy", "lru"]) == 2
    assert f"{log_file}:2" in capsys.readouterr().err
    assert main(["oracle", str(trace_file), str(log_file), "--policy", "mori"]) == 2
