"""Import logs of OpenAI-format chat requests into a trace by diffing consecutive requests.

A *conversation* is a sequence of requests, each the full message list sent to the model, with
the model's response. Accepted shapes (all in ``../shared/traces/``):

* a JSON list of runs with ``traj`` (tau-bench), or a dict with ``messages`` (mini-swe-agent):
  the final message list only; request *k* is rebuilt as the messages before the *k*-th
  assistant message, whose content (and ``extra.response`` reasoning and usage) is the output;
* a dict with ``trajectory`` steps each holding the exact request ``messages`` (SWE-agent),
  the step's ``response``/``thought`` being the output;
* a JSON list of requests, each a list of messages (plain logs).

Between two requests the message lists are diffed by content (difflib): an unchanged prefix
costs nothing; same-length replaced runs become ``replace`` ops; dropped reasoning alone becomes
``turn_end``; anything else drops the rest of the context (``remove``) and appends the new tail
(the primitives have no insert-in-the-middle). Each message's KV identity is a hash of its role
and content, so identical system prompts share KV across conversations.

Token sizes: ``usage.prompt_tokens`` and ``completion_tokens`` (and ``reasoning_tokens``) where
the log has them -- the messages appended by a request take what ``prompt_tokens`` leaves after
the context's current messages, so the request totals ``prompt_tokens`` (a replaced message is
scaled by the request's tokens-per-character) -- else characters / 4. Times: ``created`` where
present, as seconds since the earliest ``created`` of every conversation imported together (one
clock, spec R5); a conversation with none is one second per request from 0. Records that cannot
be interpreted are skipped and counted; an unreadable file is a
:class:`~kvmodel.errors.TraceError` naming it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from kvmodel.errors import TraceError
from kvmodel.ids import ContextId, MessageId, SessionId
from kvmodel.io.importers._limits import count, stamp
from kvmodel.io.importers._sizes import split_tokens
from kvmodel.io.trace import (
    Append,
    EndSession,
    Infer,
    Op,
    Open,
    Remove,
    Replace,
    Trace,
    TraceHeader,
    TurnEnd,
)
from kvmodel.messages import AgentKind, Message, MessageKind, Role

__all__ = ["Conversation", "ImportReport", "Request", "conversations", "import_openai"]


@attrs.frozen
class Request:
    """One logged request; usage counts and ``created`` as :mod:`kvmodel.io.importers._limits`
    believes them (a value of the wrong type or out of range is absent)."""

    messages: tuple[dict[str, Any], ...]
    output: tuple[dict[str, Any], ...]
    prompt_tokens: int | None = attrs.field(default=None, converter=count)
    completion_tokens: int | None = attrs.field(default=None, converter=count)
    reasoning_tokens: int | None = attrs.field(default=None, converter=count)
    created: float | None = attrs.field(default=None, converter=stamp)


@attrs.frozen
class Conversation:
    name: str
    requests: tuple[Request, ...]


@attrs.define
class ImportReport:
    conversations: int = 0
    requests: int = 0
    ops: int = 0
    skipped: int = 0
    #: conversations with no time in the log: requests one second apart from t = 0 (spec R5)
    untimed: int = 0
    warnings: list[str] = attrs.field(factory=list)

    def skip(self, why: str) -> None:
        self.skipped += 1
        if len(self.warnings) < 20:
            self.warnings.append(why)


def _text(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in c]
        c = "\n".join(parts)
    text = c if isinstance(c, str) else ("" if c is None else json.dumps(c, sort_keys=True))
    if m.get("tool_calls"):
        text += json.dumps(m["tool_calls"], sort_keys=True)
    return text


def _reasoning_of(resp: dict[str, Any]) -> str | None:
    try:
        msg = resp["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    r = msg.get("reasoning") or msg.get("reasoning_content")
    return r if isinstance(r, str) and r else None


def _from_final(
    name: str, msgs: Sequence[Any], report: ImportReport, *, observations: bool = False
) -> Conversation | None:
    """``observations``: the harness sends every tool result as a ``user`` message and has no
    user after the task (mini-swe-agent, R10): a user message after the first assistant
    message is an observation."""
    if observations:
        first = next(
            (i for i, m in enumerate(msgs) if isinstance(m, dict) and m.get("role") == "assistant"),
            len(msgs),
        )
        msgs = [
            {**m, "_kind": "observation"}
            if i > first and isinstance(m, dict) and m.get("role") == "user"
            else m
            for i, m in enumerate(msgs)
        ]
    reqs = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or "role" not in m:
            report.skip(f"{name}: message {i} is not a chat message")
            return None
        if m["role"] != "assistant" or i == 0:
            continue
        resp = (m.get("extra") or {}).get("response") or {}
        usage = resp.get("usage") or {}
        reasoning = _reasoning_of(resp)
        out: list[dict[str, Any]] = []
        if reasoning:
            out.append({"role": "assistant", "content": reasoning, "_kind": "reasoning"})
        out.append({k: v for k, v in m.items() if k != "extra"})
        details = usage.get("completion_tokens_details") or {}
        reqs.append(
            Request(
                tuple({k: v for k, v in x.items() if k != "extra"} for x in msgs[:i]),
                tuple(out),
                usage.get("prompt_tokens"),
                usage.get("completion_tokens"),
                details.get("reasoning_tokens"),
                resp.get("created"),
            )
        )
    return Conversation(name, tuple(reqs)) if reqs else None


def conversations(path: Path, report: ImportReport) -> Iterator[Conversation]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TraceError(f"cannot read log file: {e.strerror}", file=str(path)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(f"not a JSON log: {e}", file=str(path)) from None
    except RecursionError:
        raise TraceError("not a JSON log: nested too deeply", file=str(path)) from None
    stem = path.name.split(".")[0]
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        c = _from_final(stem, data["messages"], report, observations=True)
        if c:
            yield c
    elif isinstance(data, dict) and isinstance(data.get("trajectory"), list):
        steps: list[tuple[list[dict[str, Any]], str]] = []
        for j, step in enumerate(data["trajectory"]):
            msgs = step.get("messages") if isinstance(step, dict) else None
            if not isinstance(msgs, list) or not msgs:
                report.skip(f"{stem}: step {j} has no request messages")
                continue
            text = step.get("response") or step.get("thought") or step.get("action") or ""
            steps.append((msgs, str(text)))
        reqs = []
        for j, (msgs, text) in enumerate(steps):
            # the output as the harness re-sends it: the next request's first new assistant
            # message (its content and tool calls), else the logged response text
            nxt = steps[j + 1][0][len(msgs) :] if j + 1 < len(steps) else []
            sent = next(
                (m for m in nxt if isinstance(m, dict) and m.get("role") == "assistant"), None
            )
            out = sent if sent is not None else {"role": "assistant", "content": text}
            reqs.append(Request(tuple(msgs), (out,)))
        if reqs:
            yield Conversation(stem, tuple(reqs))
    elif isinstance(data, list):
        for k, run in enumerate(data):
            if isinstance(run, dict) and isinstance(run.get("traj"), list):
                tid = run.get("task_id", k)
                c = _from_final(f"{stem}.task{tid}.{run.get('trial', k)}", run["traj"], report)
                if c:
                    yield c
            elif isinstance(run, list) and all(isinstance(m, dict) for m in run):
                yield Conversation(f"{stem}.{k}", (Request(tuple(run), ()),))
            else:
                report.skip(f"{stem}: record {k} is neither a run nor a request")
    else:
        raise TraceError(
            "expected a list of runs or requests, or a dict with 'messages' or "
            f"'trajectory' (got {type(data).__name__})",
            file=str(path),
        )


_ROLE = {
    "system": Role.SYSTEM,
    "developer": Role.DEVELOPER,
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "tool": Role.TOOL,
    "function": Role.TOOL,
}


def _kind(m: dict[str, Any]) -> MessageKind:
    if m.get("_kind") == "reasoning":
        return MessageKind.REASONING
    if m.get("_kind") == "observation":
        return MessageKind.OBSERVATION
    role = m.get("role")
    if role == "system":
        return MessageKind.SYSTEM
    if role in ("tool", "function"):
        return MessageKind.OBSERVATION
    if role == "assistant":
        return MessageKind.TOOL_CALL if m.get("tool_calls") else MessageKind.OUTPUT
    return MessageKind.USER


def _key(m: dict[str, Any]) -> str:
    h = hashlib.blake2b(digest_size=12)
    text = f"{m.get('role')}\x1f{m.get('_kind', '')}\x1f{_text(m)}"
    h.update(text.encode("utf-8", "surrogatepass"))  # a lone surrogate hashes, faithfully
    return h.hexdigest()


class _Builder:
    def __init__(self, conv: Conversation, report: ImportReport) -> None:
        self.conv = conv
        self.report = report
        self.ctx = ContextId(conv.name)
        self.session = SessionId(conv.name)
        self.ops: list[Op] = []
        self.live: list[tuple[str, Message]] = []  # (content key, message) of the context
        self.n = 0
        self.t = 0.0

    def message(self, m: dict[str, Any], tokens: int) -> Message:
        self.n += 1
        role = _ROLE.get(str(m.get("role")), Role.USER)
        return Message(
            MessageId(f"{self.conv.name}.m{self.n}"), role, _kind(m), max(1, tokens), _key(m)
        )

    def run(self, t0: float | None) -> list[Op]:
        """The conversation's ops; ``t0`` is the import's clock origin, None for a conversation
        with no times (one second per request from 0; a request without a time in a timed
        conversation follows the one before it)."""
        first = next((r.created for r in self.conv.requests if r.created is not None), None)
        self.t = 0.0 if t0 is None or first is None else float(first) - t0
        self.ops.append(Open(self.t, self.ctx, self.session, AgentKind.MAIN))
        for i, req in enumerate(self.conv.requests):
            if t0 is None:
                self.t = float(i)
            elif req.created is not None:
                self.t = max(self.t, float(req.created) - t0)
            self.diff(req)
            out = self.outputs(req)
            self.ops.append(Infer(self.t, self.ctx, tuple(m for _, m in out)))
            self.live += out
        self.ops.append(EndSession(self.t, self.session))
        return self.ops

    def outputs(self, req: Request) -> list[tuple[str, Message]]:
        est = [max(1, len(_text(m)) // 4) for m in req.output]
        if req.completion_tokens:
            r = req.reasoning_tokens or 0
            for i, m in enumerate(req.output):
                if m.get("_kind") == "reasoning" and r:
                    est[i] = r
                elif m.get("_kind") != "reasoning":
                    est[i] = max(1, req.completion_tokens - r)
        return [(_key(m), self.message(m, n)) for m, n in zip(req.output, est, strict=True)]

    def diff(self, req: Request) -> None:
        """Turn the change from the context's current list to ``req.messages`` into ops."""
        new_keys = [_key(m) for m in req.messages]
        old_keys = [k for k, _ in self.live]
        codes = difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False).get_opcodes()
        deleted = [
            self.live[i][1] for tag, i1, i2, _, _ in codes if tag == "delete" for i in range(i1, i2)
        ]
        if deleted and all(m.kind is MessageKind.REASONING for m in deleted):
            # the harness stripped the reasoning (mini-swe-agent never re-sends it)
            self.ops.append(TurnEnd(self.t, self.ctx))
            self.live = [x for x in self.live if x[1].kind is not MessageKind.REASONING]
            self.diff(req)
            return
        for tag, i1, i2, j1, j2 in codes:
            if tag == "equal":
                continue
            if tag == "replace" and i2 - i1 == j2 - j1:
                for k in range(i2 - i1):
                    m = self.message(req.messages[j1 + k], self.size(req, j1 + k))
                    self.ops.append(Replace(self.t, self.ctx, i1 + k, m))
                    self.live[i1 + k] = (new_keys[j1 + k], m)
                continue
            if tag == "insert" and i1 == len(self.live):
                self._append(req, new_keys, j1, j2)
                continue
            # anything else: keep what precedes, drop the rest, append the new tail
            if i1 < len(self.live):
                self.ops.append(Remove(self.t, self.ctx, i1, len(self.live) - i1))
                del self.live[i1:]
            self._append(req, new_keys, j1, len(new_keys))
            return

    def _append(self, req: Request, keys: list[str], j1: int, j2: int) -> None:
        sizes = self.new_sizes(req, j1, j2)
        msgs = req.messages[j1:j2]
        fresh = [
            (keys[j1 + i], self.message(m, n))
            for i, (m, n) in enumerate(zip(msgs, sizes, strict=True))
        ]
        if fresh:
            self.ops.append(Append(self.t, self.ctx, tuple(m for _, m in fresh)))
            self.live += fresh

    def new_sizes(self, req: Request, j1: int, j2: int) -> list[int]:
        """Sizes of the messages appended at the end of a request: with ``usage``, they take what
        the logged ``prompt_tokens`` leaves after the context's current messages, split in
        proportion to their characters (at least one token each; the remainder to the largest
        fractions, earliest first), so the request totals ``prompt_tokens`` exactly. Without
        usage, or when the log's total is smaller than what is already there, characters / 4."""
        est = [max(1, len(_text(req.messages[j])) // 4) for j in range(j1, j2)]
        if not req.prompt_tokens or not est:
            return est
        budget = req.prompt_tokens - sum(m.tokens for _, m in self.live) - len(est)
        if budget < 0:
            return [self.size(req, j) for j in range(j1, j2)]
        return split_tokens(budget + len(est), est)

    def size(self, req: Request, j: int) -> int:
        est = max(1, len(_text(req.messages[j])) // 4)
        if req.prompt_tokens:
            total = sum(max(1, len(_text(m)) // 4) for m in req.messages)
            return max(1, round(est * req.prompt_tokens / total))
        return est


def import_openai(paths: Sequence[str | Path]) -> tuple[Trace, ImportReport]:
    """One trace holding every conversation of the given files, on one timeline."""
    report = ImportReport()
    convs = [conv for p in paths for conv in conversations(Path(p), report)]
    # one clock for every conversation: seconds since the earliest logged time (spec R5)
    created = [r.created for c in convs for r in c.requests if r.created is not None]
    t0 = min(created) if created else None
    streams: list[list[Op]] = []
    untimed: list[str] = []
    for conv in convs:
        timed = any(r.created is not None for r in conv.requests)
        streams.append(_Builder(conv, report).run(t0 if timed else None))
        report.conversations += 1
        report.requests += len(conv.requests)
        if not timed:
            report.untimed += 1
            untimed.append(conv.name)
    ops = sorted((op for s in streams for op in s), key=lambda o: o.t)
    report.ops = len(ops)
    meta: dict[str, Any] = {
        "kvtrace": 1,
        "importer": "openai",
        "sources": [Path(p).name for p in paths],
    }
    if untimed:  # their sessions' times are made up: what reads waits must leave them out
        meta["untimed_sessions"] = untimed
    return Trace(TraceHeader(1, meta), tuple(ops)), report
