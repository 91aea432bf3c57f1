"""The statistics a generator is calibrated by, measured the same way on any trace -- generated
or imported from a real agent's log -- so the two can be printed side by side
(``kvmodel stats``; spec/importers.md R8).

Per trace: sessions; inferences per session; prompt tokens per inference (p10, p50, p90); the
input:output token ratio; the wait of a context between the end of one of its inferences and
its next op (the tool's or user's time, p50 and p90; none for sessions whose times an importer
made up, which the trace's header lists as ``untimed_sessions``); sub-agents (worker
contexts), reviewers and compactions (compactor contexts) per session, and how many of the
compactions fall inside a turn; and the share of prompt tokens the previous
inference of the same context already held (the reuse a prefix cache can have at most).

And the structure that decides how lifecycle-aware policies rank (spec R8, "what decides a
ranking"): the share of the KV written that dies before its session ends, by the op that kills
it (a turn-end strip, an edit, a context's close or return, a one-shot context's end, a
temporary's expiry); the reasoning share of the KV written; forks and pins per session; the
waits split by what the context waits on (a tool, the user, a sub-agent); and the reuse distance
of the KV an inference reads again (tokens of KV written anywhere between two reads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from kvmodel.ids import ContentKey, ContextId
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
    TurnEnd,
)
from kvmodel.logical import Sequences
from kvmodel.messages import AgentKind, Message, MessageKind, Role

__all__ = [
    "ROWS",
    "TIME_FIELDS",
    "WorkloadStats",
    "render_side_by_side",
    "waiting_on",
    "workload_stats",
]


@attrs.frozen
class WorkloadStats:
    sessions: int
    inferences: int
    inferences_per_session: float
    #: a session's inferences, p90 over its p50 (how unequal the sessions are: 1 when alike)
    session_inferences_spread: float
    prompt_p10: float
    prompt_p50: float
    prompt_p90: float
    input_output_ratio: float
    #: None where the trace has no logged wait (every session untimed, or no inference is
    #: followed by an op of its context): a made-up time is no statistic
    wait_p50_s: float | None
    wait_p90_s: float | None
    #: the tail: a wait of a slow tool (a test run, an install) -- what an MRU order within
    #: Suspended bets against (spec/metrics.md E9)
    wait_p99_s: float | None
    subagents_per_session: float
    reviewers_per_session: float
    compactions_per_session: float
    #: compactions whose parent was inside a turn (an inference since its last ``turn_end``):
    #: a harness compacting at a size limit, not between turns
    compactions_in_turn_per_session: float
    #: prompt tokens the same context's previous inference already held, over all prompt tokens
    carried_share: float
    #: KV written: tokens of messages that enter the trace's contexts (a copy sharing a
    #: message's KV, a fork's or a compactor's, writes nothing; a message written again after
    #: it died counts again)
    written_tokens: int
    #: shares of the KV written that die (no context holds them any more) before their
    #: session ends, by the op that kills them: a turn-end strip (reasoning), an edit (remove,
    #: replace: compaction's drop of the history too), a context's close or return, a one-shot
    #: context's end, a temporary's expiry after its inference. The rest lives to the end of
    #: its session (``live_to_end_share``)
    dead_turn_end_share: float
    dead_edit_share: float
    dead_close_share: float
    dead_one_shot_share: float
    dead_temporary_share: float
    live_to_end_share: float
    #: reasoning messages' tokens over the KV written
    reasoning_share: float
    #: prompt tokens read whose content another session's contexts hold too (at any time in
    #: the trace: how the sessions interleave does not enter), over all prompt tokens read: a
    #: prefix the sessions share (a common system prompt) is hot in any cache, a session's own
    #: task statement is not
    shared_read_share: float
    #: inferences that take time (a duration above 0) over all: 0 in a trace imported from a
    #: log, which times requests, not decode -- an inference's KV is Active only at its instant
    timed_inference_share: float
    forks_per_session: float
    pins_per_session: float
    #: waits split by what ended them: a tool's result (an append of no user message), the
    #: user (an append holding a user message), a sub-agent (a return into the context): their
    #: times (None as for the waits above), and the share of all waits each of the last two
    #: is -- counted in untimed sessions too, since what ends a wait is in the ops, not the
    #: clock (None only where no inference is followed by its context's next input)
    wait_tool_p50_s: float | None
    wait_tool_p90_s: float | None
    wait_user_p50_s: float | None
    wait_user_p90_s: float | None
    wait_subagent_p50_s: float | None
    wait_subagent_p90_s: float | None
    wait_user_share: float | None
    wait_subagent_share: float | None
    #: reuse distance: for each message an inference reads again (its KV was written by an
    #: earlier inference), the tokens of KV written anywhere in the trace since it was last
    #: read or written -- what a recency cache must hold for the read to hit -- weighted by
    #: the message's tokens; p50 and p90, in thousands of tokens (None: nothing is read again,
    #: or a session's times are made up -- the interleaving of sessions decides the distance)
    reuse_p50_ktok: float | None
    reuse_p90_ktok: float | None
    #: the same distance counting only the KV its own session wrote in between: the session's
    #: shape alone (how much each step adds), whatever the other sessions do -- measured in
    #: untimed sessions too, and what a fit on a few sessions can match (the distance above
    #: adds the other sessions' writes, which the arrivals decide)
    reuse_own_p50_ktok: float | None
    reuse_own_p90_ktok: float | None
    #: a timed session's length (first op to end_session), p50; and the mean number of timed
    #: sessions running at once over the span from the first's start to the last's end (None
    #: as for the waits): with the reuse distance, how many tenants share the cache
    session_p50_s: float | None
    session_mean_s: float | None
    concurrency: float | None
    #: the number of timed sessions running at once, time-weighted over the same span: its
    #: 90th percentile and its peak (None as above). The mean hides how bursty the arrivals
    #: are, and a cache feels the peaks (spec/metrics.md E9: real runs launched in batches)
    concurrency_p90: float | None
    concurrency_peak: float | None


#: the rows of the side-by-side table: (field, label, format)
ROWS: tuple[tuple[str, str, str], ...] = (
    ("sessions", "sessions", "{:.0f}"),
    ("inferences_per_session", "inferences / session", "{:.1f}"),
    ("session_inferences_spread", "inferences / session p90 : p50", "{:.2f}"),
    ("prompt_p10", "prompt tokens p10", "{:.0f}"),
    ("prompt_p50", "prompt tokens p50", "{:.0f}"),
    ("prompt_p90", "prompt tokens p90", "{:.0f}"),
    ("input_output_ratio", "input : output tokens", "{:.1f}"),
    ("wait_p50_s", "wait between inferences p50 s", "{:.1f}"),
    ("wait_p90_s", "wait between inferences p90 s", "{:.1f}"),
    ("wait_p99_s", "wait between inferences p99 s", "{:.1f}"),
    ("subagents_per_session", "sub-agents / session", "{:.2f}"),
    ("reviewers_per_session", "reviewers / session", "{:.2f}"),
    ("compactions_per_session", "compactions / session", "{:.2f}"),
    ("compactions_in_turn_per_session", "  of them inside a turn", "{:.2f}"),
    ("carried_share", "prompt carried from last inference", "{:.1%}"),
    ("written_tokens", "KV written (tokens)", "{:.0f}"),
    ("dead_turn_end_share", "KV dead by turn_end (reasoning)", "{:.1%}"),
    ("dead_edit_share", "KV dead by remove/replace", "{:.1%}"),
    ("dead_close_share", "KV dead by close/return", "{:.1%}"),
    ("dead_one_shot_share", "KV dead by a one-shot's end", "{:.1%}"),
    ("dead_temporary_share", "KV dead as temporary", "{:.1%}"),
    ("live_to_end_share", "KV live until its session ends", "{:.1%}"),
    ("reasoning_share", "reasoning share of KV written", "{:.1%}"),
    ("shared_read_share", "prompt read that other sessions hold", "{:.1%}"),
    ("timed_inference_share", "inferences that take time", "{:.1%}"),
    ("forks_per_session", "forks / session", "{:.2f}"),
    ("pins_per_session", "pins / session", "{:.2f}"),
    ("wait_tool_p50_s", "wait on a tool p50 s", "{:.1f}"),
    ("wait_tool_p90_s", "wait on a tool p90 s", "{:.1f}"),
    ("wait_user_p50_s", "wait on the user p50 s", "{:.1f}"),
    ("wait_user_p90_s", "wait on the user p90 s", "{:.1f}"),
    ("wait_subagent_p50_s", "wait on a sub-agent p50 s", "{:.1f}"),
    ("wait_subagent_p90_s", "wait on a sub-agent p90 s", "{:.1f}"),
    ("wait_user_share", "waits on the user", "{:.1%}"),
    ("wait_subagent_share", "waits on a sub-agent", "{:.1%}"),
    ("reuse_p50_ktok", "reuse distance p50 (k tokens)", "{:.1f}"),
    ("reuse_p90_ktok", "reuse distance p90 (k tokens)", "{:.1f}"),
    ("reuse_own_p50_ktok", "  within its session p50", "{:.1f}"),
    ("reuse_own_p90_ktok", "  within its session p90", "{:.1f}"),
    ("session_p50_s", "session length p50 s", "{:.0f}"),
    ("session_mean_s", "session length mean s", "{:.0f}"),
    ("concurrency", "sessions running at once (mean)", "{:.2f}"),
    ("concurrency_p90", "sessions running at once p90", "{:.0f}"),
    ("concurrency_peak", "sessions running at once (peak)", "{:.0f}"),
)


def _pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(xs, q)) if len(xs) else 0.0


#: the op kinds that kill KV, as the dead-share fields name them (an ``infer`` kills a
#: temporary, or the whole of a one-shot context that ends with it)
_KILLERS = ("turn_end", "edit", "close", "one_shot", "temporary", "session_end")


def _killer(op: Op, closed: bool) -> str:
    if isinstance(op, TurnEnd):
        return "turn_end"
    if isinstance(op, Remove | Replace):
        return "edit"
    if isinstance(op, Close | Return):
        return "close"
    if isinstance(op, Infer):
        return "one_shot" if closed else "temporary"
    return "session_end"  # (EndSession: nothing else takes a message out of a context)


class _Lifetimes:
    """Who holds each piece of KV (by content key, B1), after every op: what is written, what
    dies and by which op, and how far apart in KV written its reads are."""

    def __init__(self, seqs: Sequences, session_of: Mapping[str, str]) -> None:
        self.seqs = seqs
        self.held: dict[ContextId, dict[ContentKey, Message]] = {}  # ctx -> key -> message
        self.holders: dict[ContentKey, int] = {}
        self.written = 0
        self.reasoning = 0
        self.dead = dict.fromkeys(_KILLERS, 0)
        self.last_read: dict[ContentKey, int] = {}  # key -> self.written when last read/written
        self.reuse: list[tuple[int, int]] = []  # (distance in tokens written, tokens)
        # the same within a session: what each session wrote, and what it had written when it
        # last read or wrote each key, with the key's birth (a key that died and was written
        # again is a new one: an entry of an earlier birth is no reuse)
        self.session_of = session_of
        self.births = 0
        self.born: dict[ContentKey, int] = {}
        self.written_by: dict[str, int] = {}
        self.last_read_by: dict[tuple[str, ContentKey], tuple[int, int]] = {}
        self.reuse_own: list[tuple[int, int]] = []
        self.writing: tuple[int, frozenset[ContentKey]] = (0, frozenset())
        # key -> the sessions whose contexts ever held it, and the prompt tokens read of it
        self.sessions_of_key: dict[ContentKey, set[str]] = {}
        self.read_of_key: dict[ContentKey, int] = {}

    def read(self, ctx: ContextId, output: tuple[Message, ...]) -> None:
        """An inference of ``ctx``: its prompt read (a message read before is a reuse; the
        rest is read for the first time), its output written."""
        sid = self.session_of[ctx]
        own = self.written_by.get(sid, 0)
        for m in self.seqs.messages(ctx):
            k = m.content_key
            self.read_of_key[k] = self.read_of_key.get(k, 0) + m.tokens
            was = self.last_read.get(k)
            if was is not None:
                self.reuse.append((self.written - was, m.tokens))
                mine = self.last_read_by.get((sid, k))
                if mine is not None and mine[1] == self.born[k]:
                    self.reuse_own.append((own - mine[0], m.tokens))
            self.last_read[k] = self.written
            self.last_read_by[sid, k] = (own, self.born[k])
        for m in output:
            self.last_read[m.content_key] = self.written
        # (the output is born when the op is applied, after this read: :meth:`after` marks it)
        self.writing = (own, frozenset(m.content_key for m in output))

    def shared_read_share(self) -> float:
        """Of the prompt tokens read, the share whose content more than one session held."""
        read = sum(self.read_of_key.values())
        shared = sum(n for k, n in self.read_of_key.items() if len(self.sessions_of_key[k]) > 1)
        return shared / read if read else 0.0

    def after(self, op: Op, contexts: list[ContextId]) -> None:
        """``op`` has been applied: what entered and left each of the ``contexts`` it touched."""
        for c in contexts:
            before = self.held.get(c, {})
            now = {m.content_key: m for m in self.seqs.messages(c)}
            sid = self.session_of[c]
            for k, m in now.items():
                if k not in before:
                    self.sessions_of_key.setdefault(k, set()).add(sid)
                    n = self.holders.get(k, 0)
                    self.holders[k] = n + 1
                    if not n:
                        self.written += m.tokens
                        self.births += 1
                        self.born[k] = self.births
                        self.written_by[sid] = self.written_by.get(sid, 0) + m.tokens
                        if k in self.writing[1]:
                            self.last_read_by[sid, k] = (self.writing[0], self.births)
                        if m.kind is MessageKind.REASONING:
                            self.reasoning += m.tokens
            killer = _killer(op, closed=not now)
            for k, m in before.items():
                if k not in now:
                    n = self.holders[k] - 1
                    if n:
                        self.holders[k] = n
                    else:
                        del self.holders[k]
                        self.last_read.pop(k, None)  # (written afresh if it ever returns)
                        self.dead[killer] += m.tokens
            self.held[c] = now
        self.writing = (0, frozenset())


def _touched(op: Op, of_session: dict[str, list[ContextId]]) -> list[ContextId]:
    """The contexts whose messages ``op`` can change."""
    if isinstance(op, EndSession):
        return of_session.get(op.session, [])
    if isinstance(op, Return):
        return [op.ctx, op.into]
    if isinstance(op, Pin):
        return []
    return [op.ctx]


def waiting_on(op: Op) -> tuple[ContextId | None, str | None]:
    """The context whose wait ``op`` may end (a return's parent, or the op's context; None for
    an op of no context), and what that wait was on: ``tool``, ``user``, ``subagent`` or
    ``other``, or None if ``op`` gives the context no input (a turn-end strip, a pin, ...: the
    harness's bookkeeping, the context still waits). A wait exists only after the context's
    inference: the caller keeps which contexts have one pending. One definition for the
    statistics and for :func:`kvmodel.workloads.retime.with_waits_of`."""
    ctx = op.into if isinstance(op, Return) else getattr(op, "ctx", None)
    return ctx, None if ctx is None else _wait_kind(op, ctx)


def _wait_kind(op: Op, ctx: ContextId) -> str | None:
    """What ``ctx``'s wait that ``op`` ends was on: None if ``op`` gives the context no input
    (a turn-end strip, a pin, ... : the harness's bookkeeping, the context still waits)."""
    if isinstance(op, Return):
        return "subagent" if op.into == ctx else None
    if isinstance(op, Append):
        user = any(m.role is Role.USER and m.kind is MessageKind.USER for m in op.messages)
        return "user" if user else "tool"
    if isinstance(op, Infer | Replace | Remove):
        return "other"
    return None


def workload_stats(trace: Trace) -> WorkloadStats:
    """The statistics of ``trace``, in one pass. Prompt sizes are logical, whatever the memory:
    the context's sequence at each ``infer``, from :class:`kvmodel.logical.Sequences` (the trace's
    meaning alone, no KV kept)."""
    seqs = Sequences(16)
    session_of: dict[str, str] = {}  # context -> its session (a fork's is its source's)
    life = _Lifetimes(seqs, session_of)
    prompts: list[float] = []
    outputs = 0
    carried = 0
    last: dict[str, int] = {}  # context -> its previous inference's prompt + output
    sessions: set[str] = set()
    kinds: dict[AgentKind, int] = {}
    waits: dict[str, list[float]] = {"tool": [], "user": [], "subagent": [], "other": []}
    kind_counts = dict.fromkeys(waits, 0)  # every session's, timed or not: what ends a wait
    untimed = frozenset(trace.header.meta.get("untimed_sessions", ()))
    # context -> end of its last inference (None if its session's times are made up), until
    # its next input
    ended: dict[str, float | None] = {}
    of_session: dict[str, list[ContextId]] = {}
    in_turn: set[str] = set()  # contexts with an inference since their last turn_end
    compactions_in_turn = 0
    forks = pins = 0
    spans: dict[str, list[float]] = {}  # timed session -> [first op, end]
    infers_of: dict[str, int] = {}  # session -> its inferences
    timed_infers = 0
    for op in trace.ops:
        ctx = getattr(op, "ctx", None)
        waiting, kind = waiting_on(op)
        if waiting is not None and waiting in ended:
            if kind is not None:
                kind_counts[kind] += 1
                began = ended.pop(waiting)
                if began is not None:
                    waits[kind].append(max(0.0, op.t - began))
            elif isinstance(op, Close):
                del ended[waiting]
        if isinstance(op, Open):
            sessions.add(op.session)
            session_of[op.ctx] = op.session
            of_session.setdefault(op.session, []).append(op.ctx)
            kinds[op.agent] = kinds.get(op.agent, 0) + 1
            if op.agent is AgentKind.COMPACTOR and op.parent in in_turn:
                compactions_in_turn += 1
        elif isinstance(op, Fork):
            session_of[op.ctx] = session_of[op.src]
            of_session[session_of[op.ctx]].append(op.ctx)
            forks += 1
        elif isinstance(op, Pin):
            pins += 1
        elif isinstance(op, TurnEnd):
            in_turn.discard(op.ctx)
        elif isinstance(op, Infer):
            in_turn.add(op.ctx)
            infers_of[session_of[op.ctx]] = infers_of.get(session_of[op.ctx], 0) + 1
            timed_infers += op.duration > 0
            prompt = sum(m.tokens for m in seqs.messages(op.ctx))
            out = sum(m.tokens for m in op.output)
            prev = last.get(op.ctx)
            if prev is not None:
                carried += min(prev, prompt)
            last[op.ctx] = prompt + out
            prompts.append(float(prompt))
            outputs += out
            life.read(op.ctx, op.output)
            ended[op.ctx] = None if session_of.get(op.ctx) in untimed else op.t + op.duration
        seqs.apply(op)
        life.after(op, _touched(op, of_session))
        sid = op.session if isinstance(op, EndSession) else session_of.get(ctx or "")
        if sid is not None and sid not in untimed:
            spans.setdefault(sid, [op.t, op.t])[1] = op.t
    n = max(1, len(sessions))
    timed = [w for ws in waits.values() for w in ws]
    written = max(1, life.written)
    dead = {k: v / written for k, v in life.dead.items()}

    def pct(kind: str, q: float) -> float | None:
        return _pct(waits[kind], q) if waits[kind] else None

    waited = sum(kind_counts.values())

    def share(kind: str) -> float | None:
        return kind_counts[kind] / waited if waited else None

    # (how sessions interleave on one timeline: made-up times make a made-up distance)
    reuse = None if untimed else _weighted_pcts(life.reuse, (50, 90))
    reuse_own = _weighted_pcts(life.reuse_own, (50, 90))
    per_session = [float(v) for v in infers_of.values()]
    lengths = [b - a for a, b in spans.values()]
    window = max((b for _, b in spans.values()), default=0.0) - min(
        (a for a, _ in spans.values()), default=0.0
    )
    at_once = _at_once(list(spans.values())) if window > 0 else None
    return WorkloadStats(
        sessions=len(sessions),
        inferences=len(prompts),
        inferences_per_session=len(prompts) / n,
        session_inferences_spread=_pct(per_session, 90) / max(1e-9, _pct(per_session, 50))
        if per_session
        else 0.0,
        prompt_p10=_pct(prompts, 10),
        prompt_p50=_pct(prompts, 50),
        prompt_p90=_pct(prompts, 90),
        input_output_ratio=sum(prompts) / outputs if outputs else float("inf"),
        wait_p50_s=_pct(timed, 50) if timed else None,
        wait_p90_s=_pct(timed, 90) if timed else None,
        wait_p99_s=_pct(timed, 99) if timed else None,
        subagents_per_session=kinds.get(AgentKind.WORKER, 0) / n,
        reviewers_per_session=kinds.get(AgentKind.REVIEWER, 0) / n,
        compactions_per_session=kinds.get(AgentKind.COMPACTOR, 0) / n,
        compactions_in_turn_per_session=compactions_in_turn / n,
        carried_share=carried / sum(prompts) if prompts else 0.0,
        written_tokens=life.written,
        dead_turn_end_share=dead["turn_end"],
        dead_edit_share=dead["edit"],
        dead_close_share=dead["close"],
        dead_one_shot_share=dead["one_shot"],
        dead_temporary_share=dead["temporary"],
        live_to_end_share=1.0 - sum(v for k, v in dead.items() if k != "session_end")
        if life.written
        else 0.0,
        reasoning_share=life.reasoning / written,
        shared_read_share=life.shared_read_share(),
        timed_inference_share=timed_infers / len(prompts) if prompts else 0.0,
        forks_per_session=forks / n,
        pins_per_session=pins / n,
        wait_tool_p50_s=pct("tool", 50),
        wait_tool_p90_s=pct("tool", 90),
        wait_user_p50_s=pct("user", 50),
        wait_user_p90_s=pct("user", 90),
        wait_subagent_p50_s=pct("subagent", 50),
        wait_subagent_p90_s=pct("subagent", 90),
        wait_user_share=share("user"),
        wait_subagent_share=share("subagent"),
        reuse_p50_ktok=None if reuse is None else reuse[0] / 1000,
        reuse_p90_ktok=None if reuse is None else reuse[1] / 1000,
        reuse_own_p50_ktok=None if reuse_own is None else reuse_own[0] / 1000,
        reuse_own_p90_ktok=None if reuse_own is None else reuse_own[1] / 1000,
        session_p50_s=_pct(lengths, 50) if lengths else None,
        session_mean_s=sum(lengths) / len(lengths) if lengths else None,
        concurrency=sum(lengths) / window if window > 0 else None,
        concurrency_p90=at_once[0] if at_once else None,
        concurrency_peak=at_once[1] if at_once else None,
    )


def _at_once(spans: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """The number of spans open at once, weighted by how long it lasts, from the first start to
    the last end: its 90th percentile and its maximum (None over an empty span). A span ending
    where another starts does not overlap it."""
    events = sorted([(b, -1) for a, b in spans] + [(a, 1) for a, b in spans])
    if not events or events[-1][0] <= events[0][0]:
        return None
    held: dict[int, float] = {}
    n, last = 0, events[0][0]
    for t, d in events:
        held[n] = held.get(n, 0.0) + (t - last)
        n, last = n + d, t
    counts = sorted(held)
    weights = np.cumsum([held[k] for k in counts])
    p90 = counts[int(np.searchsorted(weights, 0.9 * weights[-1]))]
    return float(p90), float(max(k for k in counts if held[k] > 0))


def _weighted_pcts(xs: list[tuple[int, int]], qs: tuple[float, ...]) -> tuple[float, ...] | None:
    """Percentiles of the values of ``(value, weight)`` pairs, each counted ``weight`` times."""
    if not xs:
        return None
    v = np.array([x for x, _ in xs], dtype=np.float64)
    w = np.array([x for _, x in xs], dtype=np.float64)
    order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(w[order])
    return tuple(float(v[np.searchsorted(cum, q / 100 * cum[-1])]) for q in qs)


def _cell(fmt: str, v: float | None) -> str:
    return "n/a" if v is None else fmt.format(v)


def render_side_by_side(columns: Mapping[str, WorkloadStats]) -> str:
    """One row per statistic, one column per trace."""
    names = list(columns)
    width = max(12, *(len(n) + 2 for n in names))
    lines = [f"{'statistic':<36}" + "".join(f"{n:>{width}}" for n in names)]
    for field, label, fmt in ROWS:
        cells = "".join(f"{_cell(fmt, getattr(columns[n], field)):>{width}}" for n in names)
        lines.append(f"{label:<36}{cells}")
    return "\n".join(lines)


#: the statistics that read op times: the waits, the sessions' lengths and overlap, and the
#: reuse distance (how sessions interleave on one timeline); the rest read the ops alone
TIME_FIELDS = tuple(
    f
    for f, _, _ in ROWS
    if f.startswith(("wait_", "session_p", "session_mean", "reuse_p", "concurrency"))
    and not f.endswith("_share")
)
