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
    [
        *SHARED.glob("tau_bench/*.json"),
        *SHARED.glob("mini_swe_agent_gemini3pro/*.json"),
        *SHARED.glob("swe_agent_demo/*.traj"),
    ]
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


CLAUDE = sorted(SHARED.glob("claude_code_spotter/*.jsonl"))


@pytest.mark.skipif(not CLAUDE, reason="no Claude Code transcript in shared traces")
def test_claude_code_session_with_subagent_and_compaction(tmp_path: Path) -> None:
    out = tmp_path / "cc.jsonl"
    assert main(["import", "claude-code", str(CLAUDE[0]), "-o", str(out)]) == 0
    trace = load_trace(out)
    k = Counter(op_name(o) for o in trace.ops)
    assert k["open"] == 2  # main + the Explore sub-agent
    assert k["return"] == 1
    assert k["fork"] == k["close"] == 1  # the compaction call forks the main context
    assert k["remove"] == 1  # ... and the main context restarts from the summary
    assert k["turn_end"] >= 1
    s = replay(trace, "kvtether", load_config_big()).summary
    assert s.rejected == 0
    assert s.infers == k["infer"]
    # each call's prompt is large (the transcript omits a ~26k-token prefix, sized from usage)
    assert s.prompt_tokens / s.infers > 26_000


def load_config_big():  # type: ignore[no-untyped-def]
    from kvmodel import EngineConfig, TierConfig
    from kvmodel.ids import TierName

    return EngineConfig(16, (TierConfig(TierName("hbm"), 40_000),))


def test_claude_code_bad_transcript_is_located(tmp_path: Path) -> None:
    from kvmodel.importers import import_claude_code

    bad = tmp_path / "s.jsonl"
    bad.write_text('{"type":"user","timestamp":"2026-01-01T00:00:00Z"}\n{oops\n')
    with pytest.raises(TraceError) as ei:
        import_claude_code([bad])
    assert (ei.value.file, ei.value.line) == (str(bad), 2)


def test_imports_are_deterministic(tmp_path: Path) -> None:
    from kvmodel.trace import iter_trace_lines

    a, _ = import_openai(LOGS)
    b, _ = import_openai(LOGS)
    assert list(iter_trace_lines(a)) == list(iter_trace_lines(b))
