"""The OpenAI-format importer on every real trajectory in ../shared/traces (spec T1, P)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kvmodel.cli import main
from kvmodel.errors import TraceError
from kvmodel.importers import import_openai
from kvmodel.replay import replay
from kvmodel.trace import load_trace, op_name

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
LOGS = sorted(
    [*SHARED.glob("tau_bench/*.json"), *SHARED.glob("mini_swe_agent_gemini3pro/*.json"),
     *SHARED.glob("swe_agent_demo/*.traj")]
)
pytestmark = pytest.mark.skipif(not LOGS, reason=f"no shared traces under {SHARED}")


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name[:40])
def test_every_shared_log_imports_to_a_valid_trace(log: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    assert main(["import", "openai", str(log), "-o", str(out)]) == 0
    trace = load_trace(out)  # parses: every op valid
    s = replay(trace, "kvtether").summary
    assert s.infers > 0
    assert s.rejected == 0
    assert 0 < s.token_hit_rate < 1


def _kinds(name: str) -> Counter[str]:
    [log] = [p for p in LOGS if name in p.name]
    trace, report = import_openai([log])
    assert report.skipped == 0
    return Counter(op_name(o) for o in trace.ops)


def test_tau_bench_conversations_only_append() -> None:
    k = _kinds("airline")
    assert k["open"] == 12
    assert k["infer"] == k["append"]
    assert k["remove"] == k["replace"] == k["turn_end"] == 0


def test_swe_agent_history_processor_edits_become_replaces() -> None:
    k = _kinds("marshmallow")
    assert k["replace"] > 0
    assert k["remove"] == 0


def test_mini_swe_agent_reasoning_is_never_resent() -> None:
    k = _kinds("django")
    assert k["turn_end"] > 0


def test_unreadable_log_is_a_located_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match=r"bad\.json"):
        import_openai([bad])
    odd = tmp_path / "odd.json"
    odd.write_text("42")
    assert main(["import", "openai", str(odd), "-o", str(tmp_path / "o.jsonl")]) == 2
    assert not (tmp_path / "o.jsonl").exists()
