"""The load model (spec E6): the session arrival rate a node sustains at a TTFT target, and the
settled window in which its figures are read.

The node is a hardware preset (:func:`kvmodel.studies.presets.hardware_config`) that prefills at
``Timing.prefill_tok_per_s`` on each of ``Timing.prefill_servers`` servers (one: prefill shares
the node; more: a disaggregated prefill pool). Its requests queue for prefill first come, first
served; with Poisson session arrivals the mean wait over the request service times ``S``
(recomputed tokens / prefill rate; a rejected request its whole prompt, spec E3) is the
Pollaczek-Khinchine formula of an M/G/1 queue, ``W = λ E[S²] / (2 (1 - λ E[S]))``, on one server,
and on ``c`` the M/M/c wait (Erlang C) times ``E[S²] / (2 E[S]²)`` (:func:`mean_wait`). The
**sustainable load** is the largest session rate whose mean TTFT (own prefill + wait + overhead)
meets the target.

A study at ``scale`` simulates a ``scale`` slice of that node: every capacity times ``scale``
(the preset) *and* the session rate times ``scale``. Memory demanded per byte of memory, and
bytes written per byte of flash per second, are then those of the whole node, so device-years
tend to absolute figures as the slice grows -- measured, settled by 0.1, not at 0.05 (spec E6).

The service times depend on the cache (a miss is a prefill), and the cache on the load (more
concurrent sessions, more pressure): the rate is the fixed point, found by bisection on the
log of the session gap over replays of a baseline policy, every candidate gap giving the same
sessions (the generator draws gaps as scaled standard exponentials) shifted in time.

With a TPOT target (spec E7) a candidate must also meet it at the 99th percentile: a decode step
reads the GPU's share of the weights and its batch's KV (:class:`DecodeNode`), so the load is
also bounded by how much context decodes at once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import attrs
import numpy as np

from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError
from kvmodel.io.observations import InferObs, RejectObs
from kvmodel.io.trace import EndSession, Infer, Open, Trace
from kvmodel.logical import Sequences
from kvmodel.replay import ReplayResult, replay
from kvmodel.studies.metrics import Timing
from kvmodel.workloads.agentic import AgenticParams, generate_agentic

__all__ = [
    "DecodeNode",
    "Load",
    "concurrency",
    "decode_batch",
    "find_load",
    "mean_wait",
    "service_times",
    "settled_window",
    "sustainable_rate",
    "tpot_p99",
]

#: bisection steps on log(gap): the bracket [gap/64, 64 gap] narrows to a factor 2^(12/2^10)
_STEPS = 10


@attrs.frozen
class DecodeNode:
    """One GPU's decode step (spec E7): it reads ``weight_bytes`` and the KV of every sequence
    in the batch at ``read_bytes_per_s`` (one bandwidth for both tiers)."""

    weight_bytes: float
    kv_bytes_per_token: int
    read_bytes_per_s: float

    def tpot(self, kv_tokens: float) -> float:
        """Seconds per step with ``kv_tokens`` of context decoding on the GPU."""
        return (self.weight_bytes + kv_tokens * self.kv_bytes_per_token) / self.read_bytes_per_s


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
    #: the p99 TPOT target (None: TTFT alone), the p99 at the load found (None without a
    #: target), and the target the last infeasible candidate failed ("" if none failed)
    slo_tpot_s: float | None = None
    tpot_p99_s: float | None = None
    binding: str = ""
    #: prefill servers the requests queue for (1: M/G/1; more: M/G/c, a disaggregated pool)
    prefill_servers: int = 1

    def render(self) -> str:
        w = self.window
        where = (
            f"settled window {w[0]:.0f}-{w[1]:.0f} s, {self.concurrency:.1f} sessions open on "
            f"the {self.scale:g} slice ({self.concurrency / self.scale:.0f} on the node)"
            if w
            else "no settled window (too few sessions: raise --sessions)"
        )
        targets = f"mean TTFT meets {self.slo_ttft_s:g} s"
        if self.slo_tpot_s is not None and self.tpot_p99_s is not None:
            targets += (
                f" and p99 TPOT {self.slo_tpot_s * 1000:g} ms (E7: {self.tpot_p99_s * 1000:.1f} "
                "ms at this load)"
            )
        bound = f"; {self.binding} binds" if self.binding else ""
        return (
            f"load (spec E6): {self.sessions_per_s * 3600:.0f} sessions/h on the node, the most "
            f"whose {targets}{bound} under {self.baseline} (M/G/{self.prefill_servers} prefill "
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


def mean_wait(es: float, es2: float, lam: float, servers: int = 1) -> float:
    """Mean wait for a prefill server at request rate ``lam``, service moments ``E[S]``, ``E[S²]``
    (infinite at or past saturation). One server: Pollaczek-Khinchine, exact for M/G/1. ``c``
    servers: the M/M/c wait (Erlang C, by the Erlang B recursion) scaled by ``(1 + C_s²) / 2 =
    E[S²] / (2 E[S]²)`` (the Lee-Longton approximation: exact for exponential services and for
    one server, where it is Pollaczek-Khinchine)."""
    if es <= 0:
        return 0.0
    a = lam * es  # offered load, in servers
    rho = a / servers
    if rho >= 1:
        return math.inf
    b = 1.0  # Erlang B with 0 servers
    for k in range(1, servers + 1):
        b = a * b / (k + a * b)
    erlang_c = b / (1 - rho * (1 - b))
    return erlang_c * es / (servers * (1 - rho)) * es2 / (2 * es * es)


def sustainable_rate(
    services: Sequence[float],
    requests_per_session: float,
    slo_ttft_s: float,
    overhead_s: float,
    servers: int = 1,
) -> float:
    """Sessions per second whose mean TTFT is ``slo_ttft_s`` on ``servers`` prefill servers.
    One server: Pollaczek-Khinchine solved for the rate (with ``w`` the wait the target leaves,
    ``λ = 2w / (E[S²] + 2w E[S])``); more: :func:`mean_wait` (increasing in the rate) inverted
    by bisection below saturation, to a relative 1e-12."""
    if not services or requests_per_session <= 0:
        raise ConfigError("the load model needs at least one inference in the workload")
    if servers < 1:
        raise ConfigError(f"prefill servers must be at least 1 (got {servers})")
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
    if servers == 1:
        return 2 * wait / (es2 + 2 * wait * es) / requests_per_session
    lo, hi = 0.0, servers / es  # the wait is 0 at no load and infinite at saturation
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if mean_wait(es, es2, mid, servers) > wait:
            hi = mid
        else:
            lo = mid
    return lo / requests_per_session


def decode_batch(trace: Trace, tpot_s: float) -> list[tuple[float, float, float]]:
    """Each inference's decode as ``(start, end, context tokens)``: the last ``output tokens x
    tpot_s`` seconds of its ``duration`` (clipped at its start), its prompt plus half its output
    (spec E7). From the trace's logical sequences: no cache is involved."""
    seqs = Sequences(16)
    out: list[tuple[float, float, float]] = []
    for op in trace.ops:
        if isinstance(op, Infer):
            prompt = sum(m.tokens for m in seqs.messages(op.ctx))
            output = sum(m.tokens for m in op.output)
            end = op.t + op.duration
            start = max(op.t, end - output * tpot_s)
            if output and end > start:
                out.append((start, end, prompt + output / 2))
        seqs.apply(op)
    return out


def tpot_p99(
    batch: Sequence[tuple[float, float, float]],
    node: DecodeNode,
    *,
    scale: float = 1.0,
    window: tuple[float, float] | None = None,
    seed: int = 0,
) -> float | None:
    """The 99th percentile over output tokens of the node's TPOT (spec E7), or None when
    nothing decodes. The node is ``round(1 / scale)`` slices like the simulated one, arriving
    independently: the slice's decodes within ``window`` (default: the run), cyclically shifted
    in it by seeded offsets (the first by none) and summed, the KV times ``1 / (scale x
    copies)`` so its mean is the slice's over ``scale``. Between two decode events the ``n``
    sequences decode ``n x length / TPOT`` tokens at the TPOT of the KV decoding then."""
    if not batch:
        return None
    a, b = window if window is not None else (min(x[0] for x in batch), max(x[1] for x in batch))
    span = b - a
    if span <= 0:
        return None
    copies = max(1, round(1 / scale))
    weight = 1 / (scale * copies)
    offsets = [0.0, *np.random.default_rng(seed).uniform(0.0, span, copies - 1).tolist()]
    events: list[tuple[float, int, float]] = []
    for lo, hi, kv in batch:
        lo, hi = max(lo, a), min(hi, b)
        if hi <= lo:
            continue
        for off in offsets:
            s0 = a + (lo - a + off) % span
            s1 = s0 + hi - lo
            pieces = [(s0, s1)] if s1 <= b else [(s0, b), (a, s1 - span)]  # wraps round
            for x, y in pieces:
                if y > x:
                    events += [(x, 1, kv * weight), (y, -1, -kv * weight)]
    events.sort()
    tpots: list[float] = []
    weights: list[float] = []
    n, kv_now = 0, 0.0
    for (t, dn, dkv), nxt in itertools.pairwise(events):
        n, kv_now = n + dn, kv_now + dkv
        if n > 0 and nxt[0] > t:
            tpot = node.tpot(max(kv_now, 0.0))
            tpots.append(tpot)
            weights.append(n * weight * (nxt[0] - t) / tpot)
    if not tpots:
        return None
    order = np.argsort(tpots, kind="stable")
    cum = np.cumsum(np.asarray(weights)[order])
    at = int(np.searchsorted(cum, 0.99 * cum[-1]))
    return float(np.asarray(tpots)[order][min(at, len(order) - 1)])


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
    slo_tpot_s: float | None = None,
    decode: DecodeNode | None = None,
) -> tuple[Load, Trace]:
    """The sustainable load of the node ``config`` is a ``scale`` slice of, and the trace of
    ``params``'s sessions arriving at it. Deterministic: ten bisection steps, each a replay.
    ``slo_tpot_s``: also meet this p99 TPOT on ``decode`` (spec E7)."""
    tm = timing or Timing()
    if (slo_tpot_s is None) != (decode is None):
        raise ConfigError("a TPOT target needs the decode node it is met on, and only then")
    if slo_tpot_s is not None and decode is not None and decode.tpot(0.0) >= slo_tpot_s:
        raise ConfigError(
            f"TPOT target {slo_tpot_s * 1000:g} ms is below one decode step's weight read "
            f"({decode.tpot(0.0) * 1000:.1f} ms): no load meets it"
        )
    servers = tm.prefill_servers
    if params.sessions < 2:
        raise ConfigError("the load model needs at least two sessions")
    prefill_tok_per_s, overhead_s = tm.prefill_tok_per_s, tm.ttft_overhead_s

    def implied_gap(gap: float) -> tuple[float, Trace, list[float]]:
        tr = generate_agentic(attrs.evolve(params, session_gap_s=gap))
        services = service_times(replay(tr, baseline, config), prefill_tok_per_s)
        per = len(services) / params.sessions
        rate = sustainable_rate(services, per, slo_ttft_s, overhead_s, servers)
        return 1 / (rate * scale), tr, services

    def tpot_at(trace: Trace) -> float | None:
        if decode is None:
            return None
        batch = decode_batch(trace, tm.tpot_s)
        return tpot_p99(batch, decode, scale=scale, window=settled_window(trace))

    def failed(gap: float) -> tuple[list[str], Trace, list[float], float | None]:
        need, tr, services = implied_gap(gap)
        tpot = tpot_at(tr)
        bad = ["TTFT"] if need > gap * (1 + 1e-9) else []
        if slo_tpot_s is not None and tpot is not None and tpot > slo_tpot_s:
            bad.append("TPOT")
        return bad, tr, services, tpot

    lo, hi = math.log(params.session_gap_s / 64), math.log(params.session_gap_s * 64)
    binding = ""
    for _ in range(_STEPS):  # both figures fall as the gap widens
        mid = (lo + hi) / 2
        bad, _, _, _ = failed(math.exp(mid))
        if bad:
            lo, binding = mid, " and ".join(bad)  # too dense for a target: widen the gap
        else:
            hi = mid
    gap = math.exp(hi)  # the feasible end of the bracket
    bad, trace, services, tpot = failed(gap)
    if bad:
        raise ConfigError(
            f"no session rate meets the {' and '.join(bad)} target under {baseline}: even one "
            f"session every {gap:.0f} s on the slice is too many"
        )
    s = np.asarray(services)
    per_session = len(services) / params.sessions
    rate = 1 / (gap * scale)
    lam = rate * per_session
    es, es2 = float(s.mean()), float((s * s).mean())
    rho = lam * es / servers
    wait = mean_wait(es, es2, lam, servers)
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
        slo_tpot_s=slo_tpot_s,
        tpot_p99_s=tpot,
        binding=binding,
        prefill_servers=servers,
    )
    return load, trace
