"""Fitting the agentic generator to a trace's statistics (``kvmodel stats --fit``; spec
importers.md R8): what the fit scores, the grids it searches, the search itself, and what it
says it could not reach. The statistics are :mod:`kvmodel.workloads.stats`'s, one definition for
real and generated traces."""

from __future__ import annotations

import attrs
import numpy as np

from kvmodel.workloads.agentic import AgenticParams, generate_agentic
from kvmodel.workloads.stats import ROWS, WorkloadStats, workload_stats

__all__ = [
    "ARRIVAL_GRID",
    "ARRIVAL_TARGETS",
    "COMPACTION_GRID",
    "FIT_COUNTS",
    "FIT_GRID",
    "FIT_REUSE",
    "FIT_SHARES",
    "FIT_TARGETS",
    "SPAWN_GRID",
    "WAIT_GRID",
    "WAIT_TARGETS",
    "arrival_error",
    "fit_error",
    "fit_generator",
    "session_gap_for",
    "unreached",
    "wait_error",
]


#: what :func:`fit_generator` matches, and the grids it searches (deterministic)
FIT_TARGETS = ("prompt_p10", "prompt_p50", "prompt_p90", "input_output_ratio",
               "inferences_per_session", "session_inferences_spread")  # fmt: skip
FIT_GRID: dict[str, tuple[float, ...]] = {
    # rounds first: it alone sets inferences per session, which the size knobs cannot mend
    "rounds": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
    "observation_scale": (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
    "observation_sigma": (0.4, 0.8, 1.2, 1.6, 2.0),
    "output_scale": (0.125, 0.25, 0.5, 1.0, 2.0),
    "system_tokens": (150, 300, 600, 1200, 2400, 6000, 12000, 26000, 50000),
    "task_tokens": (0, 250, 500, 1000, 2000, 4000, 8000),
    "user_tokens": (0, 25, 50, 100, 200),
    "tool_call_sigma": (0.0, 0.5, 1.0, 1.5),
    "turns": (1, 2, 3, 5, 8, 12),
    # the reasoning the turn-end strips kill: real logs of some families carry almost none
    "reasoning_scale": (0.01, 0.03, 0.1, 0.3, 1.0, 2.0),
    "rounds_sigma": (0.0, 0.25, 0.5, 0.75, 1.0),
    "p_direct": (0.0, 0.25, 0.5, 0.75),
    "turns_sigma": (0.0, 0.25, 0.5, 0.75, 1.0),
    "tool_call_scale": (0.5, 1.0, 2.0, 3.0, 4.0, 8.0),
}
#: the knobs of the user's turns after the first, searched only where the target waits on its
#: user (spec R8, the fit's third revision)
_USER_TURN_KNOBS = ("p_direct", "turns_sigma", "user_tokens")
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
#: the shares :func:`fit_error` scores too (each side plus :data:`_SHARE_SMOOTHING`, so that a
#: real share of 0.8% is told from 23% and 0 is reachable): the structure that decides how a
#: lifecycle policy ranks -- the KV a turn-end strip kills, the prompt an inference adds to
#: what its context's last inference held, the waits that are on the user, the reads of KV
#: another session holds too (a shared prefix is always hot) -- where the target has the
#: statistic at all
FIT_SHARES = ("reasoning_share", "new_share", "wait_user_share", "shared_read_share")
_SHARE_SMOOTHING = 0.005
#: the reuse distance within a session (p50, p90), where the target reads anything again: how
#: much KV each step adds between two reads of a prompt, the session's shape alone -- what a
#: recency cache must hold, and so what gives an offline optimum room over it (spec
#: metrics.md E9: a preset with half the real distance left Belady a fraction of the real
#: sessions' headroom). The distance across sessions adds what the others write, which the
#: arrivals decide (the arrival stage, on the preset's own tenancy)
FIT_REUSE = ("reuse_own_p50_ktok", "reuse_own_p90_ktok")
#: what the fit's last stage matches where the target logged its times (:func:`wait_error`), and
#: the grid it searches: the main agent's tool-call time. No other statistic reads a time, and
#: these knobs draw nothing, so they move the waits alone and are searched last, jointly
WAIT_TARGETS = ("wait_p50_s", "wait_p90_s", "wait_p99_s")
WAIT_GRID: dict[str, tuple[float, ...]] = {
    "tool_wait_median_s": (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 8.0, 12.0),
    "tool_wait_sigma": (0.4, 0.6, 0.8, 1.0, 1.2, 1.6, 2.0),
}


#: what the fit's arrival stage matches where the target logged its times (:func:`arrival_error`)
#: -- the mean number of sessions at once, its time-weighted p90 and its peak -- and the batch
#: sizes it tries (:func:`_fit_arrivals`)
ARRIVAL_TARGETS = ("concurrency", "concurrency_p90", "concurrency_peak")
ARRIVAL_GRID: tuple[int, ...] = (1, 2, 3, 4, 6, 8)


def _share(st: WorkloadStats, f: str) -> float | None:
    return 1.0 - st.carried_share if f == "new_share" else getattr(st, f)


def fit_error(got: WorkloadStats, target: WorkloadStats) -> float:
    """Sum of squared log ratios over :data:`FIT_TARGETS`, over each of :data:`FIT_COUNTS`
    (smoothed) that the target has, over each of :data:`FIT_SHARES` (smoothed) and of
    :data:`FIT_REUSE` the target has a value for."""
    err = 0.0
    for f in FIT_SHARES:
        a, b = _share(got, f), _share(target, f)
        if b is None:
            continue
        a = 0.0 if a is None else a
        err += float(np.log((a + _SHARE_SMOOTHING) / (b + _SHARE_SMOOTHING))) ** 2
    for f in FIT_TARGETS:
        a, b = getattr(got, f), getattr(target, f)
        err += float(np.log(max(a, 1e-9) / max(b, 1e-9))) ** 2
    for f in FIT_REUSE:
        a, b = getattr(got, f), getattr(target, f)
        if b is not None:
            err += float(np.log(max(a or 0.0, 1e-3) / max(b, 1e-3))) ** 2
    for f in FIT_COUNTS:
        a, b = getattr(got, f), getattr(target, f)
        if b:
            err += float(np.log((a + _COUNT_SMOOTHING) / (b + _COUNT_SMOOTHING))) ** 2
    return err


#: the fields :func:`unreached` reads as shares (compared with :data:`_SHARE_SMOOTHING` added)
_SHARES = {f for f, _, fmt in ROWS if fmt.endswith("%}")}
#: fields that say how much of a trace there is, not what shape it has
_SIZE_ONLY = {"sessions", "written_tokens"}


def unreached(
    got: WorkloadStats, target: WorkloadStats, factor: float = 2.0
) -> list[tuple[str, float | None, float | None]]:
    """The statistics of :data:`ROWS` (sizes aside) where a fit is more than ``factor`` from
    its target: ``(field, target's, fit's)``. A share is compared with 0.5 pp added to both
    sides (0.8% against 1.2% is a match, 0% against 23% is not); a statistic the target has
    and the fit does not is unreached, one the target lacks (an untimed trace's waits) is not."""
    out: list[tuple[str, float | None, float | None]] = []
    for f, _, _ in ROWS:
        if f in _SIZE_ONLY:
            continue
        a, b = getattr(got, f), getattr(target, f)
        if b is None:  # (nothing to reach: an untimed trace has no waits)
            continue
        if a is None:
            out.append((f, b, a))
            continue
        eps = _SHARE_SMOOTHING if f in _SHARES else 1e-9
        if f.endswith("per_session"):
            eps = _COUNT_SMOOTHING
        r = (a + eps) / (b + eps)
        if not 1 / factor <= r <= factor:
            out.append((f, b, a))
    return out


def _log_error(got: WorkloadStats, target: WorkloadStats, fields: tuple[str, ...]) -> float:
    """Sum of squared log ratios over the ``fields`` the target has (0 if none; infinite where
    the target has one the fit lacks)."""
    err = 0.0
    for f in fields:
        a, b = getattr(got, f), getattr(target, f)
        if b is None:
            continue
        if a is None:
            return float("inf")
        err += float(np.log(max(a, 1e-3) / max(b, 1e-3))) ** 2
    return err


def wait_error(got: WorkloadStats, target: WorkloadStats) -> float:
    """Sum of squared log ratios over :data:`WAIT_TARGETS` the target has (0 if none)."""
    return _log_error(got, target, WAIT_TARGETS)


def session_gap_for(concurrency: float, session_s: float, sessions: int) -> float:
    """The mean gap between session starts at which ``sessions`` sessions of mean length
    ``session_s`` run ``concurrency`` at once on average, over the span from the first start to
    the last end: ``n W / ((n - 1) gap + W) = L`` solved for the gap (the expected span of
    Poisson arrivals), at least a second, two significant digits."""
    if sessions < 2 or concurrency <= 0:
        return 30.0
    gap = session_s * (sessions / concurrency - 1) / (sessions - 1)
    return float(f"{max(1.0, gap):.2g}")


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
    # what a real harness of the family never does, the generator does not do either: a fork,
    # a pin, a temporary message the log never shows would each change the ranking on its own
    if not target.forks_per_session:
        p = attrs.evolve(p, p_fork=0.0)
    if not target.pins_per_session:
        p = attrs.evolve(p, pin_system=False)
    if not target.dead_temporary_share:
        p = attrs.evolve(p, p_temporary=0.0)
    if not target.reasoning_share:
        p = attrs.evolve(p, reasoning_scale=0.0)
    if not target.timed_inference_share:
        p = attrs.evolve(p, timed_inferences=False)
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

    best, best_stats = score(p)

    def joint(a: str, b: str) -> bool:
        """Every pair of ``a`` x ``b`` from the current parameters; whether the best moved.
        An error of 0 is the target's very statistics: no candidate can score strictly less,
        so the search stops there (the same result, without scoring the rest of the grid)."""
        nonlocal best, best_stats, p
        start, moved = p, False
        for x in FIT_GRID[a]:
            for y in FIT_GRID[b]:
                knobs = {a: type(getattr(start, a))(x), b: type(getattr(start, b))(y)}
                q = attrs.evolve(start, **knobs)
                if q == start or best == 0.0:
                    continue
                e, st = score(q)
                if e < best:
                    best, best_stats, p, moved = e, st, q, True
        return moved

    # pairs of knobs that trade off against each other, searched jointly at the start of
    # every pass, then every knob in turn: rounds and observation size (both grow prompts);
    # the observations' size and tail (the median and the spread of a step's new KV: the
    # reuse distance's p50 and p90);
    # where the target waits on its user, turns and rounds (a user's message ends each turn
    # but the last: one knob at a time, more turns add inferences the rounds must give back,
    # so neither moves alone), and turns and the share of them answered without a tool
    pairs = [("rounds", "observation_scale"), ("observation_scale", "observation_sigma")]
    if target.wait_user_share:
        pairs += [("turns", "rounds"), ("turns", "p_direct")]
    grids = dict(FIT_GRID)
    if not p.reasoning_scale:
        del grids["reasoning_scale"]
    if not target.wait_user_share:
        # no user's message after the task: the knobs of later user turns have nothing to fit
        for knob in _USER_TURN_KNOBS:
            del grids[knob]
    if target.compactions_per_session:
        grids["compact_at_tokens"] = COMPACTION_GRID
    if target.subagents_per_session:
        grids["p_spawn"] = SPAWN_GRID
    for _ in range(passes):
        if not best:
            break
        # (every pair is searched, each from where the last left off)
        moved = [joint(a, b) for a, b in pairs].count(True) > 0
        for knob, grid in grids.items():
            for v in grid:
                q = attrs.evolve(p, **{knob: type(getattr(p, knob))(v)})
                if q == p or best == 0.0:
                    continue
                e, st = score(q)
                if e < best:
                    best, best_stats, p, moved = e, st, q, True
        if not moved:
            break
    p = attrs.evolve(p, sessions=base.sessions)
    if target.wait_p50_s is not None and passes:
        # on the preset's own tenancy: its tail (p99) needs more waits than four sessions have
        start = p
        best_stats = workload_stats(generate_agentic(p))
        waited = wait_error(best_stats, target)
        for m in WAIT_GRID["tool_wait_median_s"]:
            for sg in WAIT_GRID["tool_wait_sigma"]:
                q = attrs.evolve(start, tool_wait_median_s=m, tool_wait_sigma=sg)
                if q == start or waited == 0.0:
                    continue
                st = workload_stats(generate_agentic(q))
                e = wait_error(st, target)
                if e < waited:
                    waited, best_stats, p = e, st, q
    if target.concurrency is None or not passes:
        return p, best_stats
    # the arrivals, on the preset's own tenancy (how sessions overlap depends on how many
    # there are): the mean gap at which its sessions, at their length on that tenancy, run
    # the target's mean number at once; then the batch size whose peaks come closest to the
    # target's (runs launched by a pool of workers arrive together: spec/metrics.md E9)
    full = workload_stats(generate_agentic(p))
    if full.session_mean_s is None:
        return p, full
    p = attrs.evolve(
        p, session_gap_s=session_gap_for(target.concurrency, full.session_mean_s, p.sessions)
    )
    return _fit_arrivals(p, target)


def arrival_error(got: WorkloadStats, target: WorkloadStats) -> float:
    """Sum of squared log ratios over :data:`ARRIVAL_TARGETS` the target has."""
    return _log_error(got, target, ARRIVAL_TARGETS)


def _fit_arrivals(p: AgenticParams, target: WorkloadStats) -> tuple[AgenticParams, WorkloadStats]:
    """``p`` with the :data:`ARRIVAL_GRID` batch size of least :func:`arrival_error`, and its
    statistics (the smallest batch of the least error: the grid in order, strictly less to
    move). A batch draws nothing: the sessions are the same, only their starts move."""
    best_p, best_st, best = p, workload_stats(generate_agentic(p)), float("inf")
    for b in ARRIVAL_GRID:
        q = attrs.evolve(p, arrival_batch=b)
        st = workload_stats(generate_agentic(q))
        e = arrival_error(st, target)
        if e < best:
            best_p, best_st, best = q, st, e
    return best_p, best_st
