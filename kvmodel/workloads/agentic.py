"""A ReAct agent workload with sub-agents, compaction, forks, pins and temporaries.

Each session is a main agent working through user turns. A turn is a loop of rounds: the agent
reasons and calls a tool (or spawns worker sub-agents and waits for their results), the
observation is appended, and the loop continues; the turn ends with an answer and a ``turn_end``
that strips the turn's reasoning. When the main context grows past a threshold, a one-shot
compactor reads it and the history is replaced by the summary. Sessions start at staggered times
and run concurrently on one timeline.

Every random choice comes from one ``numpy.random.Generator`` seeded by ``params.seed``; the same
parameters always give the same ops, byte for byte once serialised. The numbers are plausible,
not calibrated: calibrated generators are a separate piece of work (see the workloads issue).
"""

from __future__ import annotations

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
    Return,
    Trace,
    TraceHeader,
    TurnEnd,
)
from kvmodel.messages import AgentKind, Message, MessageKind, Role, SpawnRecord
from kvmodel.workloads.timeline import batch_start, merge_streams

__all__ = ["PRESETS", "AgenticParams", "generate_agentic"]


@attrs.frozen(slots=True)
class AgenticParams:
    seed: int = 0
    sessions: int = 4
    turns: int = 3
    #: spread of the number of turns across sessions: ``turns`` times a mean-one log-normal of
    #: this sigma, rounded, at least 1 (0: every session has ``turns``). A simulated user ends
    #: the conversation when the task is done: tau-bench's sessions run 1.7x longer at p90
    #: than at p50, most of it in the number of turns
    turns_sigma: float = 0.0
    rounds: int = 4  # mean tool rounds per turn (Poisson, at least 1)
    #: spread of a turn's mean rounds across turns: the Poisson mean is ``rounds - 1`` times a
    #: mean-one log-normal of this sigma, drawn per turn (0: no draw, every turn alike). Real
    #: sessions of one family differ several-fold in length (mini-swe-agent: 23 to 65
    #: inferences, p10 to p90), which a Poisson of one mean cannot make
    rounds_sigma: float = 0.0
    #: chance the agent answers a user's turn at once, without calling a tool (0: every turn
    #: calls at least one). A conversational agent answers many of its user's messages directly
    #: -- a question back, a confirmation asked for (tau-bench: about as many user turns as
    #: tool calls) -- which a turn of one or more tool rounds cannot make: its sessions all
    #: alike in length (spec R8, the fit's third revision)
    p_direct: float = 0.0
    session_gap_s: float = 30.0  # mean gap between session starts
    system_tokens: int = 1200
    worker_system_tokens: int = 600
    p_spawn: float = 0.15  # chance a round spawns workers instead of calling a tool
    max_workers: int = 3
    p_temporary: float = 0.1  # chance a round carries a one-inference reminder
    compact_at_tokens: int = 12_000
    #: also compact inside a turn, as soon as a tool result takes the history past
    #: ``compact_at_tokens`` (a harness's automatic compaction at a context-size limit, as
    #: Claude Code's); otherwise only at the end of a turn
    compact_in_turn: bool = False
    pin_system: bool = True
    pin_ttl_s: float | None = None
    tpot_s: float = 0.03
    #: False: every inference takes no time, as in the traces imported from real logs, which
    #: time requests and not their decode (spec R8: a generator fitted to them must not give
    #: its contexts an Active phase the real traces do not have)
    timed_inferences: bool = True
    prefill_tok_per_s: float = 20_000.0
    user_delay_median_s: float = 120.0
    p_fork: float = 0.1  # chance a turn ends with a discarded alternative on a fork
    #: the orchestrating agent is a ``lead`` (multi-agent) rather than a ``main`` agent
    lead: bool = False
    #: chance that a returned worker's trace is handed to a reviewer (Lachesis §3.4: a reviewer
    #: reads a completed worker trace and answers in one inference, without delegating)
    p_review: float = 0.0
    reviewer_system_tokens: int = 400
    #: multipliers of every tool observation's size and of every generated message's (reasoning,
    #: answers, reviews): the knobs a calibration to real traces turns (kvmodel stats --fit)
    observation_scale: float = 1.0
    output_scale: float = 1.0
    #: the task: the first user message's median tokens (log-normal, sigma 0.5), its own to
    #: each session. 0: 50-299 tokens like every later user message. A real harness's task
    #: statement is most of its first prompt (mini-swe-agent: 1.7k tokens after a 140-token
    #: system prompt); without it a fit grows the system prompt instead, which every session
    #: shares -- a hot prefix the real sessions do not have (spec R8, shared reads)
    task_tokens: int = 0
    #: every later user message's median tokens (log-normal, sigma 0.5). 0: 50-299 tokens,
    #: uniform, as before the knob. A simulated customer's replies (tau-bench) are a line or
    #: two; a developer's next instruction a paragraph
    user_tokens: int = 0
    #: the log-normal sigma of the main agent's tool-call message (0: always its median): a
    #: real agent's action is now a one-line command, now a whole file written out
    tool_call_sigma: float = 0.0
    #: the log-normal sigma of the main agent's tool observations (median 600 tokens x
    #: ``observation_scale``): how heavy their tail is -- most tool results small, a few whole
    #: files or test logs -- which sets how far apart in KV a context's reads fall (spec R8,
    #: the reuse distance within a session)
    observation_sigma: float = 0.8
    #: a further multiplier of the reasoning messages alone (the KV a ``turn_end`` kills): real
    #: harnesses of some families log little or none (spec R8, what decides a ranking)
    reasoning_scale: float = 1.0
    #: a multiplier of the tool-call message's size (60 tokens, a worker's 40): the visible
    #: output a ReAct harness re-sends (mini-swe-agent's "THOUGHT ... command" is ~150)
    tool_call_scale: float = 1.0
    #: the main agent's tool call takes a log-normal time with this median and sigma (its
    #: workers' tools keep their own latencies): what a calibration to a timed trace fits
    tool_wait_median_s: float = 3.0
    tool_wait_sigma: float = 0.8
    #: sessions arrive in batches of this many, as runs launched by a pool of workers do: the
    #: first of each batch at its arrival of the Poisson process (mean gap ``session_gap_s``),
    #: the others a millisecond apart after it, so the mean rate is the same and each batch
    #: runs at once (spec/metrics.md E9: real mini-swe-agent runs reach 8 at once at a mean of
    #: 2.3, Poisson arrivals 5). 1: every session at its own arrival (the traces before it)
    arrival_batch: int = attrs.field(default=1, validator=attrs.validators.ge(1))


#: the log-normal sigma of the user's think time between turns (median ``user_delay_median_s``),
#: read too where a log's untimed sessions are put on a generator's clock (``retime``)
USER_WAIT_SIGMA = 1.0


#: Calibrated presets (tests/test_workloads.py measures them against these ranges):
#:
#: * ``single-agent`` -- multi-turn ReAct with reasoning and turn-end strips; the
#:   reasoning-laden (short-lived) share of the KV written per session has a median in
#:   66-83% (Lachesis §3.3); user think time log-normal, median 120 s.
#: * ``multi-agent`` -- one task per session, a lead fanning out workers; worker lifetime
#:   spread p10->p90 within 3.7-23.6x, Kendall tau between worker lifetime and write volume
#:   about 0.5-0.7 (paper 0.51-0.72), lead outliving the median worker 4-6x (paper 4.0-6.1x).
#: * ``multi-agent-review`` -- ``multi-agent`` with a reviewer for half the returned workers
#:   (the paper's multi-agent trace "as the harness records it"; ``multi-agent`` is its
#:   reviewer-disabled twin): the same draws, plus the reviewers'.
#: * ``mini-swe-agent-fit``, ``tau-bench-fit``, ``claude-code-fit`` -- ``single-agent`` fitted
#:   to the shared real traces (``kvmodel stats TRACE --fit single-agent``; spec R8, the figures
#:   there): the knobs the fit moved, nothing else. A local search over the generator's knobs,
#:   not a claim that the generator can make every real shape.
PRESETS: dict[str, AgenticParams] = {
    "single-agent": AgenticParams(sessions=24, turns=3, p_spawn=0.0),
    "multi-agent": AgenticParams(sessions=24, turns=1, rounds=4, p_spawn=0.6, lead=True),
    "multi-agent-review": AgenticParams(
        sessions=24, turns=1, rounds=4, p_spawn=0.6, lead=True, p_review=0.5
    ),
    "mini-swe-agent-fit": AgenticParams(
        sessions=24,
        turns=1,
        rounds=32,
        rounds_sigma=0.25,
        session_gap_s=110.0,
        system_tokens=300,
        p_spawn=0.0,
        p_temporary=0.0,
        compact_at_tokens=10**9,
        pin_system=False,
        timed_inferences=False,
        p_fork=0.0,
        observation_scale=0.25,
        output_scale=0.125,
        observation_sigma=1.6,
        reasoning_scale=0.1,
        tool_call_scale=4.0,
        tool_wait_median_s=4.0,
        tool_wait_sigma=1.0,
        arrival_batch=6,
    ),
    "tau-bench-fit": AgenticParams(
        sessions=24,
        turns=8,
        turns_sigma=0.5,
        rounds=1,
        p_direct=0.25,
        p_spawn=0.0,
        p_temporary=0.0,
        compact_at_tokens=10**9,
        pin_system=False,
        timed_inferences=False,
        p_fork=0.0,
        observation_scale=0.25,
        output_scale=0.25,
        user_tokens=25,
        observation_sigma=0.4,
        reasoning_scale=0.0,
    ),
    "claude-code-fit": AgenticParams(
        sessions=24,
        rounds=48,
        rounds_sigma=0.5,
        session_gap_s=8_200.0,
        system_tokens=26_000,
        p_spawn=0.0,
        p_temporary=0.0,
        compact_at_tokens=150_000,
        compact_in_turn=True,
        pin_system=False,
        timed_inferences=False,
        p_fork=0.0,
        observation_scale=0.5,
        output_scale=0.25,
        observation_sigma=2.0,
        tool_call_scale=3.0,
        tool_wait_median_s=1.5,
        tool_wait_sigma=2.0,
    ),
}


class _Session:
    """Builds one session's ops with its own clock; a worker is a nested ``_Session``."""

    def __init__(self, p: AgenticParams, rng: np.random.Generator, sid: str, t0: float) -> None:
        self.p = p
        self.rng = rng
        self.sid = SessionId(sid)
        self.ops: list[Op] = []
        self.n = 0
        self.t0 = t0
        self.reasoning = p.output_scale * p.reasoning_scale  # a reasoning message's scale

    def mid(self) -> MessageId:
        self.n += 1
        return MessageId(f"{self.sid}.m{self.n}")

    def msg(self, role: Role, kind: MessageKind, tokens: float, h: str | None = None) -> Message:
        return Message(self.mid(), role, kind, max(1, int(tokens)), h)

    def think(self, median: float) -> list[Message]:
        """A reasoning message of about ``median`` tokens (scaled); none, and no draw for it,
        where the harness shows no reasoning (``reasoning_scale`` 0)."""
        if not self.p.reasoning_scale:
            return []
        return [
            self.msg(Role.ASSISTANT, MessageKind.REASONING, self.lognormal(median * self.reasoning))
        ]

    def lognormal(self, median: float, sigma: float = 0.8) -> float:
        return float(median * np.exp(sigma * self.rng.standard_normal()))

    def infer(self, t: float, ctx: ContextId, prompt: int, out: list[Message]) -> float:
        dur = prompt / self.p.prefill_tok_per_s + sum(m.tokens for m in out) * self.p.tpot_s
        dur = round(dur, 3) if self.p.timed_inferences else 0.0
        self.ops.append(Infer(t, ctx, tuple(out), dur))
        return t + dur


#: Instruction verbs and how much work they tend to mean (mean extra tool rounds). The spawn
#: record therefore carries signal about a worker's lifetime, as Lachesis observes of real
#: harnesses; the numbers are illustrative, not calibrated.
_TASKS = {
    "check": 0.0,
    "lookup": 0.0,
    "read": 0.5,
    "summarize": 1.0,
    "investigate": 2.0,
    "fix": 3.0,
    "refactor": 4.5,
    "audit": 6.0,
}
_TOOL_LATENCY_S = {"grep": 0.5, "read": 1.0, "edit": 1.5, "bash": 4.0, "web": 8.0}


def _run_reviewer(
    s: _Session, parent: ContextId, rid: ContextId, t: float, part: str, trace_tokens: int
) -> tuple[float, Message]:
    """A reviewer of a returned worker: the worker's trace as its input, one inference, its
    review returned to ``parent``."""
    spawn = SpawnRecord(f"review {part}", (), trace_tokens, "reviewer")
    s.ops.append(Open(t, rid, s.sid, AgentKind.REVIEWER, parent, spawn, False))
    sys_m = Message(
        MessageId(f"{rid}.sys"),
        Role.SYSTEM,
        MessageKind.SYSTEM,
        s.p.reviewer_system_tokens,
        "reviewer-system-prompt",
    )
    seq = [sys_m, s.msg(Role.USER, MessageKind.INSTRUCTION, trace_tokens)]
    s.ops.append(Append(t, rid, tuple(seq)))
    review = [s.msg(Role.ASSISTANT, MessageKind.OUTPUT, s.lognormal(150 * s.p.output_scale))]
    t = s.infer(t, rid, sum(m.tokens for m in seq), review)
    result = s.msg(Role.TOOL, MessageKind.RESULT, review[0].tokens)
    s.ops.append(Return(t, rid, parent, result))
    return t, result


def _run_worker(
    s: _Session, parent: ContextId, wid: ContextId, t: float
) -> tuple[float, Message, int, str]:
    """A worker's ops; its return time, its result, the tokens of its trace and its part."""
    p, rng = s.p, s.rng
    names = sorted(_TOOL_LATENCY_S)
    tools = tuple(sorted(rng.choice(names, size=int(rng.integers(1, 4)), replace=False).tolist()))
    verbs = sorted(_TASKS)
    verb = verbs[int(rng.integers(0, len(verbs)))]
    rounds = 1 + int(rng.poisson(1.0 + _TASKS[verb] + 0.5 * len(tools)))
    part = f"part {int(rng.integers(0, 100))}"
    instruction = f"{verb} {part} using " + ", ".join(tools)
    ins_tokens = 40 + int(rng.integers(0, 200))
    s.ops.append(
        Open(
            t,
            wid,
            s.sid,
            AgentKind.WORKER,
            parent,
            SpawnRecord(instruction, tools, ins_tokens),
            False,
        )
    )
    sys_m = Message(
        MessageId(f"{wid}.sys"),
        Role.SYSTEM,
        MessageKind.SYSTEM,
        p.worker_system_tokens,
        "worker-system-prompt",
    )
    seq = [sys_m, s.msg(Role.USER, MessageKind.INSTRUCTION, ins_tokens)]
    s.ops.append(Append(t, wid, tuple(seq)))
    tokens = sum(m.tokens for m in seq)
    for _ in range(rounds):
        out = [
            *s.think(300),
            s.msg(Role.ASSISTANT, MessageKind.TOOL_CALL, 40 * p.tool_call_scale),
        ]
        t = s.infer(t, wid, tokens, out)
        tool = tools[int(rng.integers(0, len(tools)))]
        t += round(s.lognormal(_TOOL_LATENCY_S[tool], 0.5), 3)
        obs = s.msg(Role.TOOL, MessageKind.OBSERVATION, s.lognormal(500 * p.observation_scale))
        s.ops.append(Append(t, wid, (obs,)))
        tokens += sum(m.tokens for m in out) + obs.tokens
    final = [s.msg(Role.ASSISTANT, MessageKind.OUTPUT, s.lognormal(200 * s.p.output_scale))]
    t = s.infer(t, wid, tokens, final)
    result = s.msg(Role.TOOL, MessageKind.RESULT, final[0].tokens)
    s.ops.append(Return(t, wid, parent, result))
    return t, result, tokens + final[0].tokens, part


def _mean_one(rng: np.random.Generator, sigma: float) -> float:
    """A draw of the log-normal of mean one and this sigma (the spread of turns and rounds)."""
    return float(np.exp(sigma * rng.standard_normal() - sigma**2 / 2))


def _session_ops(p: AgenticParams, rng: np.random.Generator, index: int, t0: float) -> list[Op]:
    s = _Session(p, rng, f"s{index}", t0)
    main = ContextId(f"s{index}.main")
    t = t0
    s.ops.append(Open(t, main, s.sid, AgentKind.LEAD if p.lead else AgentKind.MAIN))
    sys_m = Message(
        MessageId(f"{main}.sys"),
        Role.SYSTEM,
        MessageKind.SYSTEM,
        p.system_tokens,
        "main-system-prompt",
    )
    history: list[Message] = [sys_m]
    s.ops.append(Append(t, main, (sys_m,)))
    if p.pin_system:
        s.ops.append(Pin(t, main, 0, 1, p.pin_ttl_s))
    n_workers = 0
    n_compactions = 0
    n_forks = 0

    def compact(t: float, history: list[Message]) -> tuple[float, list[Message]]:
        """Past the threshold, a one-shot compactor summarises the history, which the main
        context then replaces with the summary (draws nothing)."""
        nonlocal n_compactions
        if sum(m.tokens for m in history) <= p.compact_at_tokens:
            return t, history
        n_compactions += 1
        comp = ContextId(f"s{index}.c{n_compactions}")
        s.ops.append(Open(t, comp, s.sid, AgentKind.COMPACTOR, main, None, True))
        ins = s.msg(Role.USER, MessageKind.INSTRUCTION, 80, "compaction-instruction")
        s.ops.append(Append(t, comp, (*history, ins)))
        summary_tokens = max(200, sum(m.tokens for m in history) // 10)
        t = s.infer(
            t,
            comp,
            sum(m.tokens for m in history) + ins.tokens,
            [s.msg(Role.ASSISTANT, MessageKind.SUMMARY, summary_tokens)],
        )
        s.ops.append(Remove(t, main, 1, len(history) - 1))
        summary = s.msg(Role.USER, MessageKind.SUMMARY, summary_tokens)
        s.ops.append(Append(t, main, (summary,)))
        return t, [sys_m, summary]

    n_turns = p.turns
    if p.turns_sigma:  # (drawn only where set: the other presets keep their draws)
        n_turns = max(1, round(p.turns * _mean_one(rng, p.turns_sigma)))
    for turn in range(n_turns):
        if turn:
            t += round(s.lognormal(p.user_delay_median_s, USER_WAIT_SIGMA), 3)
        if turn == 0 and p.task_tokens:
            user = s.msg(Role.USER, MessageKind.USER, s.lognormal(p.task_tokens, 0.5))
        else:
            size = s.lognormal(p.user_tokens, 0.5) if p.user_tokens else 50 + rng.integers(0, 250)
            user = s.msg(Role.USER, MessageKind.USER, float(size))
        history.append(user)
        s.ops.append(Append(t, main, (user,)))
        # (drawn only where turns may go without a tool: the other presets keep their draws)
        if p.p_direct and rng.random() < p.p_direct:
            n_rounds = 0
        else:
            mean: float = max(p.rounds - 1, 0)
            if p.rounds_sigma:
                mean *= _mean_one(rng, p.rounds_sigma)
            n_rounds = 1 + int(rng.poisson(mean))
        for _ in range(n_rounds):
            if rng.random() < p.p_temporary:
                note = s.msg(Role.SYSTEM, MessageKind.INSTRUCTION, 30 + int(rng.integers(0, 60)))
                s.ops.append(Append(t, main, (note,), temporary=True))
            out = [
                *s.think(400),
                s.msg(
                    Role.ASSISTANT,
                    MessageKind.TOOL_CALL,
                    s.lognormal(60 * p.tool_call_scale, p.tool_call_sigma)
                    if p.tool_call_sigma
                    else 60 * p.tool_call_scale,
                ),
            ]
            t = s.infer(t, main, sum(m.tokens for m in history), out)
            history.extend(out)
            if rng.random() < p.p_spawn:
                ends: list[tuple[float, Message]] = []
                for _w in range(1 + int(rng.integers(0, p.max_workers))):
                    n_workers += 1
                    wid = ContextId(f"s{index}.w{n_workers}")
                    end, result, trace_tokens, part = _run_worker(s, main, wid, t)
                    ends.append((end, result))
                    # drawn only when reviewers are on: the reviewer-free presets keep their draws
                    if p.p_review > 0 and rng.random() < p.p_review:
                        rid = ContextId(f"s{index}.r{n_workers}")
                        ends.append(_run_reviewer(s, main, rid, end, part, trace_tokens))
                t = max(e for e, _ in ends)
                history.extend(r for _, r in sorted(ends, key=lambda x: x[0]))
            else:
                t += round(s.lognormal(p.tool_wait_median_s, p.tool_wait_sigma), 3)
                obs = s.msg(
                    Role.TOOL,
                    MessageKind.OBSERVATION,
                    s.lognormal(600 * p.observation_scale, p.observation_sigma),
                )
                s.ops.append(Append(t, main, (obs,)))
                history.append(obs)
            if p.compact_in_turn:
                t, history = compact(t, history)
        out = [
            *s.think(300),
            s.msg(Role.ASSISTANT, MessageKind.OUTPUT, s.lognormal(150 * s.p.output_scale)),
        ]
        t = s.infer(t, main, sum(m.tokens for m in history), out)
        history.extend(out)
        s.ops.append(TurnEnd(t, main))
        history = [m for m in history if m.kind is not MessageKind.REASONING]
        if rng.random() < p.p_fork:
            # the harness explores an alternative answer on a branch, then discards it
            n_forks += 1
            branch = ContextId(f"s{index}.f{n_forks}")
            alt = s.msg(Role.USER, MessageKind.INSTRUCTION, 40 + int(rng.integers(0, 80)))
            s.ops += [Fork(t, branch, main), Append(t, branch, (alt,))]
            t_b = s.infer(
                t,
                branch,
                sum(m.tokens for m in history) + alt.tokens,
                [s.msg(Role.ASSISTANT, MessageKind.OUTPUT, s.lognormal(150 * s.p.output_scale))],
            )
            s.ops.append(Close(t_b, branch))
            t = t_b  # the harness waits for the alternative before going on
        t, history = compact(t, history)
    s.ops.append(EndSession(t, s.sid))
    # workers run concurrently with each other: order the session's ops by time (stable)
    return sorted(s.ops, key=lambda o: o.t)


#: knobs added after traces were first generated: a header names them only when they are set
_LATER_KNOBS = (
    "observation_scale",
    "observation_sigma",
    "task_tokens",
    "user_tokens",
    "tool_call_sigma",
    "output_scale",
    "reasoning_scale",
    "tool_call_scale",
    "rounds_sigma",
    "turns_sigma",
    "p_direct",
    "timed_inferences",
    "compact_in_turn",
    "tool_wait_median_s",
    "tool_wait_sigma",
    "arrival_batch",
)


def generate_agentic(params: AgenticParams | None = None) -> Trace:
    """A deterministic trace for ``params`` (see module docstring)."""
    p = params or AgenticParams()
    rng = np.random.default_rng(p.seed)
    streams = []
    arrivals = [0.0]  # the Poisson process's, one drawn after each session's ops
    for i in range(p.sessions):
        streams.append(_session_ops(p, rng, i, batch_start(arrivals, i, p.arrival_batch)))
        arrivals.append(arrivals[-1] + float(rng.exponential(p.session_gap_s)))
    ops = tuple(merge_streams(streams))
    meta = {"kvtrace": 1, "generator": "agentic", **attrs.asdict(p)}
    if not p.p_review:  # a reviewer-free workload's header is what it was before reviewers
        del meta["p_review"], meta["reviewer_system_tokens"]
    # likewise for the knobs added since (calibration, compaction inside a turn, tool waits):
    # at their defaults the header is what it was before them
    fields = attrs.fields_dict(AgenticParams)
    for knob in _LATER_KNOBS:
        if meta[knob] == fields[knob].default:
            del meta[knob]
    return Trace(TraceHeader(1, meta), ops)
