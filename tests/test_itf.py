"""ITF export (kvmodel.io.itf): the model's states as Informal Trace Format JSON, valid against
spec/itf.schema.json (written from Apalache ADR-015), one state per op, deterministic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kvmodel import EngineConfig, TierConfig
from kvmodel.cli import main
from kvmodel.config import load_config
from kvmodel.errors import ConfigError
from kvmodel.ids import TierName
from kvmodel.io.itf import ITF_VARS, dumps_itf, itf_json, itf_trace
from kvmodel.io.trace import dump_trace
from kvmodel.replay import replay
from kvmodel.workloads import AgenticParams, RandomParams, generate_agentic, random_trace

SCHEMA = json.loads((Path(__file__).parents[1] / "spec" / "itf.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _valid(itf: dict[str, Any]) -> None:
    VALIDATOR.validate(itf)
    for s in itf["states"]:  # what the schema cannot say: every state binds exactly the vars
        assert set(s) - {"#meta"} == set(itf["vars"])


@pytest.mark.parametrize("policy", ["lru", "kvtether", "lachesis"])
def test_an_export_is_valid_itf_with_one_state_per_op(policy: str) -> None:
    tr = random_trace(RandomParams(seed=7, ops=120))
    itf = itf_trace(tr.ops, policy, _config())
    _valid(itf)
    assert itf["vars"] == list(ITF_VARS)
    assert len(itf["states"]) == len(tr.ops) + 1
    assert [s["#meta"]["index"] for s in itf["states"]] == list(range(len(tr.ops) + 1))
    last = itf["states"][-1]
    # the last state is the replay's end state
    r = replay(tr, policy, _config())
    assert len(last["blocks"]["#map"]) == len(r.engine.blocks)
    writes = dict(map(tuple, last["writes"]["#map"]))
    assert writes == dict(r.summary.writes)
    # the records of the states are the observation log
    assert sum(len(s["records"]) for s in itf["states"]) == len(r.engine.log)


def test_the_schema_refuses_what_is_not_itf() -> None:
    tr = generate_agentic(AgenticParams(seed=1, sessions=2, turns=2))
    itf = itf_trace(tr.ops, "lru", _config())
    bad: dict[str, Any]
    for bad in (
        {**itf, "states": [{**itf["states"][0], "t": 1.5}]},  # no fractional numbers
        {**itf, "states": [{**itf["states"][0], "t": None}]},  # no null
        {**itf, "states": [{**itf["states"][0], "free": {"#set": [1], "#map": []}}]},
        {"states": []},  # vars are required
    ):
        with pytest.raises(jsonschema.ValidationError):
            VALIDATOR.validate(bad)


def test_export_itf_command_is_deterministic(tmp_path: Path) -> None:
    tr = generate_agentic(AgenticParams(seed=2, sessions=2, turns=3))
    path = tmp_path / "t.jsonl"
    dump_trace(tr, path)
    cfg = tmp_path / "c.toml"
    cfg.write_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 24\n')
    a, b = tmp_path / "a.itf.json", tmp_path / "b.itf.json"
    for out in (a, b):
        argv = ["export-itf", str(path), "--policy", "kvtether", "--config", str(cfg)]
        assert main([*argv, "-o", str(out)]) == 0
    assert a.read_bytes() == b.read_bytes()
    _valid(json.loads(a.read_text()))
    assert dumps_itf(itf_trace(tr.ops, "kvtether", load_config(cfg))) == a.read_text()


def test_a_counterexample_bundle_carries_its_states_as_itf(lru_zombie_bundle: Path) -> None:
    bundle = lru_zombie_bundle
    itf = json.loads((bundle / "counterexample.itf.json").read_text())
    _valid(itf)
    assert itf["#meta"]["invariant"] == "no-zombie-kv"
    ops = [ln for ln in (bundle / "trace.jsonl").read_text().splitlines()[1:] if ln]
    assert len(itf["states"]) == len(ops) + 1
    # the violating op's state shows the zombie: a resident block no open context holds
    at = itf["states"][itf["#meta"]["at"] + 1]
    assert any(not b["holders"]["#set"] for _, b in at["blocks"]["#map"])


def _config() -> EngineConfig:
    return EngineConfig(4, (TierConfig(TierName("hbm"), 8), TierConfig(TierName("hbf"), 8)))


def test_a_window_of_some_variables_is_valid_itf_and_the_full_exports_states(
    tmp_path: Path,
) -> None:
    tr = random_trace(RandomParams(seed=3, ops=60))
    full = itf_trace(tr.ops, "kvtether", _config())
    some = itf_trace(tr.ops, "kvtether", _config(), variables=["free", "blocks"], first=10, last=20)
    _valid(some)
    assert some["vars"] == ["blocks", "free"]  # in ITF_VARS' order, whatever was asked
    assert some["#meta"]["window"] == [10, 20]
    # the state before op 10, then one after each op of the window, as the full export has them
    want = [{k: s[k] for k in ("#meta", "blocks", "free")} for s in full["states"][10:22]]
    assert some["states"] == want
    head = itf_trace(tr.ops, "kvtether", _config(), last=4)
    assert head["states"] == full["states"][:6]  # first 0: the init state, then ops 0..4
    bad: dict[str, Any]
    for bad in ({"variables": ["blocks", "nope"]}, {"variables": []}, {"first": 5, "last": 4},
                {"last": len(tr.ops)}, {"first": len(tr.ops)}):  # fmt: skip
        with pytest.raises(ConfigError):
            itf_trace(tr.ops, "kvtether", _config(), **bad)
    # the command: flags, and bad ones refused with exit 2 and nothing written
    path, out = tmp_path / "t.jsonl", tmp_path / "w.itf.json"
    dump_trace(tr, path)
    cfg = tmp_path / "c.toml"
    cfg.write_text('block_size = 4\n[[tiers]]\nname = "hbm"\nblocks = 8\n'
                   '[[tiers]]\nname = "hbf"\nblocks = 8\n')  # fmt: skip
    argv = ["export-itf", str(path), "--policy", "kvtether", "--config", str(cfg)]
    assert main([*argv, "--vars", "free,blocks", "--ops", "10:20", "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == itf_json(some)
    for flags in (["--vars", "blocks,nope"], ["--ops", "20:10"], ["--ops", "7"],
                  ["--ops", f"0:{len(tr.ops)}"]):  # fmt: skip
        bad_out = tmp_path / "bad.json"
        assert _exit_code([*argv, *flags, "-o", str(bad_out)]) == 2, flags
        assert not bad_out.exists()


def _exit_code(argv: list[str]) -> int | str | None:
    """main's return, or the code argparse exits with on a flag it refuses."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_the_written_itf_is_what_its_consumers_read(
    tmp_path: Path, lru_zombie_bundle: Path
) -> None:
    """Issue 63 item 7: Quint's reader and the Rust itf crate take every integer as
    {"#bigint": "..."}. The bundle's counterexample.itf.json has no bare integer in its states
    and round-trips through itf-py (the Apalache/Quint ITF library): parsed and written again,
    every state is the same JSON; its integers read back as the model's."""
    import itf_py

    text = (lru_zombie_bundle / "counterexample.itf.json").read_text()
    data = json.loads(text)
    _valid(data)

    def bare_ints(v: Any) -> int:
        if isinstance(v, bool):
            return 0
        if isinstance(v, int):
            return 1
        if isinstance(v, dict):
            return sum(bare_ints(x) for k, x in v.items() if k != "#meta")
        if isinstance(v, list):
            return sum(bare_ints(x) for x in v)
        return 0

    assert bare_ints(data["states"]) == 0
    parsed = itf_py.trace_from_json(data)
    assert [itf_py.state_to_json(s) for s in parsed.states] == data["states"]
    free = parsed.states[-1].values["free"]
    assert all(isinstance(n, int) for n in free.values())
    # deterministic bytes whatever the run's string hashes (sets are written sorted): a trace
    # whose blocks have several holders (forks, sub-agents), exported under two hash seeds
    import os
    import subprocess
    import sys

    trace = tmp_path / "agentic.jsonl"
    dump_trace(generate_agentic(AgenticParams(seed=3, sessions=3, turns=2)), trace)
    cfg = tmp_path / "c.toml"
    cfg.write_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 48\n'
                   '[[tiers]]\nname = "hbf"\nblocks = 96\n')  # fmt: skip
    code = "import sys; from kvmodel.cli import main; sys.exit(main(sys.argv[1:]))"
    texts = set()
    for seed in ("1", "2"):
        target = tmp_path / f"s{seed}.itf.json"
        argv = [sys.executable, "-c", code, "export-itf", str(trace), "--config", str(cfg),
                "-o", str(target)]  # fmt: skip
        subprocess.run(argv, check=True, env={**os.environ, "PYTHONHASHSEED": seed})
        texts.add(target.read_text())
    assert len(texts) == 1
    shared = [b for s in json.loads(texts.pop())["states"] for _, b in s["blocks"]["#map"]
              if len(b["holders"]["#set"]) > 1]  # fmt: skip
    assert shared  # (the sets that could have come out in another order)
