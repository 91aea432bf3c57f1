"""Import a Claude Code session transcript (JSONL, a tree via ``parentUuid``) into a trace.

What is read (see ``../shared/traces/README.md`` for the format's quirks):

* the main transcript in file order: ``user`` records (prompt text, or ``tool_result`` blocks)
  are appended; consecutive ``assistant`` records sharing one ``message.id`` are one API call,
  an ``infer`` whose outputs are its blocks (``thinking`` -> reasoning, ``text`` -> output,
  ``tool_use`` -> tool_call); a new user prompt first ends the turn (``turn_end``: Claude Code
  does not re-send old thinking);
* the fixed prefix the transcript omits (system prompt, tools) is one system message per agent
  kind, sized from the first call's ``usage`` (input + cache creation + cache read tokens) minus
  the visible messages; other sizes are characters / 2.2 (characters / 4 under-counts: README);
* ``Task`` sub-agents: the ``tool_result`` whose ``toolUseResult.agentId`` names a transcript in
  ``<session>/subagents/agent-<id>.jsonl`` becomes a worker (``open`` with a spawn record from
  the Task input, its own calls, then ``return`` of the result into the main context);
* auto-compaction (``compact_boundary`` then an ``isCompactSummary`` user record): a fork of the
  main context plus the compaction instruction, one ``infer`` producing the summary, ``close``;
  then the main context drops its history and continues from the summary.

A record is skipped (counted, with its file and line, and the reason printed) only where skipping
cannot change what the rest of the import means: a line that is not an object, a user record with
no content, a sub-agent or compaction transcript that is missing or empty (the visible result is
kept). A record of an unexpected shape (a string where an object or a time belongs) is an error
naming its file and line, and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from kvmodel.errors import KVModelError, TraceError
from kvmodel.ids import ContextId, MessageId, SessionId
from kvmodel.io.importers._limits import count
from kvmodel.io.importers.openai import ImportReport
from kvmodel.io.jsonl import read_jsonl
from kvmodel.io.trace import (
    Append,
    Close,
    EndSession,
    Fork,
    Infer,
    Op,
    Open,
    Remove,
    Return,
    Trace,
    TraceHeader,
    TurnEnd,
)
from kvmodel.messages import AgentKind, Message, MessageKind, Role, SpawnRecord

__all__ = ["import_claude_code"]

_CHARS_PER_TOKEN = 2.2


_SHAPE_ERRORS = (AttributeError, KeyError, TypeError, ValueError, RecursionError, UnicodeError)


def _read(
    path: Path, report: ImportReport, where: dict[int, tuple[str, int]]
) -> list[dict[str, Any]]:
    """The transcript's records; ``where`` learns each one's file and line (by ``id``, for the
    import's lifetime). A line that is JSON but not an object carries no record of any kind, so
    skipping it cannot change the import: it is counted, with its line number."""
    out = []
    for line, rec in read_jsonl(path, "transcript"):
        if isinstance(rec, dict):
            out.append(rec)
            where[id(rec)] = (str(path), line)
        else:
            report.skip(f"{path.name}:{line}: not a JSON object (carries no record; skipped)")
    return out


def _seconds(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _size(obj: Any) -> int:
    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True)
    return max(1, round(len(text) / _CHARS_PER_TOKEN))


def _hash(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=12)
    h.update("\x1f".join(parts).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


class _Agent:
    """Builds one agent's ops (main or a sub-agent) on the shared timeline."""

    def __init__(self, imp: _Importer, ctx: str, agent: AgentKind) -> None:
        self.imp = imp
        self.ctx = ContextId(ctx)
        self.agent = agent
        self.live_reasoning = False
        self.sized_prefix = False
        self.n_messages = 0

    def msg(self, role: Role, kind: MessageKind, tokens: int, h: str) -> Message:
        self.imp.n += 1
        self.n_messages += 1
        return Message(MessageId(f"{self.ctx}.m{self.imp.n}"), role, kind, max(1, tokens), h)

    def calls(self, records: list[dict[str, Any]], t0: float) -> None:
        """Append user records and infer assistant calls, in order."""
        i = 0
        while i < len(records):
            r = records[i]
            with self.imp.located(r):
                i = self.call(records, i, t0)
            i += 1

    def call(self, records: list[dict[str, Any]], i: int, t0: float) -> int:
        """The record at ``i`` (with the assistant records of its API call): the last index used."""
        r = records[i]
        t = _seconds(r["timestamp"]) - t0
        if r.get("type") == "assistant":
            mid = (r.get("message") or {}).get("id")
            group = [r]
            while (
                i + 1 < len(records)
                and records[i + 1].get("type") == "assistant"
                and (records[i + 1].get("message") or {}).get("id") == mid
            ):
                i += 1
                group.append(records[i])
            self.infer(group, t)
        elif r.get("type") == "user":
            self.imp.user(self, r, t, t0)
        return i

    def infer(self, group: list[dict[str, Any]], t: float) -> None:
        out: list[Message] = []
        for r in group:
            for block in (r.get("message") or {}).get("content") or []:
                if not isinstance(block, dict):
                    continue
                kind = {
                    "thinking": MessageKind.REASONING,
                    "text": MessageKind.OUTPUT,
                    "tool_use": MessageKind.TOOL_CALL,
                }.get(str(block.get("type")))
                if kind is None:
                    continue
                body = block.get("thinking") or block.get("text") or block.get("input") or ""
                out.append(
                    self.msg(
                        Role.ASSISTANT,
                        kind,
                        _size(body),
                        _hash("out", str(block.get("id", "")), json.dumps(body)),
                    )
                )
        usage = (group[0].get("message") or {}).get("usage") or {}
        if not self.sized_prefix and usage:
            self.sized_prefix = True
            total = sum(
                count(usage.get(k)) or 0  # the log's words: absurd or mistyped counts are absent
                for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            )
            self.imp.prefix_tokens.setdefault(self.agent, max(1, total - self.imp.visible))
        self.live_reasoning |= any(m.kind is MessageKind.REASONING for m in out)
        self.imp.ops.append(Infer(t, self.ctx, tuple(out)))


def _agent_file_name(agent_id: object) -> bool:
    """``agentId`` names a sub-agent transcript file only if it is a plain id (letters, digits,
    ``-``, ``_``; at most 128): never a path (``../x``) or a name the file system refuses."""
    return (
        isinstance(agent_id, str)
        and 0 < len(agent_id) <= 128
        and all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in agent_id)
    )


class _Importer:
    def __init__(self, path: Path, report: ImportReport) -> None:
        self.path = path
        self.report = report
        self.sid = SessionId(path.stem)
        self.ops: list[Op | _RemoveAll] = []
        self.n = 0
        self.visible = 0
        self.prefix_tokens: dict[AgentKind, int] = {}
        self.subagents = path.parent / path.stem / "subagents"
        self.where: dict[int, tuple[str, int]] = {}

    def read(self, path: Path) -> list[dict[str, Any]]:
        return _read(path, self.report, self.where)

    def at(self, r: dict[str, Any]) -> str:
        """``file:line`` of a record, for a skip message."""
        file, line = self.where.get(id(r), (str(self.path), 0))
        return f"{Path(file).name}:{line}"

    @contextmanager
    def located(self, r: dict[str, Any]) -> Iterator[None]:
        """A record shaped other than the importer expects (a string where an object or a time
        belongs, ...) is an error naming its file and line; nothing is written."""
        try:
            yield
        except KVModelError:
            raise
        except _SHAPE_ERRORS as e:
            file, line = self.where.get(id(r), (str(self.path), None))
            raise TraceError(
                f"record of type {str(r.get('type'))[:40]!r} is not shaped as expected "
                f"({type(e).__name__}: {str(e)[:200]})",
                file=file,
                line=line,
            ) from None

    def prefix(self, agent: _Agent, t: float) -> Append:
        """The omitted fixed prefix; its size is patched once a call's usage is known."""
        m = agent.msg(Role.SYSTEM, MessageKind.SYSTEM, 1, f"claude-code-{agent.agent.value}-prefix")
        return Append(t, agent.ctx, (m,))

    def user(self, agent: _Agent, r: dict[str, Any], t: float, t0: float) -> None:
        content = (r.get("message") or {}).get("content")
        if isinstance(content, str):
            if agent.live_reasoning:
                self.ops.append(TurnEnd(t, agent.ctx))
                agent.live_reasoning = False
            m = agent.msg(Role.USER, MessageKind.USER, _size(content), _hash("user", content))
            self.visible += m.tokens
            self.ops.append(Append(t, agent.ctx, (m,)))
            return
        if not isinstance(content, list):
            self.report.skip(f"{self.at(r)}: user record has no content (appends nothing)")
            return
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            body = block.get("content", "")
            result = r.get("toolUseResult")
            agent_id = result.get("agentId") if isinstance(result, dict) else None
            m = agent.msg(
                Role.TOOL,
                MessageKind.OBSERVATION,
                _size(body),
                _hash("tool", str(block.get("tool_use_id", "")), json.dumps(body)),
            )
            if (
                isinstance(result, dict)
                and _agent_file_name(agent_id)
                and (self.subagents / f"agent-{agent_id}.jsonl").exists()
            ):
                self.worker(agent, str(agent_id), result, m, t, t0)
            else:
                self.ops.append(Append(t, agent.ctx, (m,)))

    def worker(
        self,
        parent: _Agent,
        agent_id: str,
        result: dict[str, Any],
        res: Message,
        t: float,
        t0: float,
    ) -> None:
        recs = [
            x
            for x in self.read(self.subagents / f"agent-{agent_id}.jsonl")
            if x.get("type") in ("user", "assistant") and x.get("timestamp")
        ]
        if not recs:
            self.report.skip(
                f"{self.at(result)}: sub-agent {agent_id} transcript is empty "
                "(its result is appended as a plain tool result)"
            )
            self.ops.append(Append(t, parent.ctx, (res,)))
            return
        w = _Agent(self, f"{self.sid}.agent-{agent_id}", AgentKind.WORKER)
        start = _seconds(recs[0]["timestamp"]) - t0
        prompt = str(result.get("prompt", ""))
        spawn = SpawnRecord(
            prompt, tuple(sorted({str(result.get("subagent_type", "Task"))})), _size(prompt)
        )
        self.ops += [
            Open(start, w.ctx, self.sid, AgentKind.WORKER, parent.ctx, spawn),
            self.prefix(w, start),
        ]
        w.calls(recs, t0)
        self.ops.append(
            Return(
                max(t, start),
                w.ctx,
                parent.ctx,
                Message(res.id, res.role, MessageKind.RESULT, res.tokens, res.hash),
            )
        )

    def compaction(self, main: _Agent, summary: dict[str, Any], t: float, t0: float) -> None:
        files = sorted(self.subagents.glob("agent-acompact-*.jsonl"))
        done = {o.ctx for o in self.ops if isinstance(o, Fork)}
        comp = next((f for f in files if ContextId(f"{self.sid}.{f.stem}") not in done), None)
        content = (summary.get("message") or {}).get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if comp is not None:
            recs = [x for x in self.read(comp) if x.get("timestamp")]
            start = min(_seconds(x["timestamp"]) - t0 for x in recs) if recs else t
            cid = ContextId(f"{self.sid}.{comp.stem}")
            ins = main.msg(Role.USER, MessageKind.INSTRUCTION, 400, "claude-code-compaction")
            out = main.msg(Role.ASSISTANT, MessageKind.SUMMARY, _size(text), _hash("sum", text))
            self.ops += [
                Fork(start, cid, main.ctx),
                Append(start, cid, (ins,)),
                Infer(start, cid, (out,)),
                Close(max(start, t), cid),
            ]
        else:
            self.report.skip(
                f"{self.at(summary)}: no compaction transcript for this summary "
                "(the history is still replaced by it; the summarising call is not modelled)"
            )
        self.ops.append(_RemoveAll(t, main.ctx))
        m = main.msg(Role.USER, MessageKind.SUMMARY, _size(text), _hash("summary", text))
        self.ops.append(Append(t, main.ctx, (m,)))
        main.live_reasoning = False

    def run(self) -> list[Op]:
        records = [r for r in self.read(self.path) if r.get("timestamp")]
        if not records:
            raise TraceError("no timestamped records in transcript", file=str(self.path))
        with self.located(records[0]):
            t0 = _seconds(records[0]["timestamp"])
        main = _Agent(self, f"{self.sid}.main", AgentKind.MAIN)
        self.ops += [Open(0.0, main.ctx, self.sid, AgentKind.MAIN), self.prefix(main, 0.0)]
        chunk: list[dict[str, Any]] = []
        pending_boundary: dict[str, Any] | None = None
        for r in records:
            typ = r.get("type")
            if typ == "system" and r.get("subtype") == "compact_boundary":
                main.calls(chunk, t0)
                chunk = []
                pending_boundary = r
            elif typ == "user" and r.get("isCompactSummary"):
                main.calls(chunk, t0)
                chunk = []
                with self.located(r):
                    self.compaction(main, r, _seconds(r["timestamp"]) - t0, t0)
                pending_boundary = None
            elif typ in ("user", "assistant") and not r.get("isSidechain"):
                chunk.append(r)
        main.calls(chunk, t0)
        if pending_boundary is not None:
            self.report.skip(
                f"{self.at(pending_boundary)}: compact boundary without a summary "
                "(the context is left as it was)"
            )
        with self.located(records[-1]):
            self.ops.append(EndSession(_seconds(records[-1]["timestamp"]) - t0, self.sid))
        return self._finish()

    def _finish(self) -> list[Op]:
        """Patch prefix sizes, resolve remove-all markers, order the ops on one timeline."""
        lengths: dict[ContextId, int] = {}
        reasoning: dict[ContextId, int] = {}
        out: list[Op] = []
        for op in sorted(self.ops, key=lambda o: o.t):
            if (
                isinstance(op, Append)
                and op.messages[0].kind is MessageKind.SYSTEM
                and op.messages[0].hash is not None
                and op.messages[0].hash.endswith("-prefix")
            ):
                agent = AgentKind(op.messages[0].hash.split("-")[2])
                m = op.messages[0]
                size = self.prefix_tokens.get(agent, 1)
                op = Append(op.t, op.ctx, (Message(m.id, m.role, m.kind, size, m.hash),))
            if isinstance(op, _RemoveAll):
                n = lengths.get(op.ctx, 0)
                if n > 1:
                    out.append(Remove(op.t, op.ctx, 1, n - 1))
                    lengths[op.ctx] = 1
                continue
            out.append(op)
            _track(lengths, reasoning, op)
        return out


@attrs.frozen(slots=True)
class _RemoveAll:
    """Marker: drop everything after the prefix (resolved once lengths are known)."""

    t: float
    ctx: ContextId


def _track(lengths: dict[ContextId, int], reasoning: dict[ContextId, int], op: Op) -> None:
    """Message counts per context, so that a remove-all marker can name its range."""
    match op:
        case Open():
            lengths[op.ctx] = reasoning[op.ctx] = 0
        case Fork():
            lengths[op.ctx] = lengths.get(op.src, 0)
            reasoning[op.ctx] = reasoning.get(op.src, 0)
        case Append():
            lengths[op.ctx] = lengths.get(op.ctx, 0) + len(op.messages)
        case Infer():
            lengths[op.ctx] = lengths.get(op.ctx, 0) + len(op.output)
            reasoning[op.ctx] = reasoning.get(op.ctx, 0) + sum(
                1 for m in op.output if m.kind is MessageKind.REASONING
            )
        case Remove():
            lengths[op.ctx] = lengths.get(op.ctx, 0) - op.count
            reasoning[op.ctx] = 0  # only used to drop the whole history
        case Return():
            lengths[op.into] = lengths.get(op.into, 0) + 1
        case TurnEnd():
            lengths[op.ctx] = lengths.get(op.ctx, 0) - reasoning.get(op.ctx, 0)
            reasoning[op.ctx] = 0


def import_claude_code(paths: Iterable[str | Path]) -> tuple[Trace, ImportReport]:
    report = ImportReport()
    ops: list[Op] = []
    names = []
    for p in paths:
        path = Path(p)
        mine = _Importer(path, report).run()
        ops += mine
        names.append(path.name)
        report.conversations += 1
        report.requests += sum(1 for o in mine if isinstance(o, Infer))
    report.ops = len(ops)
    ops.sort(key=lambda o: o.t)
    return Trace(
        TraceHeader(1, {"kvtrace": 1, "importer": "claude-code", "sources": names}), tuple(ops)
    ), report
