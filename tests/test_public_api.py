"""The public namespace (issue 63 item 3): every name in ``kvmodel.__all__`` resolves, importing
``kvmodel`` imports no checker and no policy (the model sits below both), the version has one
definition and the CHANGELOG names it, and the common tasks run from ``kvmodel`` alone."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import kvmodel
from kvmodel.io.observations import observation_to_json
from kvmodel.workloads.random_ops import RandomParams, random_trace

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_resolves_and_is_listed_once() -> None:
    assert len(set(kvmodel.__all__)) == len(kvmodel.__all__)
    for name in kvmodel.__all__:
        assert getattr(kvmodel, name) is not None, name
    assert set(kvmodel.__all__) <= set(dir(kvmodel))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        kvmodel.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_importing_kvmodel_imports_no_checker_and_no_policy() -> None:
    code = (
        "import sys, kvmodel\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('checkers', 'policies'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_version_has_one_definition_and_the_changelog_names_it() -> None:
    assert importlib.metadata.version("kvmodel") == kvmodel.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", kvmodel.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    first = re.search(r"^## (\S+)", changelog, flags=re.M)
    assert first is not None
    assert first.group(1) == kvmodel.__version__
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]


def test_the_common_tasks_from_kvmodel_alone(tmp_path: Path) -> None:
    """Replay a trace, judge its own log with the oracle (a log the reference wrote is legal),
    and watch the invariants op by op: nothing imported from below ``kvmodel``."""
    config = kvmodel.default_config()
    kvmodel.dump_trace(random_trace(RandomParams(seed=7, ops=80)), tmp_path / "t.jsonl")
    trace = kvmodel.load_trace(tmp_path / "t.jsonl")
    result = kvmodel.replay(trace, "kvtether", config)
    assert result.summary.policy == "kvtether"
    log = [json.loads(json.dumps(observation_to_json(r))) for r in result.engine.log]
    verdict = kvmodel.check_log(trace, log, "kvtether", config, complete=True)
    assert isinstance(verdict, kvmodel.OracleVerdict)
    assert verdict.verdict == "OK", verdict.render()
    claims = kvmodel.claimed_invariants(kvmodel.resolve_policy("kvtether"))
    run = kvmodel.check_ops(trace.ops, "kvtether", config, claims)
    assert isinstance(run, kvmodel.CheckRun)
    assert run.applied == len(trace.ops)
    assert run.violations == ()
    # and a policy that breaks a claim is caught through the same names
    bad = kvmodel.check_ops(trace.ops, "lru", config, ["no-zombie-kv"])
    assert [v.invariant for v in bad.violations][:1] == ["no-zombie-kv"]


def test_the_lazy_names_are_the_type_checkers_imports() -> None:
    """``_FROM_CHECKERS`` (what ``__getattr__`` loads) and the ``TYPE_CHECKING`` imports (what a
    type checker and the API reference read) name the same objects from the same modules."""
    tree = ast.parse((ROOT / "kvmodel" / "__init__.py").read_text(encoding="utf-8"))
    guarded = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    imported = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == kvmodel._FROM_CHECKERS
