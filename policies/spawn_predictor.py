"""Lachesis's predictive path: rank workers by predicted lifetime from their spawn signal.

Features of a worker (spec/policies.md §lachesis): instruction length in words, context tokens
handed over, one indicator per tool (vocabulary learnt at fit time), spawn position in its
session (0 for the session's first worker), and a hashed bag of the instruction's words. The
target is log lifetime (seconds from ``open`` to ``return``/``close``). A ridge regression is
fitted in closed form on standardised features; its output is read only for **rank**.

Weights are saved and loaded as JSON (no pickle): the file is data, not code.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from kvmodel.errors import ConfigError
from kvmodel.ids import ContextId, SessionId
from kvmodel.io.trace import Append, Close, EndSession, Infer, Open, Return, Trace
from kvmodel.messages import AgentKind, SpawnRecord

__all__ = [
    "DEFAULT_TRAINING",
    "HASH_BUCKETS",
    "CVReport",
    "SpawnPredictor",
    "WorkerSample",
    "cross_validate",
    "default_training_traces",
    "fit_default",
    "kendall_tau",
    "samples_from",
    "worker_samples",
]

HASH_BUCKETS = 32


@attrs.frozen(slots=True)
class WorkerSample:
    """One worker of a trace: what its parent handed it, and how long it lived."""

    session: SessionId
    ctx: ContextId
    spawn: SpawnRecord
    position: int
    lifetime_s: float
    #: tokens the worker wrote: appended to it, and produced by its inferences
    written_tokens: int = 0


def worker_samples(trace: Trace) -> list[WorkerSample]:
    """Every worker with a spawn record that ended within the trace, in spawn order."""
    opened: dict[ContextId, tuple[float, Open, int]] = {}
    written: dict[ContextId, int] = {}
    per_session: dict[SessionId, int] = {}
    session_of: dict[ContextId, SessionId] = {}
    out: list[WorkerSample] = []

    def finish(cid: ContextId, t: float) -> None:
        if cid in opened:
            t0, op, pos = opened.pop(cid)
            assert op.spawn is not None
            out.append(
                WorkerSample(op.session, cid, op.spawn, pos, max(t - t0, 1e-3), written.pop(cid, 0))
            )

    for op in trace.ops:
        match op:
            case Open(agent=AgentKind.WORKER, spawn=spawn) if spawn is not None:
                pos = per_session.get(op.session, 0)
                per_session[op.session] = pos + 1
                opened[op.ctx] = (op.t, op, pos)
                session_of[op.ctx] = op.session
            case Append() if op.ctx in opened:
                written[op.ctx] = written.get(op.ctx, 0) + sum(m.tokens for m in op.messages)
            case Infer() if op.ctx in opened:
                written[op.ctx] = written.get(op.ctx, 0) + sum(m.tokens for m in op.output)
            case Return() | Close():
                finish(op.ctx, op.t)
            case EndSession():
                for cid in [c for c, s in session_of.items() if s == op.session]:
                    finish(cid, op.t)
    return out


def _bucket(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % (
        HASH_BUCKETS
    )


@attrs.define
class SpawnPredictor:
    """Ridge regression over spawn features (closed form); see the module docstring."""

    tools: list[str] = attrs.field(factory=list)
    #: sub-agent types seen in training (spec R3), one indicator each
    agent_types: list[str] = attrs.field(factory=list)
    mean: list[float] = attrs.field(factory=list)
    scale: list[float] = attrs.field(factory=list)
    weights: list[float] = attrs.field(factory=list)
    bias: float = 0.0
    ridge: float = 1.0
    #: mean tokens a worker wrote in training; sizes a worker's HBM footprint at admission
    mean_worker_tokens: float = 0.0

    def features(self, spawn: SpawnRecord, position: int) -> list[float]:
        words = spawn.instruction.lower().replace(",", " ").split()
        bag = [0.0] * HASH_BUCKETS
        for w in words:
            bag[_bucket(w)] += 1.0
        tools = [1.0 if t in spawn.tools else 0.0 for t in self.tools]
        kinds = [1.0 if spawn.agent_type == k else 0.0 for k in self.agent_types]
        return [
            float(len(words)),
            float(spawn.context_tokens),
            float(position),
            *tools,
            *kinds,
            *bag,
        ]

    @classmethod
    def fit(cls, samples: Sequence[WorkerSample], *, ridge: float = 1.0) -> SpawnPredictor:
        if len(samples) < 2:
            raise ConfigError(f"need at least 2 workers to fit (got {len(samples)})")
        p = cls(
            tools=sorted({t for s in samples for t in s.spawn.tools}),
            agent_types=sorted({s.spawn.agent_type for s in samples} - {""}),
            ridge=ridge,
        )
        x = np.array([p.features(s.spawn, s.position) for s in samples], dtype=np.float64)
        y = np.log(np.array([s.lifetime_s for s in samples], dtype=np.float64))
        mean = x.mean(axis=0)
        scale = x.std(axis=0)
        scale[scale == 0] = 1.0
        z = (x - mean) / scale
        yc = y - y.mean()
        w = np.linalg.solve(z.T @ z + ridge * np.eye(z.shape[1]), z.T @ yc)
        p.mean, p.scale, p.weights = mean.tolist(), scale.tolist(), w.tolist()
        p.bias = float(y.mean())
        p.mean_worker_tokens = float(np.mean([s.written_tokens for s in samples]))
        return p

    def predict(self, spawn: SpawnRecord, position: int) -> float:
        """Predicted log lifetime; compare predictions only with each other (rank)."""
        if not self.weights:
            return 0.0
        f = np.array(self.features(spawn, position), dtype=np.float64)
        z = (f - np.array(self.mean)) / np.array(self.scale)
        return float(z @ np.array(self.weights) + self.bias)

    def to_json(self) -> dict[str, Any]:
        return {"format": "kvmodel.lachesis.ridge/1", **attrs.asdict(self)}

    def save(self, path: str | Path) -> None:
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(p)

    @classmethod
    def load(cls, path: str | Path) -> SpawnPredictor:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"{path}: cannot read predictor weights: {e}") from None
        if not isinstance(d, dict) or d.pop("format", None) != "kvmodel.lachesis.ridge/1":
            raise ConfigError(f"{path}: not a kvmodel.lachesis.ridge/1 weights file")
        try:
            p = cls(**d)
        except TypeError as e:
            raise ConfigError(f"{path}: bad weights file: {e}") from None
        n = 3 + len(p.tools) + HASH_BUCKETS
        if not (len(p.mean) == len(p.scale) == len(p.weights) == n):
            raise ConfigError(f"{path}: expected {n} weights for {len(p.tools)} tools")
        return p


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b (ties handled), O(n^2): fine for the few hundred workers of a study."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    iu = np.triu_indices(len(x), k=1)
    s = float((dx * dy)[iu].sum())
    nx = float((dx[iu] != 0).sum())
    ny = float((dy[iu] != 0).sum())
    return s / math.sqrt(nx * ny) if nx and ny else 0.0


@attrs.frozen(slots=True)
class CVReport:
    workers: int
    sessions: int
    folds: int
    kendall_tau: float
    shortest_tenth_captured: float
    longest_tenth_selected: float


def cross_validate(
    samples: Sequence[WorkerSample], *, folds: int = 5, ridge: float = 1.0, select: float = 0.1
) -> CVReport:
    """Grouped k-fold CV by session: out-of-fold predictions for every worker, then Kendall tau
    against true lifetimes, and at a ``select`` fraction chosen shortest-predicted-first the share
    of the truly shortest tenth captured and of the truly longest tenth selected."""
    sessions = sorted({s.session for s in samples})
    if len(sessions) < folds:
        raise ConfigError(
            f"need at least {folds} sessions for {folds}-fold CV (got {len(sessions)})"
        )
    fold_of = {s: i % folds for i, s in enumerate(sessions)}
    pred = [0.0] * len(samples)
    for k in range(folds):
        train = [s for s in samples if fold_of[s.session] != k]
        model = SpawnPredictor.fit(train, ridge=ridge)
        for i, s in enumerate(samples):
            if fold_of[s.session] == k:
                pred[i] = model.predict(s.spawn, s.position)
    life = [s.lifetime_s for s in samples]
    n = len(samples)
    m = max(1, round(select * n))
    chosen = set(sorted(range(n), key=lambda i: (pred[i], i))[:m])
    shortest = set(sorted(range(n), key=lambda i: (life[i], i))[:m])
    longest = set(sorted(range(n), key=lambda i: (-life[i], i))[:m])
    return CVReport(
        n,
        len(sessions),
        folds,
        kendall_tau(pred, life),
        len(chosen & shortest) / m,
        len(chosen & longest) / m,
    )


#: How the shipped weights (``policies/lachesis_weights.json``) are made: generated agent
#: workloads on seeds disjoint from every evaluation default (which use seeds < 1000).
DEFAULT_TRAINING: dict[str, Any] = {
    "seeds": list(range(1000, 1010)),
    "sessions": 6,
    "turns": 3,
    "p_spawn": 0.5,
    "ridge": 1.0,
}


def default_training_traces() -> list[Trace]:
    from kvmodel.workloads import AgenticParams, generate_agentic

    d = DEFAULT_TRAINING
    return [
        generate_agentic(
            AgenticParams(seed=s, sessions=d["sessions"], turns=d["turns"], p_spawn=d["p_spawn"])
        )
        for s in d["seeds"]
    ]


def fit_default() -> SpawnPredictor:
    """Refit the shipped weights from :data:`DEFAULT_TRAINING` (deterministic)."""
    return SpawnPredictor.fit(
        samples_from(default_training_traces()), ridge=DEFAULT_TRAINING["ridge"]
    )


def samples_from(traces: Iterable[Trace]) -> list[WorkerSample]:
    """Workers of several traces; sessions are renamed ``<trace index>:<session>`` so that CV
    groups never merge two traces' sessions that happen to share a name."""
    out: list[WorkerSample] = []
    for i, tr in enumerate(traces):
        out.extend(
            attrs.evolve(s, session=SessionId(f"{i}:{s.session}")) for s in worker_samples(tr)
        )
    return out
