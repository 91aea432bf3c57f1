"""The ``kvmodel`` CLI: exit codes, JSON summary, atomic outputs (spec T3, T5)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kvmodel.cli import main

SUMMARY_KEYS = [
    "policy",
    "ops",
    "infers",
    "prompt_tokens",
    "hit_tokens",
    "miss_tokens",
    "output_tokens",
    "rejected",
    "writes",
    "evictions",
    "frees",
    "resident_final",
    "dead_resident_final",
    "dead_resident_max",
    "zombie_block_seconds",
    "duration_s",
    "device_years",
    "hbf_device_years",
    "token_hit_rate",
]


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    p = tmp_path / "t.jsonl"
    assert main(["generate", "--seed", "3", "--sessions", "2", "--turns", "2", "-o", str(p)]) == 0
    return p


def test_replay_json_summary(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(trace_file), "--policy", "kvtether", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == SUMMARY_KEYS
    assert out["policy"] == "kvtether"
    assert out["dead_resident_final"] == 0
    assert out["prompt_tokens"] == out["hit_tokens"] + out["miss_tokens"]
    assert set(out["writes"]) == {"hbm", "hbf"}
    assert isinstance(out["hbf_device_years"], float)


def test_a_policy_module_beside_the_user_is_found(
    trace_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`kvmodel replay --policy here_policy:Mine` next to here_policy.py finds it (the working
    directory is searched last, so it never shadows an installed module)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "here_policy.py").write_text(
        "from kvmodel import BasePolicy\n\nclass Mine(BasePolicy):\n    name = 'mine'\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(work))])
    monkeypatch.chdir(work)
    assert main(["replay", str(trace_file), "--policy", "here_policy:Mine", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == "mine"
    assert sys.path[-1] == str(work)


def test_replay_writes_observations(trace_file: Path, tmp_path: Path) -> None:
    obs = tmp_path / "obs.jsonl"
    assert main(["replay", str(trace_file), "--observations", str(obs)]) == 0
    recs = [json.loads(x) for x in obs.read_text().splitlines()]
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert {r["kind"] for r in recs} >= {"infer", "alloc"}
    # written op by op, the same bytes as the log a replay holds whole
    from kvmodel.io.trace import load_trace
    from kvmodel.replay import replay

    whole = replay(load_trace(trace_file), "lru").engine.log.to_jsonl()
    assert obs.read_text(encoding="utf-8") == whole


def test_a_replay_that_fails_midway_leaves_no_log(tmp_path: Path) -> None:
    """An op the model refuses after the log has started: exit 2, and no half-written log."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"op":"open","t":0,"ctx":"a","session":"s","agent":"main"}\n'
        '{"op":"append","t":0,"ctx":"a","messages":[{"id":"m","role":"user","kind":"user",'
        '"tokens":40}]}\n'
        '{"op":"infer","t":0,"ctx":"a","output":[]}\n'
        '{"op":"infer","t":1,"ctx":"nobody","output":[]}\n',
        encoding="utf-8",
    )
    obs = tmp_path / "obs.jsonl"
    assert main(["replay", str(bad), "--observations", str(obs)]) == 2
    assert not obs.exists()
    assert list(tmp_path.iterdir()) == [bad]


def test_a_checked_replay_streams_the_same_log(trace_file: Path, tmp_path: Path) -> None:
    """replay --check writes --observations as the run goes (the engine forgets each op's
    records once counted and written): byte for byte the log plain replay writes, and the
    coverage it counted op by op is the one counted from a whole log."""
    from checkers.search.coverage import count_records, run_coverage
    from kvmodel.config import default_config
    from kvmodel.io.trace import load_trace
    from kvmodel.replay import replay

    plain, checked = tmp_path / "plain.jsonl", tmp_path / "checked.jsonl"
    assert main(["replay", str(trace_file), "--policy", "kvtether", "--observations",
                 str(plain)]) == 0  # fmt: skip
    argv = ["replay", str(trace_file), "--policy", "kvtether", "--check", "--quiet"]
    # (exit 1: kvtether does not claim deterministic-placement or endurance-budget, both broken)
    assert main([*argv, "--observations", str(checked)]) == 1
    assert checked.read_bytes() == plain.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checked.jsonl", "plain.jsonl", "t.jsonl"]
    tr = load_trace(trace_file)
    r = replay(tr, "kvtether", default_config())
    counted: Counter[str] = Counter()
    for o in r.engine.log:
        count_records(counted, "hbm", [o])
    assert run_coverage(r.engine, tr.ops, records=counted) == run_coverage(r.engine, tr.ops)


def test_bad_trace_exits_2_names_the_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"op":"open","t":0,"ctx":"a","session":"s","agent":"main"}\n'
        '{"op":"remove","t":1,"ctx":"a","index":0}\n'
    )
    obs = tmp_path / "obs.jsonl"
    assert main(["replay", str(bad), "--observations", str(obs)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: op 'remove', field 'index'" in err
    assert not obs.exists()
    assert list(tmp_path.iterdir()) == [bad]


def test_unknown_policy_and_bad_config_exit_2(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(trace_file), "--policy", "nope"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    cfg = tmp_path / "c.toml"
    cfg.write_text("[[tiers]]\nname = 'hbm'\nblocks = 0\n")
    assert main(["replay", str(trace_file), "--config", str(cfg)]) == 2
    assert "'blocks' must be an integer >= 1 (got 0)" in capsys.readouterr().err


def test_a_policy_whose_declaration_contradicts_its_code_exits_2(
    trace_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "liarmod.py").write_text(
        "from kvmodel import BasePolicy\n"
        "from kvmodel.policy import Reclaim\n"
        "class Liar(BasePolicy):\n"
        "    name = 'liar'\n"
        "    reclaim = Reclaim.DEAD\n"
        "    def on_op(self, view, op):\n"
        "        return ()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        for argv in (["replay", str(trace_file), "--policy", "liarmod:Liar"],
                     ["prove", "liarmod:Liar"], ["check", "liarmod:Liar"]):  # fmt: skip
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert "kvmodel: error: policy class Liar declares reclaim = Reclaim.DEAD" in err
            assert "Traceback" not in err
            sys.modules.pop("liarmod", None)
    finally:
        sys.modules.pop("liarmod", None)


def test_config_file_drives_tiers(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "block_size = 16\n[model]\nlayers = 2\nkv_heads = 1\nhead_dim = 8\n"
        "[[tiers]]\nname = 'fast'\nblocks = 64\n"
        "[[tiers]]\nname = 'flash'\nblocks = 4096\npe_cycles = 1000\n"
        "write_amplification = 1.5\n"
    )
    assert main(["replay", str(trace_file), "--config", str(cfg), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["writes"]) == {"fast", "flash"}
    assert out["device_years"]["fast"] is None
    assert out["hbf_device_years"] == out["device_years"]["flash"] is not None


def test_policies_and_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    assert "kvtether" in out
    assert "no-zombie-kv" in out
    assert main(["demo", "--sessions", "2", "--turns", "1"]) == 0
    out = capsys.readouterr().out
    assert "lru" in out
    assert "kvtether" in out
    assert "hit rate" in out


def test_console_script_runs() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kvmodel.cli", "policies", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert {p["name"] for p in json.loads(r.stdout)} >= {"lru", "kvtether", "hbm-first"}


def test_a_closed_output_pipe_ends_the_command_without_a_traceback() -> None:
    """``kvmodel compare | head``: the reader is gone before the table is printed."""
    with subprocess.Popen(
        [sys.executable, "-m", "kvmodel.cli", "demo", "--sessions", "2", "--turns", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as p:
        assert p.stdout is not None
        assert p.stderr is not None
        p.stdout.close()  # before the command writes anything
        err = p.stderr.read().decode()
        assert p.wait() == 1
    assert "Traceback" not in err
    assert "BrokenPipe" not in err


def test_lachesis_fit_and_cv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = []
    for seed in range(5):
        p = tmp_path / f"t{seed}.jsonl"
        assert (
            main(["generate", "--seed", str(seed), "--sessions", "6", "--turns", "3", "-o", str(p)])
            == 0
        )
        traces.append(str(p))
    out = tmp_path / "w.json"
    assert main(["lachesis", "fit", *traces, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["format"] == "kvmodel.lachesis.ridge/1"
    capsys.readouterr()
    assert main(["lachesis", "cv", *traces, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["sessions"] >= 5
    assert -1 <= r["kendall_tau"] <= 1
    assert main(["lachesis", "cv", traces[0], "--folds", "50"]) == 2
    assert "at least 50 sessions" in capsys.readouterr().err


# -- crash classes of kvmodel issue 20, each pinned: a usage error or a located error, exit 2


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "lru", "--steps", "-1"],
        ["check", "lru", "--max-examples", "0"],
        ["check", "lru", "--walks", "-3"],
        ["check", "lru", "-j", "0"],
        ["simulate", "--workload", "multi-agent", "--sessions", "0", "--turns", "1"],
        ["generate", "--turns", "0"],
        ["generate", "--random-ops", "0"],
        ["compare", "--scale", "nan"],
        ["compare", "--scale", "-1"],
        ["prove", "lru", "--depth", "0"],
        ["prove", "lru", "--timeout", "inf"],
        ["lachesis", "cv", "--folds", "1"],
        ["lachesis", "cv", "--select", "1.5"],
    ],
)
def test_out_of_range_arguments_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert "expected" in capsys.readouterr().err


def test_deeply_nested_json_and_binary_toml_are_located_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    out = tmp_path / "obs.jsonl"
    assert main(["replay", str(deep), "--observations", str(out)]) == 2
    assert f"{deep}:1: JSON nested too deeply" in capsys.readouterr().err
    assert not out.exists()
    assert main(["kv-events", str(deep)]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    good = tmp_path / "t.jsonl"
    assert main(["generate", "--random-ops", "5", "-o", str(good)]) == 0
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00 binary")
    assert main(["replay", str(good), "--config", str(binary)]) == 2
    assert f"{binary}: not UTF-8 text" in capsys.readouterr().err


def test_help_states_every_exit_code_once(capsys: pytest.CaptureFixture[str]) -> None:
    """The exit codes are written once (kvmodel/cli/__init__.py) and --help prints that text:
    every code the constants name, each once."""
    import kvmodel.cli as cli

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    codes = [cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_BAD_INPUT, cli.EXIT_UNDECIDED]
    assert [out.count(f"* {c} -- ") for c in codes] == [1, 1, 1, 1]


def test_newer_commands_refuse_bad_input_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 63 item 5: each of these ended in a traceback, some after minutes of work."""
    import kvmodel.studies.sweep as sweep

    # an op on a context the trace never opened, resampled (a KeyError in sessions_of)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kvtrace":1}\n{"op":"infer","t":0,"ctx":"nope","output":[]}\n')
    out = tmp_path / "out.jsonl"
    assert main(["generate", "--from-traces", str(bad), "-o", str(out)]) == 2
    assert f"{bad}:2: op 'infer', field 'ctx': context 'nope' was never opened" in (
        capsys.readouterr().err
    )
    assert not out.exists()
    # --out naming a file: refused before the search, the discovery or the comparison
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for argv in (["check", "lru", "--invariants", "no-zombie-kv"], ["discover"], ["compare"]):
        assert main([*argv, "--out", str(a_file)]) == 2, argv
        assert f"--out {a_file}: exists and is not a directory" in capsys.readouterr().err
    # a scheduler address where none answers (an OSError traceback after 30 s)
    monkeypatch.setattr(sweep, "CONNECT_TIMEOUT_S", 1)
    assert main(["sweep", "--scheduler", "tcp://127.0.0.1:1", "--quiet"]) == 2
    assert "--scheduler 'tcp://127.0.0.1:1': no Dask scheduler answered" in (
        capsys.readouterr().err
    )
