"""Import Claude Code session transcripts (JSONL, a tree via ``parentUuid``) into a trace.

The rules are spec/importers.md (R1-R6); in short:

* the main transcript in file order: ``user`` records (prompt text, or ``tool_result`` blocks)
  are appended; every ``assistant`` record of one ``message.id`` is one API call, one ``infer``
  whose outputs are its blocks (``thinking`` -> reasoning, ``text`` -> output, ``tool_use`` ->
  tool_call), and the tool results logged between its records follow it (R1); a new user prompt
  first ends the turn (``turn_end``: Claude Code does not re-send old thinking);
* the fixed prefix the transcript omits (system prompt, tools) is one system message per (agent
  kind, sub-agent type, model), sized from the context's first call's ``usage`` (input + cache
  creation + cache read tokens) minus what the context held before it; a call to another model
  than the context's previous call re-keys the context's KV (R4); other sizes are characters /
  2.2 (characters / 4 under-counts: ../shared/traces/README.md);
* ``Task`` sub-agents: the ``tool_result`` whose ``toolUseResult.agentId`` names a transcript in
  ``<session>/subagents/agent-<id>.jsonl`` becomes a worker, or a reviewer if its type says so
  (``open`` with a spawn record from the Task input, its type included; its own calls; then
  ``return`` of the result into the main context) (R3);
* auto-compaction (``compact_boundary`` then an ``isCompactSummary`` user record): a one-shot
  compactor context holding a copy of the main context and the instruction, opened when the
  instruction was sent, whose one ``infer`` produces the summary; then the main context drops its
  history and continues from the summary (R2);
* all files imported together share one clock: seconds since the earliest record (R5).

A record is skipped (counted, with its file and line, and the reason printed) only where skipping
cannot change what the rest of the import means: a line that is not an object, a user record with
no content, a sub-agent or compaction transcript that is missing or empty, or a compaction
transcript without its instruction (the visible result is kept). A record of an unexpected shape
(a string where an object or a time belongs) is an error naming its file and line, and nothing is
written.
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
from kvmodel.io.importers._sizes import calibrated, track_live
from kvmodel.io.importers.openai import ImportReport
from kvmodel.io.jsonl import read_jsonl
from kvmodel.io.trace import (
    Append,
    EndSession,
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


def _body(r: dict[str, Any]) -> dict[str, Any]:
    """A record's ``message`` object (absent: empty; not an object: a shape error, located by
    the caller)."""
    m = r.get("message") or {}
    if not isinstance(m, dict):
        raise TypeError(f"message is a {type(m).__name__}, not an object")
    return m


def _is_tool_results(r: dict[str, Any]) -> bool:
    return r.get("type") == "user" and isinstance(_body(r).get("content"), list)


class _Agent:
    """One context's ops (the main loop, a sub-agent) on the import's clock."""

    def __init__(self, imp: _Importer, ctx: str, agent: AgentKind, agent_type: str = "") -> None:
        self.imp = imp
        self.ctx = ContextId(ctx)
        self.agent = agent
        self.agent_type = agent_type
        self.live_reasoning = False
        #: (agent kind, sub-agent type, model of the first call): whose prefix it shares (R4)
        self.key: tuple[str, str, str] | None = None
        self.model: str | None = None  # of the last call
        self.sized = False
        self.before_first_call = 0  # tokens appended before the first call (R4)

    def msg(self, role: Role, kind: MessageKind, tokens: int, h: str) -> Message:
        self.imp.n += 1
        m = Message(MessageId(f"{self.ctx}.m{self.imp.n}"), role, kind, max(1, tokens), h)
        if not self.sized and kind is not MessageKind.SYSTEM:
            self.before_first_call += m.tokens
        return m

    def calls(self, records: list[dict[str, Any]], t0: float) -> None:
        """Append user records and infer assistant calls, in order."""
        i = 0
        while i < len(records):
            r = records[i]
            with self.imp.located(r):
                if r.get("type") == "assistant":
                    i = self.response(records, i, t0)
                    continue
                if r.get("type") == "user":
                    self.imp.user(self, r, _seconds(r["timestamp"]) - t0, t0)
            i += 1

    def response(self, records: list[dict[str, Any]], i: int, t0: float) -> int:
        """The API call whose first assistant record is at ``i``: one ``infer`` of every record
        of its ``message.id``, then the tool results logged between them (R1). The index after
        its last record."""
        first = records[i]
        mid = _body(first).get("id")
        group = [first]
        between: list[dict[str, Any]] = []
        pending: list[dict[str, Any]] = []
        end = i + 1
        for j in range(i + 1, len(records)) if isinstance(mid, str) else ():
            x = records[j]
            with self.imp.located(x):
                if x.get("type") == "assistant" and _body(x).get("id") == mid:
                    group.append(x)
                    between += pending
                    pending = []
                    end = j + 1
                elif _is_tool_results(x):
                    pending.append(x)
                else:
                    break
        self.infer(group, _seconds(first["timestamp"]) - t0)
        for u in between:
            with self.imp.located(u):
                self.imp.user(self, u, _seconds(u["timestamp"]) - t0, t0)
        return end

    def infer(self, group: list[dict[str, Any]], t: float) -> None:
        head = _body(group[0])
        model = head.get("model")
        model = model if isinstance(model, str) and model else None
        if self.key is None:
            self.key = (self.agent.value, self.agent_type, model or "")
        elif model is not None and self.model is not None and model != self.model:
            self.imp.ops.append(_Rekey(t, self.ctx, model))  # R4: a model switch
        self.model = model or self.model
        usage = head.get("usage") or {}
        if not self.sized and usage:
            self.sized = True
            total = _prompt(usage)
            self.imp.prefix_tokens.setdefault(self.key, max(1, total - self.before_first_call))
        out: list[Message] = []
        for r in group:
            for block in _body(r).get("content") or []:
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
                if kind is MessageKind.TOOL_CALL and isinstance(body, dict):
                    self.imp.tool_inputs[str(block.get("id", ""))] = body
                out.append(
                    self.msg(
                        Role.ASSISTANT,
                        kind,
                        _size(body),
                        _hash("out", str(block.get("id", "")), json.dumps(body)),
                    )
                )
        self.live_reasoning |= any(m.kind is MessageKind.REASONING for m in out)
        op = Infer(t, self.ctx, tuple(out))
        if usage:
            self.imp.prompt_sizes[id(op)] = _prompt(usage)
        self.imp.ops.append(op)


def _prompt(usage: dict[str, Any]) -> int:
    """A call's whole prompt as the provider counted it (the log's words: an absurd or mistyped
    count is absent)."""
    return sum(
        count(usage.get(k)) or 0
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )


def _agent_file_name(agent_id: object) -> bool:
    """``agentId`` names a sub-agent transcript file only if it is a plain id (letters, digits,
    ``-``, ``_``; at most 128): never a path (``../x``) or a name the file system refuses."""
    return (
        isinstance(agent_id, str)
        and 0 < len(agent_id) <= 128
        and all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in agent_id)
    )


def _text_of(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content)


class _Importer:
    def __init__(self, path: Path, report: ImportReport) -> None:
        self.path = path
        self.report = report
        self.sid = SessionId(path.stem)
        self.ops: list[Op | _Marker] = []
        self.n = 0
        self.prefix_tokens: dict[tuple[str, str, str], int] = {}
        self.prefixes: dict[MessageId, _Agent] = {}
        #: the provider's prompt size of each call that logged one, by ``id`` of its infer (R4)
        self.prompt_sizes: dict[int, int] = {}
        #: every tool call's input by its ``tool_use`` id (a Task call's names the sub-agent type)
        self.tool_inputs: dict[str, dict[str, Any]] = {}
        self.compactions_used: set[Path] = set()
        self.subagents = path.parent / path.stem / "subagents"
        self.where: dict[int, tuple[str, int]] = {}
        self.records = [r for r in self.read(path) if r.get("timestamp")]
        if not self.records:
            raise TraceError("no timestamped records in transcript", file=str(path))

    def start(self) -> float:
        """The earliest time of the main transcript (R5)."""
        times = []
        for r in self.records:
            with self.located(r):
                times.append(_seconds(r["timestamp"]))
        return min(times)

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
        """The omitted fixed prefix; its size and key are set once a call is known (R4)."""
        m = agent.msg(Role.SYSTEM, MessageKind.SYSTEM, 1, "claude-code-prefix")
        self.prefixes[m.id] = agent
        return Append(t, agent.ctx, (m,))

    def user(self, agent: _Agent, r: dict[str, Any], t: float, t0: float) -> None:
        content = _body(r).get("content")
        if isinstance(content, str):
            if agent.live_reasoning:
                self.ops.append(TurnEnd(t, agent.ctx))
                agent.live_reasoning = False
            m = agent.msg(Role.USER, MessageKind.USER, _size(content), _hash("user", content))
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
            call = str(block.get("tool_use_id", ""))
            m = agent.msg(
                Role.TOOL,
                MessageKind.OBSERVATION,
                _size(body),
                _hash("tool", call, json.dumps(body)),
            )
            if (
                isinstance(result, dict)
                and _agent_file_name(agent_id)
                and (self.subagents / f"agent-{agent_id}.jsonl").exists()
            ):
                task = self.tool_inputs.get(call, {})
                self.worker(agent, str(agent_id), task, result, m, t, t0)
            else:
                self.ops.append(Append(t, agent.ctx, (m,)))

    def worker(
        self,
        parent: _Agent,
        agent_id: str,
        task: dict[str, Any],
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
        kind = task.get("subagent_type", "")
        kind = kind if isinstance(kind, str) else ""
        agent = AgentKind.REVIEWER if "review" in kind.lower() else AgentKind.WORKER  # R3
        w = _Agent(self, f"{self.sid}.agent-{agent_id}", agent, kind[:200])
        start = _seconds(recs[0]["timestamp"]) - t0
        prompt = task.get("prompt")
        prompt = prompt if isinstance(prompt, str) else str(result.get("prompt", ""))
        spawn = SpawnRecord(prompt, (), _size(prompt), w.agent_type)
        self.ops += [
            Open(start, w.ctx, self.sid, agent, parent.ctx, spawn),
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

    def compaction_file(self, t: float, t0: float) -> tuple[Path, list[dict[str, Any]]] | None:
        """The unused compaction transcript whose answer is nearest the summary's time ``t``."""
        best: tuple[float, Path, list[dict[str, Any]]] | None = None
        for f in sorted(self.subagents.glob("agent-acompact-*.jsonl")):
            if f in self.compactions_used:
                continue
            recs = [x for x in self.read(f) if x.get("timestamp")]
            answers = [x for x in recs if x.get("type") == "assistant"]
            with self.located(answers[0] if answers else {}):
                when = _seconds(answers[0]["timestamp"]) - t0 if answers else t
            if best is None or abs(when - t) < best[0]:
                best = (abs(when - t), f, recs)
        return None if best is None else (best[1], best[2])

    def compaction(self, main: _Agent, summary: dict[str, Any], t: float, t0: float) -> None:
        """R2: a one-shot compactor holding a copy of the main context and the instruction, at
        the instruction's time; then the main context restarts from the summary."""
        text = _text_of(_body(summary).get("content"))
        found = self.compaction_file(t, t0)
        if found is None:
            self.report.skip(
                f"{self.at(summary)}: no compaction transcript for this summary "
                "(the history is still replaced by it; the summarising call is not modelled)"
            )
        else:
            comp, recs = found
            self.compactions_used.add(comp)
            first = next((k for k, x in enumerate(recs) if x.get("type") == "assistant"), None)
            asked = [x for x in recs[:first] if x.get("type") == "user"]
            if not asked:
                self.report.skip(
                    f"{self.at(summary)}: compaction transcript {comp.name} holds no instruction "
                    "before its answer (the history is still replaced by the summary; the "
                    "summarising call is not modelled)"
                )
            else:
                ask = asked[-1]
                with self.located(ask):
                    t_ask = _seconds(ask["timestamp"]) - t0
                    instruction = _text_of(_body(ask).get("content"))
                answer = text
                t_answer = t
                usage: dict[str, Any] = {}
                if first is not None:
                    a = recs[first]
                    with self.located(a):
                        t_answer = _seconds(a["timestamp"]) - t0
                        usage = _body(a).get("usage") or {}
                        mid = _body(a).get("id")
                        said = [
                            str(b["text"])
                            for x in recs[first:]
                            if x.get("type") == "assistant" and _body(x).get("id") == mid
                            for b in _body(x).get("content") or []
                            if isinstance(b, dict) and isinstance(b.get("text"), str)
                        ]
                    answer = "".join(said) or text
                cid = ContextId(f"{self.sid}.{comp.stem}")
                ins = main.msg(
                    Role.USER,
                    MessageKind.INSTRUCTION,
                    _size(instruction),
                    _hash("compaction", instruction),
                )
                out = main.msg(
                    Role.ASSISTANT, MessageKind.SUMMARY, _size(answer), _hash("sum", answer)
                )
                call = Infer(max(t_ask, t_answer), cid, (out,))
                if usage:
                    self.prompt_sizes[id(call)] = _prompt(usage)
                self.ops += [_Compact(t_ask, cid, main.ctx, ins), call]
                t = max(t, t_ask, t_answer)
        self.ops.append(_RemoveAll(t, main.ctx))
        m = main.msg(Role.USER, MessageKind.SUMMARY, _size(text), _hash("summary", text))
        self.ops.append(Append(t, main.ctx, (m,)))
        main.live_reasoning = False

    def run(self, t0: float) -> list[Op]:
        main = _Agent(self, f"{self.sid}.main", AgentKind.MAIN)
        begin = self.start() - t0
        self.ops += [Open(begin, main.ctx, self.sid, AgentKind.MAIN), self.prefix(main, begin)]
        chunk: list[dict[str, Any]] = []
        pending_boundary: dict[str, Any] | None = None
        for r in self.records:
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
        last = self.records[-1]
        with self.located(last):
            end = max(begin, _seconds(last["timestamp"]) - t0)
        self.ops.append(EndSession(end, self.sid))
        return self._finish()

    def _prefix(self, m: Message) -> Message:
        """The prefix message with its size and its key (agent kind, type, model: R4)."""
        agent = self.prefixes[m.id]
        key = agent.key or (agent.agent.value, agent.agent_type, "")
        name = "-".join(x for x in ("claude-code", key[0], key[1], "prefix") if x)
        h = f"{name}@{key[2]}" if key[2] else name
        return Message(m.id, m.role, m.kind, self.prefix_tokens.get(key, 1), h)

    def _finish(self) -> list[Op]:
        """Size and key the prefixes, resolve the markers against each context's live messages,
        order the ops on one timeline."""
        live: dict[ContextId, list[Message]] = {}
        base: dict[MessageId, str] = {}
        out: list[Op] = []

        def emit(op: Op) -> None:
            out.append(op)
            track_live(live, op)

        for op in sorted(self.ops, key=lambda o: o.t):
            match op:
                case Append() if op.messages[0].id in self.prefixes:
                    emit(Append(op.t, op.ctx, (self._prefix(op.messages[0]),), op.temporary))
                case _RemoveAll():
                    n = len(live.get(op.ctx, ()))
                    if n > 1:
                        emit(Remove(op.t, op.ctx, 1, n - 1))
                case _Compact():
                    emit(Open(op.t, op.ctx, self.sid, AgentKind.COMPACTOR, op.main, None, True))
                    emit(Append(op.t, op.ctx, (*live.get(op.main, ()), op.instruction)))
                case _Rekey():
                    msgs = list(live.get(op.ctx, ()))
                    if msgs:
                        emit(Remove(op.t, op.ctx, 0, len(msgs)))
                        again = []
                        for m in msgs:
                            b = base.setdefault(m.id, m.content_key)
                            again.append(Message(m.id, m.role, m.kind, m.tokens, f"{b}@{op.model}"))
                        emit(Append(op.t, op.ctx, tuple(again)))
                case _:
                    emit(op)
        return calibrated(out, self.prompt_sizes)


@attrs.frozen(slots=True)
class _RemoveAll:
    """Marker: drop everything after the prefix (resolved once the live messages are known)."""

    t: float
    ctx: ContextId


@attrs.frozen(slots=True)
class _Compact:
    """Marker: open the one-shot compactor ``ctx`` with a copy of ``main`` and the instruction."""

    t: float
    ctx: ContextId
    main: ContextId
    instruction: Message


@attrs.frozen(slots=True)
class _Rekey:
    """Marker: the context's next call runs another model; its KV is keyed afresh (R4)."""

    t: float
    ctx: ContextId
    model: str


_Marker = _RemoveAll | _Compact | _Rekey


def import_claude_code(paths: Iterable[str | Path]) -> tuple[Trace, ImportReport]:
    """One trace of every given session on one clock: seconds since the earliest record of any
    of them (R5)."""
    report = ImportReport()
    importers = [_Importer(Path(p), report) for p in paths]
    t0 = min((imp.start() for imp in importers), default=0.0)
    ops: list[Op] = []
    names = []
    for imp in importers:
        mine = imp.run(t0)
        ops += mine
        names.append(imp.path.name)
        report.conversations += 1
        report.requests += sum(1 for o in mine if isinstance(o, Infer))
    report.ops = len(ops)
    ops.sort(key=lambda o: o.t)
    return Trace(
        TraceHeader(1, {"kvtrace": 1, "importer": "claude-code", "sources": names}), tuple(ops)
    ), report
