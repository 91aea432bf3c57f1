"""Trace reading and writing (spec T1-T3, P12): every kind of bad input names its location."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmodel.errors import TraceError
from kvmodel.io.trace import iter_trace_lines, load_trace, parse_trace_lines
from kvmodel.replay import replay
from kvmodel.workloads import AgenticParams, RandomParams, generate_agentic, random_trace

OPEN = '{"op":"open","t":0,"ctx":"a","session":"s","agent":"main"}'
APPEND = (
    '{"op":"append","t":1,"ctx":"a","messages":[{"id":"m","role":"user","kind":"user","tokens":5}]}'
)


def _err(*lines: str) -> TraceError:
    def run() -> None:
        replay(parse_trace_lines(lines, source="t.jsonl"), "lru")

    with pytest.raises(TraceError) as ei:
        run()
    return ei.value


@pytest.mark.parametrize(
    ("bad", "line", "op", "field", "expect"),
    [
        ("{not json", 2, None, None, "malformed JSON"),
        ('{"op":"teleport","t":1}', 2, None, "op", "expected one of"),
        ('{"op":"close","t":1,"ctx":"a","why":1}', 2, "close", "why", "unknown field"),
        ('{"op":"close","t":"soon","ctx":"a"}', 2, "close", "t", "finite number"),
        (
            '{"op":"append","t":1,"ctx":"a","messages":[{"id":"m","role":"user","kind":"user",'
            '"tokens":0}]}',
            2,
            "append",
            "messages[0].tokens",
            "integer in [1, 1,000,000]",
        ),
        (
            '{"op":"append","t":1,"ctx":"a","messages":[{"id":"m","role":"user","kind":"poem",'
            '"tokens":3}]}',
            2,
            "append",
            "messages[0].kind",
            "one of system|",
        ),
        ('{"op":"remove","t":1,"ctx":"a","index":true}', 2, "remove", "index", "an integer"),
        ('{"op":"close","t":1,"ctx":"zz"}', 2, "close", "ctx", "unknown context 'zz'"),
        ('{"op":"unpin","t":1,"ctx":"a","ttl":3}', 2, "unpin", "ttl", "no ttl on unpin"),
        ('{"op":"infer","t":1,"ctx":"a","output":[]}', 2, "infer", "ctx", "no messages"),
    ],
)
def test_bad_line_names_file_line_op_and_field(
    bad: str, line: int, op: str | None, field: str | None, expect: str
) -> None:
    e = _err(OPEN, bad)
    assert (e.file, e.line, e.op, e.field) == ("t.jsonl", line, op, field)
    assert expect in str(e)
    assert str(e).startswith(f"t.jsonl:{line}")


def test_semantic_errors_are_located() -> None:
    e = _err(OPEN, APPEND, '{"op":"remove","t":2,"ctx":"a","index":3}')
    assert (e.line, e.op, e.field) == (3, "remove", "index")
    assert "expected an index in [0, 1)" in str(e)
    assert "(got 3)" in str(e)
    e = _err(OPEN, '{"op":"close","t":1,"ctx":"a"}', APPEND.replace('"t":1', '"t":2'))
    assert (e.line, e.op, e.field) == (3, "append", "ctx")
    assert "is closed" in str(e)
    e = _err(OPEN, APPEND, APPEND.replace('"t":1', '"t":2'))
    assert e.field == "id"
    assert "already live" in str(e)
    e = _err(OPEN, APPEND, '{"op":"pin","t":2,"ctx":"a","start":0,"stop":4}')
    assert e.field == "stop"
    assert "start <= stop <= 1" in str(e)


def test_time_going_backwards() -> None:
    e = _err(OPEN, APPEND.replace('"t":1', '"t":5'), '{"op":"close","t":4.5,"ctx":"a"}')
    assert (e.line, e.op, e.field) == (3, "close", "t")
    assert "went backwards: expected t >= 5 (got 4.5)" in str(e)
    assert "expected a number >= 0 (got -1)" in str(_err('{"op":"close","t":-1,"ctx":"a"}'))


def test_header_must_come_first_and_have_version_1() -> None:
    tr = parse_trace_lines(['{"kvtrace":1,"note":"x"}', OPEN])
    assert tr.header.meta["note"] == "x"
    assert len(tr.ops) == 1
    assert tr.lines == (2,)
    assert "version 1" in str(_err('{"kvtrace":2}'))
    assert "first line" in str(_err(OPEN, '{"kvtrace":1}'))


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace file"):
        load_trace(tmp_path / "missing.jsonl")
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TraceError, match="not UTF-8"):
        load_trace(p)


@given(st.integers(0, 10_000), st.integers(5, 80))
def test_random_traces_round_trip(seed: int, n: int) -> None:
    tr = random_trace(RandomParams(seed=seed, ops=n))
    text = list(iter_trace_lines(tr))
    back = parse_trace_lines(text)
    assert back.ops == tr.ops
    assert list(iter_trace_lines(back)) == text


def test_generated_workload_round_trips_and_matches_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parent.parent / "spec" / "trace.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for tr in (
        generate_agentic(AgenticParams(sessions=2, turns=2)),
        random_trace(RandomParams(seed=3, ops=200)),
    ):
        lines = list(iter_trace_lines(tr))
        for line in lines:
            validator.validate(json.loads(line))
        assert parse_trace_lines(lines).ops == tr.ops
        obs_schema = {**schema, "oneOf": [{"$ref": "#/$defs/observation"}]}
        ov = jsonschema.Draft202012Validator(obs_schema)
        for rec in replay(tr, "kvtether").engine.log.to_jsonl().splitlines():
            ov.validate(json.loads(rec))


def test_fewer_collections_restores_the_collector_settings() -> None:
    import gc

    from kvmodel.replay import GC_GEN0_DURING_REPLAY, fewer_collections

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with fewer_collections():
            assert gc.get_threshold() == (GC_GEN0_DURING_REPLAY, 10, 10)
            with fewer_collections():  # nested (a replay inside a replay's hook)
                assert gc.get_threshold()[0] == GC_GEN0_DURING_REPLAY
            assert gc.get_threshold()[0] == GC_GEN0_DURING_REPLAY
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0, 10, 10)  # collection off: left off
        with fewer_collections():
            assert gc.get_threshold() == (0, 10, 10)
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_a_replay_without_observation_has_the_same_summary_and_no_log() -> None:
    # issue 18 item 3: `kvmodel replay` without --observations builds no records
    import pytest

    from kvmodel.replay import replay
    from kvmodel.studies.metrics import compute_metrics
    from kvmodel.workloads import RandomParams, random_trace

    tr = random_trace(RandomParams(seed=9, ops=300))
    for policy in ("lru", "kvtether", "lachesis"):
        seen, blind = replay(tr, policy), replay(tr, policy, observe=False)
        assert blind.summary == seen.summary
        assert len(seen.engine.log) > 0
        assert len(blind.engine.log) == 0
        with pytest.raises(ValueError, match="observe=True"):
            compute_metrics(blind)


def test_a_prompt_bigger_than_memory_is_rejected_alike_with_and_without_the_log() -> None:
    """Without the log, a prompt whose misses outnumber every slot even if all indexed blocks
    were among them is rejected without counting them (issue 18: no pass over a long context
    per rejected inference); the summary is the logged run's, and the log's exact counts show
    that such rejections happened here (needed > 2x the slots: more than any index could cover)."""
    from kvmodel import EngineConfig, TierConfig
    from kvmodel.ids import TierName
    from kvmodel.io.observations import RejectObs
    from kvmodel.replay import replay
    from kvmodel.workloads import RandomParams, random_trace

    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), 3), TierConfig(TierName("hbf"), 2)))
    big = 0
    for seed in range(4):
        tr = random_trace(RandomParams(seed=seed, ops=200))
        for policy in ("lru", "kvtether", "lachesis"):
            seen, blind = replay(tr, policy, cfg), replay(tr, policy, cfg, observe=False)
            assert blind.summary == seen.summary
            big += sum(isinstance(o, RejectObs) and o.needed > 10 for o in seen.engine.log)
    assert big > 0


def test_every_policy_replays_alike_with_and_without_the_log() -> None:
    """Keeping the log must not change a replay (issue 18 item 3 takes shortcuts only when no
    record is kept): every registered policy, the general path's among them, on seeded random
    traces over one, two and three tiers small enough that inferences evict, spill, reject and
    recompute orphans. Same summary, and the same blocks left in the same slots."""
    from kvmodel import EngineConfig, TierConfig
    from kvmodel.ids import TierName
    from kvmodel.io.observations import AllocObs
    from kvmodel.policy import registered_policies
    from kvmodel.replay import replay
    from kvmodel.workloads import RandomParams, random_trace

    configs = [
        EngineConfig(4, (TierConfig(TierName("hbm"), 10),)),
        EngineConfig(4, (TierConfig(TierName("hbm"), 4), TierConfig(TierName("hbf"), 6))),
        EngineConfig(
            2,
            (
                TierConfig(TierName("hbm"), 4),
                TierConfig(TierName("hbf"), 6),
                TierConfig(TierName("ssd"), 8),
            ),
        ),
    ]
    evictions = rewrites = 0
    for seed in range(3):
        tr = random_trace(RandomParams(seed=seed, ops=200, max_context_tokens=32, p_system=0.3))
        for cfg in configs:
            for policy in registered_policies():
                seen, blind = replay(tr, policy, cfg), replay(tr, policy, cfg, observe=False)
                assert blind.summary == seen.summary, (seed, cfg, policy)
                resident = sorted(
                    (b.id, b.tier, b.spec.key) for b in seen.engine.residency.blocks.values()
                )
                assert resident == sorted(
                    (b.id, b.tier, b.spec.key) for b in blind.engine.residency.blocks.values()
                ), (seed, cfg, policy)
                evictions += sum(seen.engine.stats.evictions.values())
                rewrites += sum(isinstance(o, AllocObs) and o.rewrite for o in seen.engine.log)
    # memory small enough that the order matters, and orphans recomputed in place
    assert evictions > 5000
    assert rewrites > 0


def test_the_log_changes_no_question_the_engine_asks_its_victim_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A victim source may keep what it was asked (``PolicyOrder.evictable()`` keeps its
    candidates for the first ranking), so a replay without the log must ask it the same
    questions at the same ops as one with it, not only end alike: a shortcut taken only when no
    record is kept (a request admitted without counting its new blocks) must not ask for the
    evictable count where the counting path would not."""
    from kvmodel import EngineConfig, TierConfig
    from kvmodel._eviction import PolicyOrder
    from kvmodel._rank_index import RankIndex
    from kvmodel.ids import TierName
    from kvmodel.replay import replay
    from kvmodel.workloads import RandomParams, random_trace

    asked: list[tuple[str, int]] = []
    for cls in (PolicyOrder, RankIndex):
        original = cls.evictable

        def counted(self: Any, _original: Any = original) -> int:
            asked.append(("evictable", self.e.op_index))
            return int(_original(self))

        monkeypatch.setattr(cls, "evictable", counted)
    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), 4), TierConfig(TierName("hbf"), 6)))
    total = 0
    for seed in range(3):
        tr = random_trace(RandomParams(seed=seed, ops=200, max_context_tokens=32, p_system=0.3))
        for policy in ("lru", "kvtether", "ttl", "mori"):
            asked.clear()
            replay(tr, policy, cfg)
            seen = list(asked)
            asked.clear()
            replay(tr, policy, cfg, observe=False)
            assert asked == seen, (seed, policy)
            total += len(seen)
    assert total > 100
