"""``kvmodel generate --from-traces``: real sessions resampled into a multi-tenant workload
(kvmodel/workloads/resample.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kvmodel import EngineConfig, TierConfig
from kvmodel.cli import main
from kvmodel.errors import ConfigError
from kvmodel.ids import TierName
from kvmodel.io.importers import import_claude_code
from kvmodel.io.trace import (
    Append,
    EndSession,
    Open,
    Trace,
    TraceHeader,
    iter_trace_lines,
    load_trace,
)
from kvmodel.messages import MessageKind
from kvmodel.replay import replay
from kvmodel.workloads import AgenticParams, generate_agentic
from kvmodel.workloads.resample import ResampleParams, resample_sessions, sessions_of

DATA = Path(__file__).resolve().parent / "data"
CC = DATA / "claude_code" / "0000fixt-0000-4000-8000-000000000001.jsonl"
AMPLE = EngineConfig(16, (TierConfig(TierName("hbm"), 100_000),))


def test_each_copy_is_a_whole_session_shifted_to_its_arrival() -> None:
    pool = generate_agentic(AgenticParams(seed=1, sessions=3, turns=2))
    out = resample_sessions([pool], ResampleParams(seed=7, sessions=10, session_gap_s=5.0))
    copies = sessions_of([out])
    assert len(copies) == 10
    originals = {tuple(type(o).__name__ for o in s): s for s in sessions_of([pool])}
    starts = []
    for c in copies:
        shape = tuple(type(o).__name__ for o in c)
        assert shape in originals  # a real session, op for op
        orig = originals[shape]
        shift = c[0].t - orig[0].t
        assert [round(o.t - shift, 6) for o in c] == [round(o.t, 6) for o in orig]  # its timing
        starts.append(c[0].t)
    assert starts == sorted(starts)
    assert starts[0] == 0.0
    assert sum(1 for o in out.ops if isinstance(o, Open) and o.parent is None) == 10
    replay(out, "kvtether")  # a valid trace: every copy's ids are its own


def test_copies_share_the_fixed_prefix_and_nothing_else() -> None:
    real, _ = import_claude_code([CC])
    out = resample_sessions([real], ResampleParams(seed=0, sessions=2, session_gap_s=1e6))
    r = replay(out, "lru", AMPLE)  # nothing evicted, nothing reclaimed: all KV stays
    mains = [o for o in r.engine.log if o.kind == "infer" and o.ctx.endswith(".main")]
    first = {o.ctx.split(".")[0]: o for o in reversed(mains)}
    prefixes = [  # the main loop's and the sub-agent's fixed prefixes
        o.messages[0].tokens
        for o in real.ops
        if isinstance(o, Append) and o.messages[0].kind is MessageKind.SYSTEM
        and o.ctx.endswith((".main", ".agent-f1x7"))
    ]  # fmt: skip
    assert len(prefixes) == 2
    assert first["r0"].hit_tokens == 0
    assert first["r1"].hit_tokens == prefixes[0] // 16 * 16  # the system prompt, block-aligned
    # ... and beyond the two prefixes the second copy hits what its session would alone
    alone = replay(real, "lru", AMPLE).summary.hit_tokens
    assert r.summary.hit_tokens == 2 * alone + sum(n // 16 * 16 for n in prefixes)


def test_resampling_is_seeded() -> None:
    pool = generate_agentic(AgenticParams(seed=2, sessions=4, turns=1))

    def text(seed: int) -> list[str]:
        return list(iter_trace_lines(resample_sessions([pool], ResampleParams(seed, 6))))

    assert text(3) == text(3)
    assert text(3) != text(4)


def test_the_command_writes_a_replayable_workload(tmp_path: Path) -> None:
    src = tmp_path / "cc.jsonl"
    assert main(["import", "claude-code", str(CC), "-o", str(src)]) == 0
    out = tmp_path / "mt.jsonl"
    assert main(["generate", "--from-traces", str(src), "--sessions", "3", "-o", str(out)]) == 0
    trace = load_trace(out)
    assert Counter(type(o) for o in trace.ops)[EndSession] == 3
    assert trace.header.meta["generator"] == "from-traces"


def test_an_empty_pool_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no session to resample"):
        resample_sessions([Trace(TraceHeader(), ())], ResampleParams())
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"kvtrace": 1}\n')
    out = tmp_path / "out.jsonl"
    assert main(["generate", "--from-traces", str(empty), "-o", str(out)]) == 2
    assert not out.exists()


def test_copies_arrive_in_batches_as_the_generator_starts_its_sessions() -> None:
    """``arrival_batch`` k (spec/metrics.md E9): the copies are the same draws as one by one,
    the first of each batch at its own arrival and the others a millisecond apart after it --
    the generator's rule (:func:`~kvmodel.workloads.timeline.batch_start`), so a comparison of
    a preset with real sessions resampled at its gap and batch differs in the sessions alone."""
    pool = generate_agentic(AgenticParams(seed=1, sessions=3, turns=2))
    one = resample_sessions([pool], ResampleParams(seed=7, sessions=9, session_gap_s=5.0))
    three = resample_sessions(
        [pool], ResampleParams(seed=7, sessions=9, session_gap_s=5.0, arrival_batch=3)
    )
    assert "arrival_batch" not in one.header.meta  # (1: the header it always had)
    assert three.header.meta["arrival_batch"] == 3

    def starts(tr: Trace) -> list[float]:
        return [s[0].t for s in sessions_of([tr])]

    a, b = starts(one), starts(three)
    assert b == [round(a[i - i % 3] + 0.001 * (i % 3), 3) for i in range(9)]
    shapes = [[type(o).__name__ for o in s] for s in sessions_of([one])]
    assert [[type(o).__name__ for o in s] for s in sessions_of([three])] == shapes
    replay(three, "kvtether")
    with pytest.raises(ValueError, match="arrival_batch"):
        ResampleParams(arrival_batch=0)


def test_the_command_takes_an_arrival_batch(tmp_path: Path) -> None:
    src = tmp_path / "pool.jsonl"
    src.write_text("".join(f"{x}\n" for x in iter_trace_lines(generate_agentic())))
    out = tmp_path / "r.jsonl"
    argv = ["generate", "--from-traces", str(src), "--sessions", "6", "-o", str(out)]
    assert main([*argv, "--arrival-batch", "2"]) == 0
    assert load_trace(out).header.meta["arrival_batch"] == 2
    assert main([*argv, "--arrival-batch", "0"]) == 2


def test_what_the_sources_assumed_holds_of_the_copies() -> None:
    """A source's made-up times stay made up under the copies' names (so the statistics leave
    them out), and an assumed clock is still recorded."""
    pool = generate_agentic(AgenticParams(seed=1, sessions=2, turns=1))
    sid = next(op.session for op in pool.ops if isinstance(op, Open))
    meta = {**pool.header.meta, "untimed_sessions": [sid], "retimed": {"seed": 0}}
    out = resample_sessions(
        [Trace(TraceHeader(1, meta), pool.ops)], ResampleParams(seed=3, sessions=6)
    )
    copies = {op.session for op in out.ops if isinstance(op, Open)}
    assert set(out.header.meta["untimed_sessions"]) == {c for c in copies if c.endswith(sid)}
    assert out.header.meta["retimed"] == {"seed": 0}
