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
    "COMPACTION_GRID",
    "FIT_COUNTS",
    "FIT_GRID",
    "FIT_SHARES",
    "FIT_TARGETS",
    "SPAWN_GRID",
    "WAIT_GRID",
    "WAIT_TARGETS",
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
    "rounds": (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
    "observation_scale": (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
    "output_scale": (0.125, 0.25, 0.5, 1.0, 2.0),
    "system_tokens": (600, 1200, 2400, 6000, 12000, 26000, 50000),
    "turns": (1, 2, 3, 5, 8),
    # the reasoning the turn-end strips kill: real logs of some families carry almost none
    "reasoning_scale": (0.01, 0.03, 0.1, 0.3, 1.0, 2.0),
    "rounds_sigma": (0.0, 0.25, 0.5, 0.75, 1.0),
    "tool_call_scale": (0.5, 1.0, 2.0, 3.0, 4.0, 8.0),
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
#: the shares :func:`fit_error` scores too (each side plus :data:`_SHARE_SMOOTHING`, so that a
#: real share of 0.8% is told from 23% and 0 is reachable): the structure that decides how a
#: lifecycle policy ranks -- the KV a turn-end strip kills, the prompt an inference adds to
#: what its context's last inference held, the waits that are on the user -- where the target
#: has the statistic at all (an untimed trace has no waits)
FIT_SHARES = ("reasoning_share", "new_share", "wait_user_share")
_SHARE_SMOOTHING = 0.005
#: what the fit's last stage matches where the target logged its times (:func:`wait_error`), and
#: the grid it searches: the main agent's tool-call time. No other statistic reads a time, and
#: these knobs draw nothing, so they move the waits alone and are searched last, jointly
WAIT_TARGETS = ("wait_p50_s", "wait_p90_s")
WAIT_GRID: dict[str, tuple[float, ...]] = {
    "tool_wait_median_s": (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 8.0, 12.0),
    "tool_wait_sigma": (0.4, 0.6, 0.8, 1.0, 1.2, 1.6, 2.0),
}


def _share(st: WorkloadStats, f: str) -> float | None:
    return 1.0 - st.carried_share if f == "new_share" else getattr(st, f)


def fit_error(got: WorkloadStats, target: WorkloadStats) -> float:
    """Sum of squared log ratios over :data:`FIT_TARGETS`, over each of :data:`FIT_COUNTS`
    (smoothed) that the target has, and over each of :data:`FIT_SHARES` (smoothed) the target
    has a value for."""
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

    # rounds and observation size trade off against each other (both grow prompts): search
    # them jointly first, then every knob in turn
    best, best_stats = score(p)
    start = p
    joint = FIT_GRID["rounds"] if passes else ()
    # an error of 0 is the target's very statistics: no candidate can score strictly less, so
    # the search stops there (the same result, without scoring the rest of the grid)
    for r in joint:
        for o in FIT_GRID["observation_scale"]:
            q = attrs.evolve(start, rounds=int(r), observation_scale=float(o))
            if q == start or best == 0.0:
                continue
            e, st = score(q)
            if e < best:
                best, best_stats, p = e, st, q
    grids = dict(FIT_GRID)
    if not p.reasoning_scale:
        del grids["reasoning_scale"]
    if target.compactions_per_session:
        grids["compact_at_tokens"] = COMPACTION_GRID
    if target.subagents_per_session:
        grids["p_spawn"] = SPAWN_GRID
    for _ in range(passes if best else 0):
        moved = False
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
    if target.wait_p50_s is not None and passes:
        waited = wait_error(best_stats, target)
        start = p
        for m in WAIT_GRID["tool_wait_median_s"]:
            for sg in WAIT_GRID["tool_wait_sigma"]:
                q = attrs.evolve(start, tool_wait_median_s=m, tool_wait_sigma=sg)
                if q == start or waited == 0.0:
                    continue
                st = workload_stats(generate_agentic(q))
                e = wait_error(st, target)
                if e < waited:
                    waited, best_stats, p = e, st, q
    p = attrs.evolve(p, sessions=base.sessions)
    if target.concurrency is not None and best_stats.session_mean_s is not None and passes:
        p = attrs.evolve(
            p,
            session_gap_s=session_gap_for(
                target.concurrency, best_stats.session_mean_s, p.sessions
            ),
        )
    return p, best_stats
