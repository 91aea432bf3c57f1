"""The importers on small fixtures of every supported format (``tests/data/``, written for the
project, always present) and on every real trajectory in ../shared/traces (spec T1, P), which a
fresh clone may not have: only the tests over the shared traces skip without them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kvmodel import EngineConfig, TierConfig
from kvmodel.cli import main
from kvmodel.errors import TraceError
from kvmodel.ids import TierName
from kvmodel.io.importers import import_openai
from kvmodel.io.trace import Append, Open, Trace, load_trace, op_name
from kvmodel.replay import replay

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = sorted((DATA / "openai").iterdir())
CC_FIXTURE = DATA / "claude_code" / "0000fixt-0000-4000-8000-000000000001.jsonl"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
LOGS = sorted(
    [
        *SHARED.glob("tau_bench/*.json"),
        *SHARED.glob("mini_swe_agent_gemini3pro/*.json"),
        *SHARED.glob("swe_agent_demo/*.traj"),
    ]
)
needs_shared = pytest.mark.skipif(not LOGS, reason=f"no shared traces under {SHARED}")


def _counts(trace: Trace) -> dict[str, int]:
    return dict(sorted(Counter(op_name(o) for o in trace.ops).items()))


@pytest.mark.parametrize(
    ("name", "ops"),
    [
        # tau-bench: two runs of plain tool calling, requests rebuilt from the final list
        ("airline_fixture.json", {"append": 8, "end_session": 2, "infer": 8, "open": 2}),
        # mini-swe-agent: provider reasoning is output, never re-sent (a turn_end per step)
        (
            "login_fixture.traj.json",
            {"append": 4, "end_session": 1, "infer": 4, "open": 1, "turn_end": 3},
        ),
        # SWE-agent: the history processor's elisions of old observations become replaces
        (
            "nested_fixture.traj",
            {"append": 5, "end_session": 1, "infer": 5, "open": 1, "replace": 2},
        ),
    ],
)
def test_fixture_imports_to_exact_primitives(
    name: str, ops: dict[str, int], tmp_path: Path
) -> None:
    out = tmp_path / "t.jsonl"
    assert main(["import", "openai", str(DATA / "openai" / name), "-o", str(out)]) == 0
    trace = load_trace(out)
    assert _counts(trace) == ops
    s = replay(trace, "kvtether").summary
    assert (s.infers, s.rejected) == (ops["infer"], 0)
    assert 0 < s.token_hit_rate < 1


def test_fixture_usage_sizes_requests() -> None:
    """mini-swe-agent logs carry usage: each request totals its logged prompt_tokens."""
    trace, report = import_openai([DATA / "openai" / "login_fixture.traj.json"])
    assert report.skipped == 0
    r = replay(trace, "lru")
    prompts = [o.prompt_tokens for o in r.engine.log if o.kind == "infer"]
    assert prompts == [180, 310, 440, 570]


def test_claude_code_fixture_with_subagent_turns_and_compaction(tmp_path: Path) -> None:
    out = tmp_path / "cc.jsonl"
    assert main(["import", "claude-code", str(CC_FIXTURE), "-o", str(out)]) == 0
    trace = load_trace(out)
    assert _counts(trace) == {
        "append": 11,
        "end_session": 1,
        "infer": 9,
        "open": 3,  # main, the Explore sub-agent, the one-shot compactor (spec R2)
        "remove": 1,
        "return": 1,
        "turn_end": 1,
    }
    [spawn] = [o for o in trace.ops if isinstance(o, Open) and o.spawn is not None]
    assert spawn.agent.value == "worker"
    assert spawn.spawn is not None
    assert spawn.spawn.instruction == "Find the deploy script and list its steps."
    assert spawn.spawn.agent_type == "Explore"  # from the Task call's input (R3)
    s = replay(trace, "kvtether").summary
    assert (s.infers, s.rejected) == (9, 0)
    # the omitted prefix is the first call's prompt (4 + 12000 tokens in all) minus the prompt
    first = next(o for o in trace.ops if isinstance(o, Append))
    assert first.messages[0].tokens == 12_004 - 32


@needs_shared
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


@needs_shared
def test_tau_bench_conversations_only_append() -> None:
    # (every tau-bench file: tasks 3-24 joined tasks 0-2 in ../shared on 2026-12-06)
    assert _kinds("airline.tasks0-2")["open"] == 12
    for log in [p for p in LOGS if "airline" in p.name]:
        k = _kinds(log.name)
        assert k["infer"] == k["append"]
        assert k["remove"] == k["replace"] == k["turn_end"] == 0


@needs_shared
def test_swe_agent_history_processor_edits_become_replaces() -> None:
    k = _kinds("marshmallow")
    assert k["replace"] > 0
    assert k["remove"] == 0


@needs_shared
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
    assert k["open"] == 3  # main + the Explore sub-agent + the one-shot compactor (R2)
    assert k["return"] == 1
    assert k["fork"] == k["close"] == 0
    assert k["remove"] == 1  # ... and the main context restarts from the summary
    assert k["turn_end"] >= 1
    s = replay(trace, "kvtether", load_config_big()).summary
    assert s.rejected == 0
    assert s.infers == k["infer"]
    # each call's prompt is large (the transcript omits a ~26k-token prefix, sized from usage)
    assert s.prompt_tokens / s.infers > 26_000


#: sessions whose hit ratio the model does not reproduce yet, and why (measured 2026-12-06)
_HIT_RATIO_GAPS = {
    "8463c716": "two calls the model cannot explain from this session alone: the first finds "
    "17,842 tokens already in the provider's cache (from before the session), and call 142 "
    "finds 132,200 where the model finds 42,608; in all 0.9823 against the provider's 0.9836",
}


@pytest.mark.skipif(not CLAUDE, reason="no Claude Code transcript in shared traces")
@pytest.mark.parametrize(
    "session",
    [
        pytest.param(
            i,
            id=p.stem[:8],
            marks=[pytest.mark.xfail(strict=True, reason=_HIT_RATIO_GAPS[p.stem[:8]])]
            if p.stem[:8] in _HIT_RATIO_GAPS
            else [],
        )
        for i, p in enumerate(CLAUDE)
    ],
)
def test_claude_code_session_matches_the_providers_own_counts(session: int) -> None:
    """spec R1, R4 against the log's ground truth, for every session in ../shared (two joined
    the first on 2026-12-06): one inference per API call of the main loop, each holding the
    prompt the provider counted, and with ample memory a hit ratio near the provider's cache
    (which also expires entries after 5 idle minutes, so it hits less)."""
    import json

    from kvmodel.io.importers import import_claude_code

    path = CLAUDE[session]
    usage: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("type") == "assistant" and not r.get("isSidechain"):
            usage.setdefault(r["message"]["id"], r["message"]["usage"])
    sent = [
        u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
        for u in usage.values()
    ]
    trace, _ = import_claude_code([path])
    r = replay(trace, "lru", load_config_big())
    main_calls = [o for o in r.engine.log if o.kind == "infer" and o.ctx.endswith(".main")]
    assert len(main_calls) == len(usage)
    if path.stem.startswith("4d5611e5"):  # the session the importer was first written on
        assert len(usage) == 139
    assert [o.prompt_tokens for o in main_calls] == sent
    ours = sum(o.hit_tokens for o in main_calls) / sum(sent)
    theirs = sum(u["cache_read_input_tokens"] for u in usage.values()) / sum(sent)
    assert theirs < ours < theirs + 0.02


def load_config_big() -> EngineConfig:
    return EngineConfig(16, (TierConfig(TierName("hbm"), 40_000),))


def test_claude_code_bad_transcript_is_located(tmp_path: Path) -> None:
    from kvmodel.io.importers import import_claude_code

    bad = tmp_path / "s.jsonl"
    bad.write_text('{"type":"user","timestamp":"2026-01-01T00:00:00Z"}\n{oops\n')
    with pytest.raises(TraceError) as ei:
        import_claude_code([bad])
    assert (ei.value.file, ei.value.line) == (str(bad), 2)


def test_imports_are_deterministic() -> None:
    from kvmodel.io.importers import import_claude_code
    from kvmodel.io.trace import iter_trace_lines

    for logs in (FIXTURES, LOGS):
        if logs:
            a, _ = import_openai(logs)
            b, _ = import_openai(logs)
            assert list(iter_trace_lines(a)) == list(iter_trace_lines(b))
    c, _ = import_claude_code([CC_FIXTURE])
    d, _ = import_claude_code([CC_FIXTURE])
    assert list(iter_trace_lines(c)) == list(iter_trace_lines(d))


def test_a_record_of_an_unexpected_shape_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # kvmodel issue 20: a string timestamp crashed the importer with a ValueError
    import json

    lines = [json.loads(x) for x in CC_FIXTURE.read_text().splitlines() if x.strip()]
    lines[1]["timestamp"] = "x"
    bad = tmp_path / CC_FIXTURE.name
    bad.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out.jsonl"
    assert main(["import", "claude-code", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: record of type 'user' is not shaped as expected (ValueError" in err
    assert not out.exists()


def test_a_skipped_record_is_reported_with_its_line_and_why(tmp_path: Path) -> None:
    # issue 20, item 3: a skip names the file and line and says why skipping it is harmless
    import json

    lines = [json.loads(x) for x in CC_FIXTURE.read_text().splitlines() if x.strip()]
    k = next(i for i, r in enumerate(lines) if r.get("type") == "user")
    lines[k]["message"]["content"] = None
    bad = tmp_path / CC_FIXTURE.name
    bad.write_text("".join(json.dumps(x) + "\n" for x in lines))
    from kvmodel.io.importers import import_claude_code

    (tmp_path / "clean").mkdir()
    same = tmp_path / "clean" / CC_FIXTURE.name  # also without its sub-agent files
    same.write_text(CC_FIXTURE.read_text())
    _, report = import_claude_code([bad])
    _, clean = import_claude_code([same])
    assert report.skipped == clean.skipped + 1
    assert report.requests == clean.requests
    assert f"{bad.name}:{k + 1}: user record has no content (appends nothing)" in report.warnings


def test_an_import_never_writes_a_trace_the_model_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvmodel.io.importers as importers
    from kvmodel.io.trace import Infer, TraceHeader

    def broken(paths: object) -> tuple[Trace, object]:
        real, report = import_openai([DATA / "openai" / "airline_fixture.json"])
        return Trace(TraceHeader(), (*real.ops, Infer(1e9, "never-opened"))), report  # type: ignore[arg-type]

    monkeypatch.setattr(importers, "import_openai", broken)
    out = tmp_path / "out.jsonl"
    log = DATA / "openai" / "airline_fixture.json"
    assert main(["import", "openai", str(log), "-o", str(out)]) == 2
    assert "would write a trace the model rejects" in capsys.readouterr().err
    assert not out.exists()
