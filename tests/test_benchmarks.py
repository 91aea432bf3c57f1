"""Benchmarks are programs users run; each runs here at its smallest size so that it cannot rot.
Their figures are printed, never asserted; what is asserted is what they check themselves."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_bench_vs_vllm_does_the_same_work_as_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    from checkers.conformance.vllm_pool import VLLMUnavailableError, fetch_sources

    try:
        fetch_sources()
    except VLLMUnavailableError as e:
        pytest.skip(f"vLLM sources unavailable here: {e}")
    bench = _load("bench_vs_vllm")
    # 6 sessions on 120 blocks: evictions, and hits from the blocks that survive
    assert bench.main(["--sessions", "6", "--rounds", "6", "--blocks", "120"]) == 0
    out = capsys.readouterr().out
    assert "same work on both sides" in out
    hits = int(out.split("same work on both sides: ")[1].split(" hits")[0])
    evictions = int(out.split(" writes, ")[1].split(" evictions")[0])
    assert hits > 0
    assert evictions > 0


def test_bench_replay_runs_at_its_smallest_size(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _load("bench_replay")
    monkeypatch.setattr(sys, "argv", ["bench_replay.py", "--quick"])
    bench.main()
    monkeypatch.setattr(sys, "argv", ["bench_replay.py", "--memory", "500"])
    bench.main()
    out = capsys.readouterr().out
    assert "block ops/s" in out
    assert "longest / shortest" in out
    assert "peak RSS" in out


def test_bench_discover_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load("bench_discover")
    assert bench.main(["--budget", "2", "--gated", "1", "--cells", "small"]) == 0
    out = capsys.readouterr().out
    assert "seed 0: 2 scored" in out
    assert "goal: " in out


def test_bench_reclaim_timing_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load("bench_reclaim_timing")
    assert bench.main(["--hbm", "64", "--sessions", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("hbm    64:") == 2


def test_bench_checkers_prints_both_searches_throughput(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _load("bench_checkers")
    args = ["--profile", "dev", "--seeds", "2", "--policies", "lru", "--no-mutants"]
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    assert out.count("ops/s") == 2  # the machine's line and the walks'
    assert "steps/s" in out
    layers = ("Hypothesis alone", "+ the harness", "+ the engine", "+ the invariants")
    at = [out.index(x) for x in (*layers, "+ the contract")]
    assert at == sorted(at)
    assert "trivial steps" in out
    assert "the goal, 2,000 steps/s, is 500 us a step" in out


def test_the_goals_budget_is_the_layers_arithmetic() -> None:
    """2,000 steps/s is 500 us a step; the harness's share comes off first, the rest is split
    over a step's ops, and each layer's cost an op is the difference it adds."""
    bench = _load("bench_checkers")
    layers = {"+ the engine": 300e-6, "+ the invariants": 400e-6, "+ the contract model": 700e-6}
    line = bench.goal_budget(200e-6, layers, 2.0)
    assert "the harness takes 200, leaving 150 us for each of a step's 2.0 ops" in line
    assert "the engine and the invariants take 100 us an op, the contract model 150 more" in line
    assert "(within the goal: 50)" in line


def test_bench_kvtether_ablation_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load("bench_kvtether_ablation")
    assert bench.main(["--presets", "tau-bench-fit", "--capacity", "0.5", "--sessions", "2"]) == 0
    out = capsys.readouterr().out
    assert "on the user (median" in out
    assert out.count("%") == len(bench.VARIANTS) + 1


def test_bench_hbm_first_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load("bench_hbm_first")
    assert bench.main(["--sessions", "1", "--turns", "1", "--splits", "1/7"]) == 0
    assert capsys.readouterr().out.count("1/7") == 2


def test_bench_load_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load("bench_load")
    assert bench.main(["--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("scale  sessions  node sessions/h")
    assert len(lines) == 3


def test_bench_real_validation_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from kvmodel.workloads.realsets import traces_root

    bench = _load("bench_real_validation")
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    if traces_root() is None:
        assert "nothing to validate on" in out
        return
    assert "tau-bench: preset" in out
    assert "tau-bench: validation, resampled" in out
    assert "gap to the preset" in out
    assert "KV dead by turn_end (reasoning)" in out


def test_bench_movement_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load("bench_movement")
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "multi-agent, HBM 0.25 x footprint" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "lower bound (unbounded memory, every reuse a hit):" in rows.pop("lower")
    assert set(rows) == {p for p, _ in bench.POLICIES}
    # no policy costs less than the lower bound (each row says how far above it is)
    above = {p: float(r.split()[-4].rstrip("%")) for p, r in rows.items()}
    assert all(a >= 0 for a in above.values()), above
    assert "+0.0%" in rows["lru-drop"]  # (each baseline against itself)
    assert "hbf writes        0" in rows["kvtether-drop"]  # (no copies: nothing below)
    assert "loaded          0 tok" not in rows["kvtether-offload"]  # (it did load KV back)


def test_bench_viewer_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load("bench_viewer")
    monkeypatch.setattr(sys, "argv", ["bench_viewer.py", "--quick"])
    bench.main()
    out = capsys.readouterr().out.splitlines()
    rows = [ln.split() for ln in out[2:] if ln.split()[0][0].isdigit()]
    assert len(rows) == 1, out
    ops, mb = int(rows[0][0].replace(",", "")), float(rows[0][1])
    assert ops > 50
    assert 0 < mb <= 2 * ops / 1000 + 0.1  # the page's own code is about 20 KB


def test_bench_long_logs_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load("bench_long_logs")
    argv = ["--sessions", "2", "--rounds", "3", "--fork-depth", "40", "--fork-infer-depth", "8"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    rows = {ln[2:26].strip(): ln.split() for ln in out.splitlines() if ln.startswith("  ")}
    for name in ("replay", "replay --observations", "oracle --policy", "replay --check",
                 "replay --check --skip"):  # fmt: skip
        assert rows[name][-1 if name != "replay --observations" else -4] == "0", out
    assert "40 deep" in out
