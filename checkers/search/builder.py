"""A shadow of the harness: turns abstract agent actions into *valid* trace ops.

The stateful machine's rules and the exported trace strategies both drive this builder. It keeps
the logical state a harness would (sessions, contexts and their messages), so every op it emits
is legal; each action returns the ops it produced (none if it does not apply, e.g. a worker
return when no worker is open). Realistic structure: sessions with a pinned, shared system prompt;
turns of reasoning and tool calls ended by ``turn_end``; workers and reviewers spawned with a spawn
record and returning a result; compaction through a one-shot compactor whose summary replaces the
history; forks; temporaries; pins with and without TTL; closes and session ends.
"""

from __future__ import annotations

import attrs

from kvmodel.ids import ContextId, MessageId, SessionId
from kvmodel.io.trace import (
    Append,
    Close,
    EndSession,
    Fork,
    Infer,
    Op,
    Open,
    Pin,
    Remove,
    Replace,
    Return,
    TurnEnd,
    Unpin,
)
from kvmodel.messages import AgentKind, Message, MessageKind, Role, SpawnRecord

__all__ = ["HarnessBuilder"]

_TOOLS = ("bash", "edit", "grep", "read", "web")


@attrs.define
class _Ctx:
    id: ContextId
    session: SessionId
    agent: AgentKind
    parent: ContextId | None
    one_shot: bool
    msgs: list[tuple[Message, bool]] = attrs.field(factory=list)  # (message, temporary)


class HarnessBuilder:
    def __init__(self) -> None:
        self.t = 0.0
        self.ops: list[Op] = []
        self.ctxs: dict[ContextId, _Ctx] = {}
        self.sessions: dict[SessionId, bool] = {}  # -> still open
        #: the context that last received input (what a harness would run next)
        self.last: ContextId | None = None
        self._n = 0
        #: when each TTL pin emitted so far ends (``Pin.deadline``, as the engine reads it)
        self.deadlines: list[float] = []

    # ------------------------------------------------------------------ helpers

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def _msg(self, role: Role, kind: MessageKind, tokens: int, h: str | None = None) -> Message:
        return Message(MessageId(self._id("m")), role, kind, max(1, tokens), h)

    def _emit(self, *ops: Op) -> list[Op]:
        self.ops.extend(ops)
        self.deadlines += [d for o in ops if isinstance(o, Pin) and (d := o.deadline) is not None]
        return list(ops)

    def _pick(
        self, pick: int, *, agents: tuple[AgentKind, ...] | None = None, nonempty: bool = False
    ) -> _Ctx | None:
        cands = [
            c
            for _, c in sorted(self.ctxs.items())
            if (agents is None or c.agent in agents) and (c.msgs or not nonempty)
        ]
        return cands[pick % len(cands)] if cands else None

    def _append(self, c: _Ctx, msgs: tuple[Message, ...], temporary: bool = False) -> Op:
        c.msgs.extend((m, temporary or c.one_shot) for m in msgs)
        self.last = c.id
        return Append(self.t, c.id, msgs, temporary)

    def advance(self, dt: float | None) -> list[Op]:
        """Time passes: ``dt``, or (``None``) exactly to the next TTL pin deadline, so that the
        next op lands on it -- the boundary where a pin ends (spec P6: at the first op at or
        after its deadline), which time drawn at random almost never meets. Nothing passes
        when no deadline lies ahead."""
        if dt is None:
            self.t = min((d for d in self.deadlines if d > self.t), default=self.t)
        else:
            self.t = round(self.t + dt, 3)
        return []

    # ------------------------------------------------------------------ actions

    def start_session(self, variant: int, pin: bool, ttl: float | None) -> list[Op]:
        sid = SessionId(self._id("s"))
        self.sessions[sid] = True
        cid = ContextId(f"{sid}.main")
        agent = AgentKind.LEAD if variant % 2 else AgentKind.MAIN
        c = _Ctx(cid, sid, agent, None, False)
        self.ctxs[cid] = c
        system = self._msg(
            Role.SYSTEM, MessageKind.SYSTEM, 6 + 3 * (variant % 3), f"system-{variant % 3}"
        )
        ops: list[Op] = [Open(self.t, cid, sid, agent), self._append(c, (system,))]
        if pin:
            ops.append(Pin(self.t, cid, 0, 1, ttl))
        return self._emit(*ops)

    def user(self, pick: int, tokens: int, temporary: bool) -> list[Op]:
        c = self._pick(pick)
        if c is None:
            return []
        return self._emit(
            self._append(c, (self._msg(Role.USER, MessageKind.USER, tokens),), temporary)
        )

    def observe(self, pick: int, tokens: int, temporary: bool) -> list[Op]:
        c = self._pick(pick)
        if c is None:
            return []
        m = self._msg(Role.TOOL, MessageKind.OBSERVATION, tokens)
        return self._emit(self._append(c, (m,), temporary))

    def infer_last(self, reasoning: int, answer: bool, duration: float) -> list[Op]:
        """Run the context that just received input (the harness's next request)."""
        c = self.ctxs.get(self.last) if self.last is not None else None
        if c is None or not c.msgs:
            return []
        return self._infer(c, reasoning, answer, duration)

    def infer(self, pick: int, reasoning: int, answer: bool, duration: float) -> list[Op]:
        c = self._pick(pick, nonempty=True)
        if c is None:
            return []
        return self._infer(c, reasoning, answer, duration)

    def _infer(self, c: _Ctx, reasoning: int, answer: bool, duration: float) -> list[Op]:
        out = [self._msg(Role.ASSISTANT, MessageKind.REASONING, reasoning)] if reasoning else []
        out.append(
            self._msg(Role.ASSISTANT, MessageKind.OUTPUT if answer else MessageKind.TOOL_CALL, 3)
        )
        op = Infer(self.t, c.id, tuple(out), duration)
        c.msgs = [(m, tmp) for m, tmp in c.msgs if not tmp] + [(m, c.one_shot) for m in out]
        if c.one_shot:
            del self.ctxs[c.id]
        # one request at a time: the harness's next op comes when this inference has ended
        self.t = round(self.t + duration, 3)
        return self._emit(op)

    def turn_end(self, pick: int) -> list[Op]:
        c = self._pick(pick, agents=(AgentKind.MAIN, AgentKind.LEAD))
        if c is None:
            return []
        c.msgs = [(m, tmp) for m, tmp in c.msgs if m.kind is not MessageKind.REASONING]
        return self._emit(TurnEnd(self.t, c.id))

    def spawn(self, pick: int, reviewer: bool, tools: int, tokens: int) -> list[Op]:
        p = self._pick(pick, agents=(AgentKind.MAIN, AgentKind.LEAD))
        if p is None:
            return []
        agent = AgentKind.REVIEWER if reviewer else AgentKind.WORKER
        cid = ContextId(self._id(f"{p.session}.{agent.value}"))
        c = _Ctx(cid, p.session, agent, p.id, False)
        self.ctxs[cid] = c
        names = _TOOLS[: 1 + tools % len(_TOOLS)]
        spawn = SpawnRecord(f"check part {tokens} using " + " ".join(names), names, tokens)
        system = self._msg(Role.SYSTEM, MessageKind.SYSTEM, 5, f"{agent.value}-system")
        ins = self._msg(Role.USER, MessageKind.INSTRUCTION, tokens)
        return self._emit(
            Open(self.t, cid, p.session, agent, p.id, spawn), self._append(c, (system, ins))
        )

    def ret(self, pick: int) -> list[Op]:
        c = self._pick(pick, agents=(AgentKind.WORKER, AgentKind.REVIEWER))
        if c is None or c.parent not in self.ctxs:
            return []
        into = self.ctxs[c.parent]
        result = self._msg(Role.TOOL, MessageKind.RESULT, 4)
        into.msgs.append((result, into.one_shot))
        self.last = into.id
        del self.ctxs[c.id]
        return self._emit(Return(self.t, c.id, into.id, result))

    def compact(self, pick: int, duration: float) -> list[Op]:
        c = self._pick(pick, agents=(AgentKind.MAIN, AgentKind.LEAD), nonempty=True)
        if c is None or len(c.msgs) < 3 or any(tmp for _, tmp in c.msgs):
            return []
        cid = ContextId(self._id(f"{c.session}.compact"))
        history = tuple(m for m, _ in c.msgs)
        ins = self._msg(Role.USER, MessageKind.INSTRUCTION, 3, "compaction-instruction")
        summary = self._msg(Role.ASSISTANT, MessageKind.SUMMARY, 4)
        ops: list[Op] = [
            Open(self.t, cid, c.session, AgentKind.COMPACTOR, c.id, None, True),
            Append(self.t, cid, (*history, ins)),
            Infer(self.t, cid, (summary,), duration),
        ]
        self.t = round(self.t + duration, 3)
        kept = self._msg(Role.USER, MessageKind.SUMMARY, 4)
        ops += [Remove(self.t, c.id, 1, len(history) - 1), Append(self.t, c.id, (kept,))]
        c.msgs = [c.msgs[0], (kept, False)]
        return self._emit(*ops)

    def fork(self, pick: int, upto: int) -> list[Op]:
        src = self._pick(pick)
        if src is None:
            return []
        n = upto % (len(src.msgs) + 1)
        cid = ContextId(self._id(f"{src.session}.fork"))
        self.ctxs[cid] = _Ctx(
            cid, src.session, src.agent, src.parent, src.one_shot, list(src.msgs[:n])
        )
        return self._emit(Fork(self.t, cid, src.id, n))

    def replace(self, pick: int, index: int, tokens: int) -> list[Op]:
        c = self._pick(pick, nonempty=True)
        if c is None:
            return []
        i = index % len(c.msgs)
        m = self._msg(Role.TOOL, MessageKind.OBSERVATION, tokens)
        c.msgs[i] = (m, c.one_shot)
        self.last = c.id
        return self._emit(Replace(self.t, c.id, i, m))

    def remove(self, pick: int, index: int, count: int) -> list[Op]:
        c = self._pick(pick, nonempty=True)
        if c is None:
            return []
        i = index % len(c.msgs)
        n = 1 + count % (len(c.msgs) - i)
        del c.msgs[i : i + n]
        return self._emit(Remove(self.t, c.id, i, n))

    def pin(self, pick: int, a: int, b: int, ttl: float | None) -> list[Op]:
        c = self._pick(pick)
        if c is None:
            return []
        n = len(c.msgs)
        lo, hi = sorted((a % (n + 1), b % (n + 1)))
        return self._emit(Pin(self.t, c.id, lo, hi, ttl))

    def unpin(self, pick: int) -> list[Op]:
        c = self._pick(pick)
        if c is None:
            return []
        return self._emit(Unpin(self.t, c.id))

    def close(self, pick: int) -> list[Op]:
        c = self._pick(pick)
        if c is None:
            return []
        del self.ctxs[c.id]
        return self._emit(Close(self.t, c.id))

    def end_session(self, pick: int) -> list[Op]:
        live = sorted(s for s, is_open in self.sessions.items() if is_open)
        if not live:
            return []
        sid = live[pick % len(live)]
        self.sessions[sid] = False
        for cid in [c for c, x in self.ctxs.items() if x.session == sid]:
            del self.ctxs[cid]
        return self._emit(EndSession(self.t, sid))
