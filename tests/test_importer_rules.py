"""Each rule of spec/importers.md (R1-R5) pinned on a transcript written here, record by record,
and where it matters replayed: what the trace states and what the model then does with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvmodel import EngineConfig, TierConfig
from kvmodel.ids import TierName
from kvmodel.io.importers import import_claude_code, import_openai
from kvmodel.io.trace import Append, Infer, Open, Remove, Return, Trace, op_name
from kvmodel.messages import AgentKind, MessageKind
from kvmodel.replay import replay
from kvmodel.workloads.stats import workload_stats

BIG = EngineConfig(16, (TierConfig(TierName("hbm"), 10_000),))


class Transcript:
    """A Claude Code session written record by record (times in seconds from 10:00:00)."""

    def __init__(self, root: Path, sid: str = "0000rule-0000-4000-8000-000000000001") -> None:
        self.root = root
        self.sid = sid
        self.records: list[dict[str, Any]] = []
        self.n = 0

    @staticmethod
    def ts(t: float) -> str:
        return f"2026-03-01T10:{int(t) // 60:02d}:{t % 60:06.3f}Z"

    def _rec(self, out: list[dict[str, Any]], t: float, **kw: Any) -> None:
        self.n += 1
        out.append({"uuid": f"u{self.n}", "timestamp": self.ts(t), "isSidechain": False, **kw})

    def prompt(self, t: float, text: str, out: list[dict[str, Any]] | None = None) -> None:
        self._rec(
            self.records if out is None else out,
            t,
            type="user",
            message={"role": "user", "content": text},
        )

    def call(
        self,
        t: float,
        mid: str,
        block: dict[str, Any],
        *,
        prompt: int,
        model: str = "model-a",
        out: list[dict[str, Any]] | None = None,
    ) -> None:
        """One assistant record (one content block) of API call ``mid``, whose whole prompt the
        provider counted as ``prompt`` tokens."""
        usage = {
            "input_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": prompt - 1,
            "output_tokens": 1,
        }
        self._rec(
            self.records if out is None else out,
            t,
            type="assistant",
            message={
                "id": mid,
                "role": "assistant",
                "model": model,
                "content": [block],
                "usage": usage,
            },
        )

    def result(
        self,
        t: float,
        call: str,
        text: str,
        extra: dict[str, Any] | None = None,
        out: list[dict[str, Any]] | None = None,
    ) -> None:
        block = {"type": "tool_result", "tool_use_id": call, "content": text}
        self._rec(
            self.records if out is None else out,
            t,
            type="user",
            message={"role": "user", "content": [block]},
            **({"toolUseResult": extra} if extra else {}),
        )

    def sub(self, name: str, records: list[dict[str, Any]]) -> None:
        d = self.root / self.sid / "subagents"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"agent-{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def write(self) -> Path:
        p = self.root / f"{self.sid}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in self.records))
        return p


def tool(call: str, name: str = "Read", **inp: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call, "name": name, "input": inp or {"path": call}}


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def _import(*paths: Path) -> Trace:
    trace, report = import_claude_code(paths)
    assert report.skipped == 0, report.warnings
    return trace


def test_r1_a_response_with_parallel_tool_calls_is_one_inference(tmp_path: Path) -> None:
    s = Transcript(tmp_path)
    s.prompt(0, "Read both files.")
    s.call(1, "msg_1", tool("toolu_a"), prompt=9_000)
    s.result(2, "toolu_a", "contents of a " * 40)  # logged while the response still streams
    s.call(3, "msg_1", tool("toolu_b"), prompt=9_000)
    s.result(4, "toolu_b", "contents of b " * 40)
    s.call(6, "msg_2", text("Both read."), prompt=9_700)
    trace = _import(s.write())
    names = [op_name(o) for o in trace.ops]
    assert names == [
        "open",
        "append",
        "append",
        "infer",
        "append",
        "append",
        "infer",
        "end_session",
    ]
    first = next(o for o in trace.ops if isinstance(o, Infer))
    assert [m.kind for m in first.output] == [MessageKind.TOOL_CALL] * 2
    assert first.t == 1.0  # timed by the response's first record
    # sizes follow the provider's counts: each request holds exactly what it counted (R4)
    r = replay(trace, "lru", BIG)
    assert [o.prompt_tokens for o in r.engine.log if o.kind == "infer"] == [9_000, 9_700]


def test_r2_compaction_is_a_one_shot_compactor_at_its_instructions_time(tmp_path: Path) -> None:
    s = Transcript(tmp_path)
    s.prompt(0, "Fix the bug.")
    s.call(10, "msg_1", tool("toolu_a"), prompt=20_000)
    s.result(20, "toolu_a", "a long file " * 200)
    s.call(30, "msg_2", tool("toolu_b"), prompt=21_000)
    s.result(40, "toolu_b", "another file " * 200)
    s._rec(s.records, 50, type="system", subtype="compact_boundary")
    s._rec(
        s.records,
        95,
        type="user",
        isCompactSummary=True,
        message={"role": "user", "content": "Summary: the bug is in b."},
    )
    s.call(100, "msg_3", text("Fixed."), prompt=6_000)
    comp: list[dict[str, Any]] = []
    s.result(20, "toolu_a", "a copied hook reminder", out=comp)  # copies carry old times
    s.prompt(55, "Your task is to create a detailed summary of the conversation so far.", comp)
    s.call(
        90,
        "msg_c",
        text("<analysis>...</analysis> Summary: the bug is in b."),
        prompt=22_500,
        out=comp,
    )
    s.sub("acompact-0f0f0f", comp)
    trace = _import(s.write())
    [opened] = [o for o in trace.ops if isinstance(o, Open) and o.agent is AgentKind.COMPACTOR]
    assert (opened.t, opened.one_shot, opened.parent) == (55.0, True, f"{s.sid}.main")
    [copy] = [o for o in trace.ops if isinstance(o, Append) and o.ctx == opened.ctx]
    main_ids = [
        m.id
        for o in trace.ops
        if isinstance(o, (Append, Infer)) and o.t < 55 and o.ctx == f"{s.sid}.main"
        for m in (o.messages if isinstance(o, Append) else o.output)
    ]
    assert [m.id for m in copy.messages[:-1]] == main_ids  # the main context, as it stood
    assert copy.messages[-1].kind is MessageKind.INSTRUCTION
    [call] = [o for o in trace.ops if isinstance(o, Infer) and o.ctx == opened.ctx]
    assert call.t == 90.0
    assert [m.kind for m in call.output] == [MessageKind.SUMMARY]
    assert "close" not in [op_name(o) for o in trace.ops]  # one-shot: it closes by itself
    [cut] = [o for o in trace.ops if isinstance(o, Remove)]
    assert (cut.t, cut.ctx, cut.index) == (95.0, f"{s.sid}.main", 1)
    r = replay(trace, "lru", BIG)
    infers = [o for o in r.engine.log if o.kind == "infer"]
    summarise = next(o for o in infers if o.ctx == opened.ctx)
    assert summarise.prompt_tokens == 22_500
    # the copy shares the main context's KV: its last request and that request's output (KV
    # written by decoding), to the last full block
    [last] = [o for o in trace.ops if isinstance(o, Infer) and o.t == 30]
    assert summarise.hit_tokens == (21_000 + sum(m.tokens for m in last.output)) // 16 * 16
    assert not r.engine.contexts[opened.ctx].is_open


def test_r3_sub_agents_keep_their_type_and_reviewers_are_reviewers(tmp_path: Path) -> None:
    s = Transcript(tmp_path)
    s.prompt(0, "Explore, then review.")
    for k, (kind, t) in enumerate((("Explore", 1), ("code-reviewer", 20))):
        s.call(
            t,
            f"msg_{k}",
            tool(f"toolu_{k}", "Task", subagent_type=kind, prompt=f"do part {k}", description="d"),
            prompt=5_000 + k,
        )
        work: list[dict[str, Any]] = []
        s.prompt(t + 1, f"do part {k}", work)
        s.call(t + 2, f"msg_s{k}", text(f"part {k} done"), prompt=3_000, out=work)
        s.sub(f"a{k}", work)
        s.result(t + 5, f"toolu_{k}", f"part {k} done", {"agentId": f"a{k}", "prompt": "?"})
    trace = _import(s.write())
    opened = [o for o in trace.ops if isinstance(o, Open) and o.spawn is not None]
    assert [
        (o.agent, o.spawn.agent_type, o.spawn.instruction, o.spawn.tools)  # type: ignore[union-attr]
        for o in opened
    ] == [
        (AgentKind.WORKER, "Explore", "do part 0", ()),
        (AgentKind.REVIEWER, "code-reviewer", "do part 1", ()),
    ]
    assert len([o for o in trace.ops if isinstance(o, Return)]) == 2
    # sub-agents of different types do not share a fixed prefix (R4)
    prefixes = [
        o.messages[0].hash
        for o in trace.ops
        if isinstance(o, Append) and o.messages[0].kind is MessageKind.SYSTEM
    ]
    assert len(set(prefixes)) == 3


def test_r4_a_model_switch_recomputes_the_context(tmp_path: Path) -> None:
    s = Transcript(tmp_path)
    s.prompt(0, "Start.")
    s.call(1, "msg_1", tool("toolu_a"), prompt=8_000)
    s.result(2, "toolu_a", "x " * 300)
    s.call(3, "msg_2", tool("toolu_b"), prompt=8_400)  # same model: hits
    s.result(4, "toolu_b", "y " * 300)
    s.call(5, "msg_3", text("done"), prompt=8_800, model="model-b")  # switched
    trace = _import(s.write())
    [rm] = [o for o in trace.ops if isinstance(o, Remove)]
    again = next(o for o in trace.ops if isinstance(o, Append) and o.t == rm.t)
    assert rm.index == 0
    assert rm.count == len(again.messages)
    assert all(m.hash is not None and m.hash.endswith("@model-b") for m in again.messages)
    r = replay(trace, "lru", BIG)
    hits = [o.hit_tokens for o in r.engine.log if o.kind == "infer"]
    assert hits[1] > 7_000
    assert hits[2] == 0


def test_r5_sessions_imported_together_share_one_clock(tmp_path: Path) -> None:
    a = Transcript(tmp_path, "0000rule-0000-4000-8000-00000000000a")
    a.prompt(0, "first session")
    a.call(2, "msg_a", text("ok"), prompt=5_000)
    b = Transcript(tmp_path, "0000rule-0000-4000-8000-00000000000b")
    b.prompt(100, "second session, 100 s later")
    b.call(103, "msg_b", text("ok"), prompt=5_000)
    trace = _import(a.write(), b.write())
    opens = {o.ctx: o.t for o in trace.ops if isinstance(o, Open)}
    assert opens == {f"{a.sid}.main": 0.0, f"{b.sid}.main": 100.0}
    assert [o.t for o in trace.ops if isinstance(o, Infer)] == [2.0, 103.0]


def test_r5_openai_conversations_share_one_clock(tmp_path: Path) -> None:
    def run(name: str, created: float | None) -> dict[str, Any]:
        resp = {"created": created} if created is not None else {}
        return {
            "messages": [
                {"role": "system", "content": "You are a coder."},
                {"role": "user", "content": f"task {name}"},
                {"role": "assistant", "content": "done", "extra": {"response": resp}},
            ]
        }

    paths = []
    for name, created in (("a", 1_700_000_000.0), ("b", 1_700_000_250.0), ("c", None)):
        p = tmp_path / f"{name}.traj.json"
        p.write_text(json.dumps(run(name, created)))
        paths.append(p)
    trace, report = import_openai(paths)
    assert {o.ctx: o.t for o in trace.ops if isinstance(o, Open)} == {
        "a": 0.0,
        "b": 250.0,
        "c": 0.0,
    }
    assert report.untimed == 1  # ... and the import says which had no clock
    assert trace.header.meta["untimed_sessions"] == ["c"]  # (so R8's waits leave it out)
    assert workload_stats(trace).wait_p50_s is None  # no logged wait: a and b infer once
    timed, _ = import_openai(paths[:2])
    assert "untimed_sessions" not in timed.header.meta
