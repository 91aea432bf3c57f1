"""Random *valid* traces over every op, for property tests, fuzzing and benchmarks.

Unlike :mod:`kvmodel.workloads.agentic`, nothing here is realistic: the generator keeps a small
shadow of the logical state (open contexts, their message ids and kinds, temporaries, sessions)
and picks among the ops that are legal at each step, so that every op kind -- forks, mid-context
replaces and removes, pins with and without TTL, temporaries, one-shot contexts, returns, session
ends -- is exercised against every other. All choices come from one seeded
``numpy.random.Generator``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import attrs
import numpy as np

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
    Trace,
    TraceHeader,
    TurnEnd,
    Unpin,
    carried_messages,
    scaled_clock,
    with_messages,
)
from kvmodel.messages import AgentKind, Message, MessageKind, Role

__all__ = ["OP_WEIGHTS", "RandomParams", "random_trace"]

_KINDS = (MessageKind.USER, MessageKind.OBSERVATION, MessageKind.INSTRUCTION)
_OUT_KINDS = (MessageKind.REASONING, MessageKind.OUTPUT, MessageKind.TOOL_CALL)


#: the relative weight of each op among the legal ones (the default generator's mix); a swarm
#: search (:mod:`checkers.search.swarm`) draws its own vector with some ops switched off
OP_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {
        "open": 1.0,
        "fork": 1.0,
        "append": 3.0,
        "replace": 1.0,
        "remove": 1.0,
        "pin": 1.0,
        "unpin": 1.0,
        "infer": 4.0,
        "turn_end": 1.0,
        "return": 1.0,
        "close": 1.0,
        "end_session": 0.2,
    }
)


@attrs.frozen(slots=True)
class RandomParams:
    seed: int = 0
    ops: int = 60
    max_tokens: int = 24
    max_open: int = 5
    shared_hashes: int = 4  # size of a pool of shared content keys (cross-context reuse)
    p_temporary: float = 0.15
    p_one_shot: float = 0.1
    p_ttl: float = 0.5
    #: (op, weight) pairs overriding :data:`OP_WEIGHTS` (missing ops keep theirs; weight 0
    #: switches an op off). None: the default mix, drawn exactly as before weights existed
    weights: tuple[tuple[str, float], ...] | None = None
    #: mean time between ops; shorter makes TTLs expire less often
    mean_gap: float = 1.0
    #: a soft cap on a context's tokens: an append to a context already at the cap becomes a
    #: compaction (a ``remove`` of a run of its messages down to half the cap), as an agent
    #: drops old observations, and no message is larger than a quarter of the cap. A search
    #: sets it from the engine's capacity, so that contexts fit and pressure comes from many of
    #: them, not from prompts no memory holds. None: no cap
    max_context_tokens: int | None = None
    #: the probability that an opened context starts with a system prompt, one of three shared
    #: by every context (an agent's fixed prompt: the common case of KV that several contexts
    #: hold, each suspended at its own time, and that one of them wrote). 0: none, no draws
    p_system: float = 0.0
    #: the probability that an op, drawn while a TTL pin's deadline lies ahead, happens exactly
    #: at the nearest one (``Pin.deadline``, the engine's float): whether a pin still holds *at*
    #: its deadline is a boundary that times drawn from a continuous clock never meet
    #: (spec/invariants.md, swarm testing). 0: none, no draws
    p_deadline: float = 0.0
    #: every token count of the trace multiplied by this, after it is drawn: with a block size
    #: as many times larger, the same trace at the scale of real prompts (thousands of tokens a
    #: message), its blocks laid out exactly as at 1 (a message boundary falls in the same
    #: block, a partial block stays partial). ``max_tokens`` and ``max_context_tokens`` are in
    #: unscaled tokens. 1: no change
    token_scale: int = 1
    #: every time of the trace (op times, inference durations, pin TTLs) multiplied by this,
    #: after it is drawn: a power of two, so the products are exact and every comparison of
    #: times comes out as at 1 (``scaled_clock``): the same trace on a clock of hours or days,
    #: where a policy's constants in seconds (a window, a TTL, an idle limit) come into play.
    #: ``mean_gap`` is in unscaled seconds. 1: no change
    clock_scale: int = 1
    #: background agents opened before the trace's first op, each in its own session: a shared
    #: system prompt and an instruction, one inference ending in a tool call, then suspended to
    #: the end, waiting on its tool (the crowd of agents in flight a serving engine holds, where
    #: the trace's own contexts number at most ``max_open``). Drawn from their own generator,
    #: so the trace's own ops are what they were. 0: none, no draws
    crowd: int = 0

    def __attrs_post_init__(self) -> None:
        for op, w in self.weights or ():
            if op not in OP_WEIGHTS or not w >= 0.0:
                raise ValueError(
                    f"RandomParams.weights: {op!r}={w!r} (ops: {', '.join(OP_WEIGHTS)})"
                )
        if not 0.0 <= self.p_system <= 1.0:
            raise ValueError(f"RandomParams.p_system: {self.p_system!r} (expected 0..1)")
        if not 0.0 <= self.p_deadline <= 1.0:
            raise ValueError(f"RandomParams.p_deadline: {self.p_deadline!r} (expected 0..1)")
        cap = self.max_context_tokens
        if cap is not None and not cap >= 2:
            raise ValueError(f"RandomParams.max_context_tokens: {cap!r} (expected at least 2)")
        if not self.token_scale >= 1:
            raise ValueError(f"RandomParams.token_scale: {self.token_scale!r} (expected >= 1)")
        if not self.crowd >= 0:
            raise ValueError(f"RandomParams.crowd: {self.crowd!r} (expected >= 0)")
        k = self.clock_scale
        if not (isinstance(k, int) and k >= 1 and k & (k - 1) == 0):
            raise ValueError(
                f"RandomParams.clock_scale: {k!r} (expected a power of two: 1, 2, 4, ...)"
            )


@attrs.define
class _Ctx:
    session: SessionId
    msgs: list[tuple[MessageId, MessageKind, bool, int]]  # id, kind, temporary, tokens
    one_shot: bool

    def tokens(self) -> int:
        return sum(m[3] for m in self.msgs)


def _largest_message(p: RandomParams) -> int:
    """A message's largest size: under a context cap, a quarter of the cap at most."""
    cap = p.max_context_tokens
    return p.max_tokens if cap is None else max(1, min(p.max_tokens, cap // 4))


class _Gen:
    def __init__(self, p: RandomParams) -> None:
        self.p = p
        self.rng = np.random.default_rng(p.seed)
        self.t = 0.0
        self.n_msg = 0
        self.n_ctx = 0
        self.n_sess = 0
        self.open: dict[ContextId, _Ctx] = {}
        self.sessions: dict[SessionId, bool] = {}  # session -> ended
        self.weights = {**OP_WEIGHTS, **dict(p.weights)} if p.weights is not None else None
        self.max_tokens = _largest_message(p)
        self.hash_tokens = [
            int(self.rng.integers(1, self.max_tokens + 1)) for _ in range(p.shared_hashes)
        ]
        #: the system prompts' sizes (drawn only when there are system prompts)
        self.system_tokens = (
            [int(self.rng.integers(1, self.max_tokens + 1)) for _ in range(3)] if p.p_system else []
        )
        #: ops an op implies, emitted before the next draw (an opened context's system prompt)
        self.pending: list[Op] = []
        #: the deadlines of the TTL pins emitted, while they lie ahead (only with p_deadline)
        self.deadlines: list[float] = []

    def pick(self, xs: list[ContextId]) -> ContextId:
        return xs[int(self.rng.integers(0, len(xs)))]

    def message(self, kinds: tuple[MessageKind, ...]) -> Message:
        self.n_msg += 1
        kind = kinds[int(self.rng.integers(0, len(kinds)))]
        role = Role.ASSISTANT if kind in _OUT_KINDS else Role.USER
        if self.p.shared_hashes and self.rng.random() < 0.25:
            h = int(self.rng.integers(0, self.p.shared_hashes))
            return Message(MessageId(f"m{self.n_msg}"), role, kind, self.hash_tokens[h], f"h{h}")
        tokens = int(self.rng.integers(1, self.max_tokens + 1))
        return Message(MessageId(f"m{self.n_msg}"), role, kind, tokens)

    def step(self) -> Op:
        if self.pending:
            return self.pending.pop(0)
        rng = self.rng
        t = round(self.t + float(rng.exponential(self.p.mean_gap)) * (rng.random() < 0.7), 3)
        # (a deadline need not be on the 3-decimal grid: rounding after one may not run back)
        t = max(t, self.t)
        if self.deadlines:
            self.deadlines = ahead = [d for d in self.deadlines if d > self.t]
            if ahead and rng.random() < self.p.p_deadline:
                t = min(ahead)  # (later than self.t: the clock still never runs back)
        self.t = t
        live = sorted(self.open)
        nonempty = [c for c in live if self.open[c].msgs]
        legal = ["open"] if len(live) < self.p.max_open else []
        if live:
            legal += ["append", "pin", "unpin", "close"]
            if len(live) < self.p.max_open:
                legal.append("fork")
        if nonempty:
            legal += ["infer", "replace", "remove", "turn_end"]
            if len(live) >= 2:
                legal.append("return")
        session_open = any(not ended for ended in self.sessions.values())
        if self.weights is None:
            # the original mix (kept draw for draw, so seeded traces stay what they were)
            choices = [c for c in legal for _ in range(int(OP_WEIGHTS[c]))]
            if session_open and rng.random() < 0.2:
                choices.append("end_session")
            op = choices[int(rng.integers(0, len(choices)))]
        else:
            legal += ["end_session"] if session_open else []
            w = np.array([self.weights[c] for c in legal], dtype=float)
            if w.sum() <= 0.0:  # every legal op switched off: fall back to a uniform pick
                w = np.ones(len(legal))
            op = legal[int(rng.choice(len(legal), p=w / w.sum()))]
        make: Callable[[float, list[ContextId], list[ContextId]], Op] = getattr(self, f"_{op}")
        return make(t, live, nonempty)

    def _new_ctx(self) -> ContextId:
        self.n_ctx += 1
        return ContextId(f"c{self.n_ctx}")

    def _open(self, t: float, live: list[ContextId], _n: list[ContextId]) -> Op:
        rng = self.rng
        open_sessions = [s for s, ended in self.sessions.items() if not ended]
        if open_sessions and rng.random() < 0.6:
            sess = open_sessions[int(rng.integers(0, len(open_sessions)))]
        else:
            self.n_sess += 1
            sess = SessionId(f"s{self.n_sess}")
            self.sessions[sess] = False
        agents = list(AgentKind)
        agent = agents[int(rng.integers(0, len(agents)))]
        parents = [c for c in live if self.open[c].session == sess]
        parent = self.pick(parents) if parents and rng.random() < 0.5 else None
        one_shot = bool(rng.random() < self.p.p_one_shot)
        cid = self._new_ctx()
        self.open[cid] = _Ctx(sess, [], one_shot)
        if self.p.p_system and rng.random() < self.p.p_system:
            k = int(rng.integers(0, len(self.system_tokens)))
            self.n_msg += 1
            m = Message(
                MessageId(f"m{self.n_msg}"),
                Role.SYSTEM,
                MessageKind.SYSTEM,
                self.system_tokens[k],
                f"system-{k}",
            )
            self.open[cid].msgs.append((m.id, m.kind, one_shot, m.tokens))
            self.pending.append(Append(t, cid, (m,), False))
        return Open(t, cid, sess, agent, parent, None, one_shot)

    def _fork(self, t: float, live: list[ContextId], _n: list[ContextId]) -> Op:
        src = self.pick(live)
        s = self.open[src]
        upto = int(self.rng.integers(0, len(s.msgs) + 1))
        cid = self._new_ctx()
        self.open[cid] = _Ctx(s.session, list(s.msgs[:upto]), s.one_shot)
        default = upto == len(s.msgs) and self.rng.random() < 0.5
        return Fork(t, cid, src, None if default else upto)

    def _append(self, t: float, live: list[ContextId], _n: list[ContextId]) -> Op:
        cid = self.pick(live)
        c = self.open[cid]
        cap = self.p.max_context_tokens
        if cap is not None and c.tokens() >= cap:
            return self._compact(t, cid, cap // 2)
        temporary = bool(self.rng.random() < self.p.p_temporary)
        ms = tuple(self.message(_KINDS + _OUT_KINDS) for _ in range(int(self.rng.integers(1, 4))))
        c.msgs.extend((m.id, m.kind, temporary or c.one_shot, m.tokens) for m in ms)
        return Append(t, cid, ms, temporary)

    def _replace(self, t: float, _l: list[ContextId], nonempty: list[ContextId]) -> Op:
        cid = self.pick(nonempty)
        c = self.open[cid]
        i = int(self.rng.integers(0, len(c.msgs)))
        m = self.message(_KINDS)
        c.msgs[i] = (m.id, m.kind, c.one_shot, m.tokens)
        return Replace(t, cid, i, m)

    def _remove(self, t: float, _l: list[ContextId], nonempty: list[ContextId]) -> Op:
        cid = self.pick(nonempty)
        c = self.open[cid]
        i = int(self.rng.integers(0, len(c.msgs)))
        n = int(self.rng.integers(1, len(c.msgs) - i + 1))
        del c.msgs[i : i + n]
        return Remove(t, cid, i, n)

    def _compact(self, t: float, cid: ContextId, keep: int) -> Op:
        """Remove a run of ``cid``'s messages, starting anywhere in its first ``keep`` tokens,
        just long enough that at most ``keep`` tokens stay: a cut mid-context when it starts
        early, a truncation of the tail when it starts late."""
        c = self.open[cid]
        sizes = [m[3] for m in c.msgs]
        starts = [i for i in range(len(sizes)) if sum(sizes[:i]) <= keep]
        i = starts[int(self.rng.integers(0, len(starts)))]
        n = 1
        while sum(sizes) - sum(sizes[i : i + n]) > keep:
            n += 1
        del c.msgs[i : i + n]
        return Remove(t, cid, i, n)

    def _range(self, cid: ContextId) -> tuple[int | None, int | None]:
        n = len(self.open[cid].msgs)
        if self.rng.random() < 0.3:
            return None, None
        a = int(self.rng.integers(0, n + 1))
        b = int(self.rng.integers(a, n + 1))
        return a, b

    def _pin(self, t: float, live: list[ContextId], _n: list[ContextId]) -> Op:
        cid = self.pick(live)
        a, b = self._range(cid)
        ttl = (
            round(float(self.rng.uniform(0.5, 5.0)), 3)
            if self.rng.random() < self.p.p_ttl
            else None
        )
        pin = Pin(t, cid, a, b, ttl)
        if pin.deadline is not None and self.p.p_deadline:
            self.deadlines.append(pin.deadline)
        return pin

    def _unpin(self, t: float, live: list[ContextId], _n: list[ContextId]) -> Op:
        cid = self.pick(live)
        a, b = self._range(cid)
        return Unpin(t, cid, a, b)

    def _infer(self, t: float, _l: list[ContextId], nonempty: list[ContextId]) -> Op:
        cid = self.pick(nonempty)
        c = self.open[cid]
        out = tuple(self.message(_OUT_KINDS) for _ in range(int(self.rng.integers(0, 3))))
        c.msgs = [m for m in c.msgs if not m[2]]
        c.msgs.extend((m.id, m.kind, c.one_shot, m.tokens) for m in out)
        if c.one_shot:
            del self.open[cid]
        dur = round(float(self.rng.exponential(0.5)), 3)
        return Infer(t, cid, out, dur)

    def _turn_end(self, t: float, _l: list[ContextId], nonempty: list[ContextId]) -> Op:
        cid = self.pick(nonempty)
        c = self.open[cid]
        c.msgs = [m for m in c.msgs if m[1] is not MessageKind.REASONING]
        return TurnEnd(t, cid)

    def _return(self, t: float, live: list[ContextId], _n: list[ContextId]) -> Op:
        cid = self.pick(live)
        into = self.pick([c for c in live if c != cid])
        m = self.message((MessageKind.RESULT,))
        self.open[into].msgs.append((m.id, m.kind, self.open[into].one_shot, m.tokens))
        del self.open[cid]
        return Return(t, cid, into, m)

    def _close(self, t: float, live: list[ContextId], _n: list[ContextId]) -> Op:
        cid = self.pick(live)
        del self.open[cid]
        return Close(t, cid)

    def _end_session(self, t: float, _l: list[ContextId], _n: list[ContextId]) -> Op:
        open_sessions = sorted(s for s, ended in self.sessions.items() if not ended)
        sess = open_sessions[int(self.rng.integers(0, len(open_sessions)))]
        self.sessions[sess] = True
        for cid in [c for c, x in self.open.items() if x.session == sess]:
            del self.open[cid]
        return EndSession(t, sess)


def _crowd(p: RandomParams) -> tuple[Op, ...]:
    """The background agents of ``p.crowd`` (see :attr:`RandomParams.crowd`), all at t=0: each
    opens, reads the shared prompt and its instruction, and infers a tool call that lasts a
    drawn while (so each is suspended at its own time)."""
    rng = np.random.default_rng([p.seed, 1])  # (not the trace's generator: its draws stand)
    top = _largest_message(p)
    system = Message(MessageId("crowd.m0"), Role.SYSTEM, MessageKind.SYSTEM,
                     int(rng.integers(1, top + 1)), "crowd-system")  # fmt: skip
    ops: list[Op] = []
    for i in range(1, p.crowd + 1):
        cid = ContextId(f"crowd{i}")
        ask = Message(MessageId(f"crowd{i}.m1"), Role.USER, MessageKind.INSTRUCTION,
                      int(rng.integers(1, top + 1)))  # fmt: skip
        call = Message(MessageId(f"crowd{i}.m2"), Role.ASSISTANT, MessageKind.TOOL_CALL,
                       int(rng.integers(1, top + 1)))  # fmt: skip
        wait = round(float(rng.exponential(p.mean_gap)), 3)
        ops += [
            Open(0.0, cid, SessionId(f"crowd{i}"), AgentKind.WORKER),
            Append(0.0, cid, (attrs.evolve(system, id=MessageId(f"crowd{i}.m0")), ask)),
            Infer(0.0, cid, (call,), duration=wait),
        ]
    return tuple(ops)


def random_trace(params: RandomParams | None = None) -> Trace:
    p = params or RandomParams()
    g = _Gen(p)
    ops = tuple(g.step() for _ in range(p.ops))
    if p.crowd:
        ops = _crowd(p) + ops
    if p.token_scale != 1:
        k = p.token_scale
        ops = tuple(
            with_messages(op, [attrs.evolve(m, tokens=m.tokens * k) for m in carried_messages(op)])
            for op in ops
        )
    if p.clock_scale != 1:
        ops = tuple(scaled_clock(op, p.clock_scale) for op in ops)
    meta = attrs.asdict(p)
    if p.weights is None:  # the header of a default-mix trace is what it always was
        del meta["weights"]
    if p.mean_gap == 1.0:
        del meta["mean_gap"]
    if p.max_context_tokens is None:
        del meta["max_context_tokens"]
    if not p.p_system:
        del meta["p_system"]
    if not p.p_deadline:
        del meta["p_deadline"]
    if p.token_scale == 1:
        del meta["token_scale"]
    if p.clock_scale == 1:
        del meta["clock_scale"]
    if not p.crowd:
        del meta["crowd"]
    return Trace(TraceHeader(1, {"kvtrace": 1, "generator": "random", **meta}), ops)
