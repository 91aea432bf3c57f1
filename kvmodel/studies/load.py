"""The load model (spec E6): the session arrival rate a node sustains at a TTFT target, and the
settled window in which its figures are read.

The node is a hardware preset (:func:`kvmodel.studies.presets.hardware_config`) that prefills at
``Timing.prefill_tok_per_s`` on one server. Its requests queue for prefill first come, first
served; with Poisson session arrivals the mean wait is the Pollaczek-Khinchine formula of an
M/G/1 queue, ``W = λ E[S²] / (2 (1 - λ E[S]))``, over the request service times ``S`` (recomputed
tokens / prefill rate; a rejected request its whole prompt, spec E3). The **sustainable load**
is the largest session rate whose mean TTFT (own prefill + wait + overhead) meets the target.

A study at ``scale`` simulates a ``scale`` slice of that node: every capacity times ``scale``
(the preset) *and* the session rate times ``scale``. Memory demanded per byte of memory, and
bytes written per byte of flash per second, are then those of the whole node, so device-years
tend to absolute figures as the slice grows -- measured, not yet at 0.05 or 0.1 (spec E6).

The service times depend on the cache (a miss is a prefill), and the cache on the load (more
concurrent sessions, more pressure): the rate is the fixed point, found by bisection on the
log of the session gap over replays of a baseline policy, every candidate gap giving the same
sessions (the generator draws gaps as scaled standard exponentials) shifted in time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np

from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError
from kvmodel.io.observations import InferObs, RejectObs
from kvmodel.io.trace import EndSession, Open, Trace
from kvmodel.replay import ReplayResult, replay
from kvmodel.studies.metrics import Timing
from kvmodel.workloads.agentic import AgenticParams, generate_agentic

__all__ = [
    "Load",
    "concurrency",
    "find_load",
    "service_times",
    "settled_window",
    "sustainable_rate",
]

#: bisection steps on log(gap): the bracket [gap/64, 64 gap] narrows to a factor 2^(12/2^10)
_STEPS = 10


@attrs.frozen
class Load:
    """The load a comparison ran at, and how it was found (printed by ``kvmodel compare``)."""

    slo_ttft_s: float
    baseline: str
    #: session arrivals per second of the whole node, and of the simulated ``scale`` slice
    sessions_per_s: float
    scale: float
    session_gap_s: float
    requests_per_session: float
    mean_prefill_s: float
    utilisation: float
    predicted_ttft_s: float
    #: the settled window of the generated trace (None: too few sessions for one)
    window: tuple[float, float] | None
    #: mean open sessions in the window (the slice's; the node's is this / scale)
    concurrency: float

    def render(self) -> str:
        w = self.window
        where = (
            f"settled window {w[0]:.0f}-{w[1]:.0f} s, {self.concurrency:.1f} sessions open on "
            f"the {self.scale:g} slice ({self.concurrency / self.scale:.0f} on the node)"
            if w
            else "no settled window (too few sessions: raise --sessions)"
        )
        return (
            f"load (spec E6): {self.sessions_per_s * 3600:.0f} sessions/h on the node, the most "
            f"whose mean TTFT meets {self.slo_ttft_s:g} s under {self.baseline} (M/G/1 prefill "
            f"queue: utilisation {self.utilisation:.0%}, {self.requests_per_session:.1f} "
            f"requests per session, mean prefill {self.mean_prefill_s * 1000:.0f} ms, predicted "
            f"TTFT {self.predicted_ttft_s:.2f} s); simulated slice: one session every "
            f"{self.session_gap_s:.0f} s; {where}"
        )


def service_times(result: ReplayResult, prefill_tok_per_s: float) -> list[float]:
    """Each inference's prefill time: recomputed tokens, or a rejected one's whole prompt."""
    rejected = {o.op for o in result.engine.log if isinstance(o, RejectObs)}
    return [
        (o.prompt_tokens if o.op in rejected else o.miss_tokens) / prefill_tok_per_s
        for o in result.engine.log
        if isinstance(o, InferObs)
    ]


def sustainable_rate(
    services: Sequence[float], requests_per_session: float, slo_ttft_s: float, overhead_s: float
) -> float:
    """Sessions per second whose M/G/1 mean TTFT is ``slo_ttft_s`` (Pollaczek-Khinchine solved
    for the rate): with ``w`` the wait the target leaves, ``λ = 2w / (E[S²] + 2w E[S])``."""
    if not services or requests_per_session <= 0:
        raise ConfigError("the load model needs at least one inference in the workload")
    s = np.asarray(services, dtype=float)
    es, es2 = float(s.mean()), float((s * s).mean())
    wait = slo_ttft_s - overhead_s - es
    if wait <= 0:
        raise ConfigError(
            f"TTFT target {slo_ttft_s:g} s is below a request's own prefill and overhead "
            f"({es + overhead_s:.3f} s on average): no load meets it"
        )
    if es2 == 0:
        return math.inf
    return 2 * wait / (es2 + 2 * wait * es) / requests_per_session


def _session_times(trace: Trace) -> tuple[dict[str, float], dict[str, float]]:
    """Each session's first ``open`` and its ``end_session``."""
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    for op in trace.ops:
        if isinstance(op, Open):
            start.setdefault(op.session, op.t)
        elif isinstance(op, EndSession):
            end[op.session] = op.t
    return start, end


def settled_window(trace: Trace) -> tuple[float, float] | None:
    """From the time 90% of sessions would have ended had they all started with the first, to
    the last session's start: arrivals and departures both run, so the number of open sessions
    has stopped climbing and not yet begun to drain (spec E6). None when that is empty."""
    start, end = _session_times(trace)
    durations = [end[s] - start[s] for s in start if s in end]
    if not durations:
        return None
    t0 = min(start.values()) + float(np.percentile(durations, 90))
    t1 = max(start.values())
    return (t0, t1) if t1 > t0 else None


def concurrency(trace: Trace, window: tuple[float, float]) -> float:
    """Mean number of open sessions over ``window`` (time-weighted)."""
    start, end = _session_times(trace)
    a, b = window
    last = max((o.t for o in trace.ops), default=b)
    inside = sum(max(0.0, min(end.get(s, last), b) - max(t, a)) for s, t in start.items())
    return inside / (b - a)


def find_load(
    params: AgenticParams,
    config: EngineConfig,
    *,
    slo_ttft_s: float,
    scale: float,
    baseline: str = "hbm-first",
    timing: Timing | None = None,
) -> tuple[Load, Trace]:
    """The sustainable load of the node ``config`` is a ``scale`` slice of, and the trace of
    ``params``'s sessions arriving at it. Deterministic: ten bisection steps, each a replay."""
    tm = timing or Timing()
    if tm.prefill_servers != 1:
        raise ConfigError("the load model queues for one prefill server (M/G/1)")
    if params.sessions < 2:
        raise ConfigError("the load model needs at least two sessions")
    prefill_tok_per_s, overhead_s = tm.prefill_tok_per_s, tm.ttft_overhead_s

    def implied_gap(gap: float) -> tuple[float, Trace, list[float]]:
        tr = generate_agentic(attrs.evolve(params, session_gap_s=gap))
        services = service_times(replay(tr, baseline, config), prefill_tok_per_s)
        rate = sustainable_rate(services, len(services) / params.sessions, slo_ttft_s, overhead_s)
        return 1 / (rate * scale), tr, services

    lo, hi = math.log(params.session_gap_s / 64), math.log(params.session_gap_s * 64)
    for _ in range(_STEPS):  # f(gap) = implied(gap) - gap decreases in gap
        mid = (lo + hi) / 2
        need, _, _ = implied_gap(math.exp(mid))
        if need > math.exp(mid):
            lo = mid  # arrivals too dense for the target: widen the gap
        else:
            hi = mid
    gap = math.exp(hi)  # the feasible end of the bracket
    need, trace, services = implied_gap(gap)
    if need > gap * (1 + 1e-9):
        raise ConfigError(
            f"no session rate meets a mean TTFT of {slo_ttft_s:g} s under {baseline}: even one "
            f"session every {gap:.0f} s on the slice is too many"
        )
    s = np.asarray(services)
    per_session = len(services) / params.sessions
    rate = 1 / (gap * scale)
    lam = rate * per_session
    es, es2 = float(s.mean()), float((s * s).mean())
    rho = lam * es
    wait = lam * es2 / (2 * (1 - rho)) if rho < 1 else math.inf
    window = settled_window(trace)
    load = Load(
        slo_ttft_s=slo_ttft_s,
        baseline=baseline,
        sessions_per_s=rate,
        scale=scale,
        session_gap_s=gap,
        requests_per_session=per_session,
        mean_prefill_s=es,
        utilisation=rho,
        predicted_ttft_s=overhead_s + es + wait,
        window=window,
        concurrency=concurrency(trace, window) if window else 0.0,
    )
    return load, trace
