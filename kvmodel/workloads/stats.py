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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from kvmodel.io.trace import Fork, Infer, Open, Trace, TurnEnd
from kvmodel.logical import Sequences
from kvmodel.messages import AgentKind
from kvmodel.workloads.agentic import AgenticParams, generate_agentic

__all__ = [
    "COMPACTION_GRID",
    "FIT_COUNTS",
    "FIT_GRID",
    "FIT_TARGETS",
    "ROWS",
    "SPAWN_GRID",
    "WAIT_GRID",
    "WAIT_TARGETS",
    "WorkloadStats",
    "fit_error",
    "fit_generator",
    "render_side_by_side",
    "wait_error",
    "workload_stats",
]


@attrs.frozen
class WorkloadStats:
    sessions: int
    inferences: int
    inferences_per_session: float
    prompt_p10: float
    prompt_p50: float
    prompt_p90: float
    input_output_ratio: float
    #: None where the trace has no logged wait (every session untimed, or no inference is
    #: followed by an op of its context): a made-up time is no statistic
    wait_p50_s: float | None
    wait_p90_s: float | None
    subagents_per_session: float
    reviewers_per_session: float
    compactions_per_session: float
    #: compactions whose parent was inside a turn (an inference since its last ``turn_end``):
    #: a harness compacting at a size limit, not between turns
    compactions_in_turn_per_session: float
    #: prompt tokens the same context's previous inference already held, over all prompt tokens
    carried_share: float


#: the rows of the side-by-side table: (field, label, format)
ROWS: tuple[tuple[str, str, str], ...] = (
    ("sessions", "sessions", "{:.0f}"),
    ("inferences_per_session", "inferences / session", "{:.1f}"),
    ("prompt_p10", "prompt tokens p10", "{:.0f}"),
    ("prompt_p50", "prompt tokens p50", "{:.0f}"),
    ("prompt_p90", "prompt tokens p90", "{:.0f}"),
    ("input_output_ratio", "input : output tokens", "{:.1f}"),
    ("wait_p50_s", "wait between inferences p50 s", "{:.1f}"),
    ("wait_p90_s", "wait between inferences p90 s", "{:.1f}"),
    ("subagents_per_session", "sub-agents / session", "{:.2f}"),
    ("reviewers_per_session", "reviewers / session", "{:.2f}"),
    ("compactions_per_session", "compactions / session", "{:.2f}"),
    ("compactions_in_turn_per_session", "  of them inside a turn", "{:.2f}"),
    ("carried_share", "prompt carried from last inference", "{:.1%}"),
)


def _pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(xs, q)) if len(xs) else 0.0


def workload_stats(trace: Trace) -> WorkloadStats:
    """The statistics of ``trace``, in one pass. Prompt sizes are logical, whatever the memory:
    the context's sequence at each ``infer``, from :class:`kvmodel.logical.Sequences` (the trace's
    meaning alone, no KV kept)."""
    seqs = Sequences(16)
    prompts: list[float] = []
    outputs = 0
    carried = 0
    last: dict[str, int] = {}  # context -> its previous inference's prompt + output
    sessions: set[str] = set()
    kinds: dict[AgentKind, int] = {}
    waits: list[float] = []
    untimed = frozenset(trace.header.meta.get("untimed_sessions", ()))
    ended: dict[str, float] = {}  # context -> end of its last inference, until its next op
    session_of: dict[str, str] = {}  # context -> its session (a fork's is its source's)
    in_turn: set[str] = set()  # contexts with an inference since their last turn_end
    compactions_in_turn = 0
    for op in trace.ops:
        ctx = getattr(op, "ctx", None)
        if ctx is not None and ctx in ended:
            waits.append(max(0.0, op.t - ended.pop(ctx)))
        if isinstance(op, Open):
            sessions.add(op.session)
            session_of[op.ctx] = op.session
            kinds[op.agent] = kinds.get(op.agent, 0) + 1
            if op.agent is AgentKind.COMPACTOR and op.parent in in_turn:
                compactions_in_turn += 1
        elif isinstance(op, Fork):
            session_of[op.ctx] = session_of[op.src]
        elif isinstance(op, TurnEnd):
            in_turn.discard(op.ctx)
        elif isinstance(op, Infer):
            in_turn.add(op.ctx)
            prompt = sum(m.tokens for m in seqs.messages(op.ctx))
            out = sum(m.tokens for m in op.output)
            prev = last.get(op.ctx)
            if prev is not None:
                carried += min(prev, prompt)
            last[op.ctx] = prompt + out
            prompts.append(float(prompt))
            outputs += out
            if session_of.get(op.ctx) not in untimed:
                ended[op.ctx] = op.t + op.duration
        seqs.apply(op)
    n = max(1, len(sessions))
    return WorkloadStats(
        sessions=len(sessions),
        inferences=len(prompts),
        inferences_per_session=len(prompts) / n,
        prompt_p10=_pct(prompts, 10),
        prompt_p50=_pct(prompts, 50),
        prompt_p90=_pct(prompts, 90),
        input_output_ratio=sum(prompts) / outputs if outputs else float("inf"),
        wait_p50_s=_pct(waits, 50) if waits else None,
        wait_p90_s=_pct(waits, 90) if waits else None,
        subagents_per_session=kinds.get(AgentKind.WORKER, 0) / n,
        reviewers_per_session=kinds.get(AgentKind.REVIEWER, 0) / n,
        compactions_per_session=kinds.get(AgentKind.COMPACTOR, 0) / n,
        compactions_in_turn_per_session=compactions_in_turn / n,
        carried_share=carried / sum(prompts) if prompts else 0.0,
    )


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


#: what :func:`fit_generator` matches, and the grids it searches (deterministic)
FIT_TARGETS = ("prompt_p10", "prompt_p50", "prompt_p90", "input_output_ratio",
               "inferences_per_session")  # fmt: skip
FIT_GRID: dict[str, tuple[float, ...]] = {
    # rounds first: it alone sets inferences per session, which the size knobs cannot mend
    "rounds": (2, 4, 8, 16, 32, 64),
    "observation_scale": (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
    "output_scale": (0.125, 0.25, 0.5, 1.0, 2.0),
    "system_tokens": (600, 1200, 2400, 6000, 12000, 26000, 50000),
    "turns": (1, 2, 3, 5, 8),
}
#: searched as well when the target compacts (otherwise compaction is switched off)
COMPACTION_GRID: tuple[int, ...] = (12_000, 25_000, 50_000, 100_000, 150_000, 200_000)
#: ``p_spawn``, searched as well when the target has sub-agents (otherwise spawning is off):
#: from one spawn in a long session's rounds up to the multi-agent preset's 0.6
SPAWN_GRID: tuple[float, ...] = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6)
#: added to both sides of the sub-agent ratio: a count per session of a few sessions is often
#: 0 on one side, and a floor of 1e-9 there would outweigh every other statistic
_COUNT_SMOOTHING = 0.5


#: the per-session counts :func:`fit_error` also scores where the target has any
FIT_COUNTS = ("subagents_per_session", "compactions_per_session")

#: what the fit's last stage matches where the target logged its times (:func:`wait_error`), and
#: the grid it searches: the main agent's tool-call time. No other statistic reads a time, and
#: these knobs draw nothing, so they move the waits alone and are searched last, jointly
WAIT_TARGETS = ("wait_p50_s", "wait_p90_s")
WAIT_GRID: dict[str, tuple[float, ...]] = {
    "tool_wait_median_s": (0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 12.0),
    "tool_wait_sigma": (0.4, 0.8, 1.2, 1.6, 2.0),
}


def fit_error(got: WorkloadStats, target: WorkloadStats) -> float:
    """Sum of squared log ratios over :data:`FIT_TARGETS`, and over each of
    :data:`FIT_COUNTS` (smoothed) that the target has."""
    err = 0.0
    for f in FIT_TARGETS:
        a, b = getattr(got, f), getattr(target, f)
        err += float(np.log(max(a, 1e-9) / max(b, 1e-9))) ** 2
    for f in FIT_COUNTS:
        a, b = getattr(got, f), getattr(target, f)
        if b:
            err += float(np.log((a + _COUNT_SMOOTHING) / (b + _COUNT_SMOOTHING))) ** 2
    return err


def wait_error(got: WorkloadStats, target: WorkloadStats) -> float:
    """Sum of squared log ratios over :data:`WAIT_TARGETS` the target has (0 if none)."""
    err = 0.0
    for f in WAIT_TARGETS:
        a, b = getattr(got, f), getattr(target, f)
        if b is None:
            continue
        if a is None:
            return float("inf")
        err += float(np.log(max(a, 1e-3) / max(b, 1e-3))) ** 2
    return err


def fit_generator(
    target: WorkloadStats, base: AgenticParams, *, sessions: int = 4, passes: int = 3
) -> tuple[AgenticParams, WorkloadStats]:
    """Generator parameters whose statistics come closest to ``target``'s (spec R8): the
    structure set from the target (no sub-agents, reviewers or compactions where it has none;
    compaction inside a turn where most of its compactions are),
    then the joint grid of ``rounds`` x ``observation_scale``, then coordinate descent over
    :data:`FIT_GRID` (and :data:`COMPACTION_GRID` when the target compacts, :data:`SPAWN_GRID`
    when it has sub-agents) -- each knob in
    turn set to its best grid value with the others fixed, up to ``passes`` times or until
    nothing moves -- scoring :func:`fit_error` on ``sessions`` generated sessions; last, where
    the target logged its times, the joint grid :data:`WAIT_GRID` scored by :func:`wait_error`.
    A local search: deterministic, not guaranteed to find the grid's best."""
    p = attrs.evolve(base, sessions=sessions)
    if not target.subagents_per_session:
        p = attrs.evolve(p, p_spawn=0.0, lead=False)
    if not target.reviewers_per_session:
        p = attrs.evolve(p, p_review=0.0)
    if not target.compactions_per_session:
        p = attrs.evolve(p, compact_at_tokens=10**9)
    elif 2 * target.compactions_in_turn_per_session >= target.compactions_per_session:
        # most of the trace's compactions fall inside a turn: a harness compacting at a size
        # limit, which its largest prompts show -- the search starts from the grid's threshold
        # nearest the target's prompt p90 (from a small one, every prompt is held under it and
        # the joint search below shrinks the prompts to match instead)
        limit = min(COMPACTION_GRID, key=lambda c: abs(np.log(c / max(target.prompt_p90, 1.0))))
        p = attrs.evolve(p, compact_in_turn=True, compact_at_tokens=limit)

    def score(q: AgenticParams) -> tuple[float, WorkloadStats]:
        st = workload_stats(generate_agentic(q))
        return fit_error(st, target), st

    # rounds and observation size trade off against each other (both grow prompts): search
    # them jointly first, then every knob in turn
    best, best_stats = score(p)
    start = p
    joint = FIT_GRID["rounds"] if passes else ()
    for r in joint:
        for o in FIT_GRID["observation_scale"]:
            q = attrs.evolve(start, rounds=int(r), observation_scale=float(o))
            if q == start:
                continue
            e, st = score(q)
            if e < best:
                best, best_stats, p = e, st, q
    grids = dict(FIT_GRID)
    if target.compactions_per_session:
        grids["compact_at_tokens"] = COMPACTION_GRID
    if target.subagents_per_session:
        grids["p_spawn"] = SPAWN_GRID
    for _ in range(passes):
        moved = False
        for knob, grid in grids.items():
            for v in grid:
                q = attrs.evolve(p, **{knob: type(getattr(p, knob))(v)})
                if q == p:
                    continue
                e, st = score(q)
                if e < best:
                    best, best_stats, p, moved = e, st, q, True
        if not moved:
            break
    if target.wait_p50_s is not None and passes:
        waited = wait_error(best_stats, target)
        start = p
        for m in WAIT_GRID["tool_wait_median_s"]:
            for sg in WAIT_GRID["tool_wait_sigma"]:
                q = attrs.evolve(start, tool_wait_median_s=m, tool_wait_sigma=sg)
                if q == start:
                    continue
                st = workload_stats(generate_agentic(q))
                e = wait_error(st, target)
                if e < waited:
                    waited, best_stats, p = e, st, q
    return attrs.evolve(p, sessions=base.sessions), best_stats
