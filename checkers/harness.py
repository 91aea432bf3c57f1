"""Run a trace under a policy with the invariant monitor; shrink a failing trace to a 1-minimal
one by delta debugging; write a counterexample bundle that replays bit for bit.

``check_ops`` is the single place that drives an engine for checking: ``kvmodel replay --check``,
the shrinker, the stateful machine's counterexample export and the tests all go through it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from checkers.invariants import Monitor
from checkers.structural import Violation
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import TraceError
from kvmodel.itf import dumps_itf, itf_trace
from kvmodel.observations import observation_to_json
from kvmodel.policy import Policy, resolve_policy
from kvmodel.trace import Op, Trace, TraceHeader, dumps_op, op_name
from kvmodel.viewer import Finding, viewer_html

__all__ = [
    "CheckRun",
    "check_ops",
    "config_to_toml",
    "engine_for",
    "nondeterminism",
    "shrink",
    "write_bundle",
]


T = TypeVar("T")


def engine_for(policy: Policy, config: EngineConfig) -> Engine:
    """The engine a policy runs on. A policy may bring an ``engine_class`` (the mutant zoo plants
    engine bugs this way); everything else runs on the reference :class:`Engine`."""
    cls: type[Engine] = getattr(policy, "engine_class", Engine)
    return cls(config, policy)


@attrs.frozen
class CheckRun:
    """The outcome of checking one op sequence."""

    violations: tuple[Violation, ...]
    engine: Engine
    applied: int  # ops applied before the run stopped
    trace_error: TraceError | None = None

    def first(self, invariant: str) -> Violation | None:
        return next((v for v in self.violations if v.invariant == invariant), None)


def check_ops(
    ops: Sequence[Op],
    policy: str | Policy,
    config: EngineConfig,
    invariants: Iterable[str],
    *,
    stop_at: str | None = None,
    endurance_years: float = 5.0,
) -> CheckRun:
    """Apply ``ops`` with a :class:`Monitor`; stop at the first violation of ``stop_at`` (if
    given), at a refused policy decision, or at an op the model rejects as bad input."""
    pol = resolve_policy(policy)
    engine = engine_for(pol, config)
    mon = Monitor(engine, invariants, endurance_years=endurance_years)
    prepare = getattr(pol, "prepare", None)
    if callable(prepare):
        try:
            prepare(Trace(TraceHeader(), tuple(ops)), config)
        except TraceError as e:
            return CheckRun((), engine, 0, e)
    applied = 0
    for op in ops:
        try:
            went_on = mon.apply(op)
        except TraceError as e:
            return CheckRun(tuple(mon.violations), engine, applied, e)
        applied += 1
        if not went_on:
            return CheckRun(tuple(mon.violations), engine, applied)
        if stop_at is not None and mon.first(stop_at) is not None:
            return CheckRun(tuple(mon.violations), engine, applied)
    mon.at_end()
    return CheckRun(tuple(mon.violations), engine, applied)


def nondeterminism(
    ops: Sequence[Op], policy: str, config: EngineConfig, *, runs: int = 3
) -> Violation | None:
    """Replay ``ops`` ``runs`` times, each with a fresh policy and engine; a
    ``nondeterministic`` finding at the first op whose records differ between two replays (a
    policy that breaks ties by ``id()``, set order or a clock), else None."""
    logs = []
    for _ in range(runs):
        run = check_ops(ops, policy, config, [])
        logs.append([observation_to_json(o) for o in run.engine.log])
    first = logs[0]
    for other in logs[1:]:
        if other != first:
            k = next(
                (i for i, (a, b) in enumerate(zip(first, other, strict=False)) if a != b),
                min(len(first), len(other)),
            )
            rec = first[k] if k < len(first) else other[k]
            return Violation(
                "nondeterministic",
                f"two replays of the same trace differ at record {k} (op {rec.get('op')}): "
                f"{_brief(first, k)} vs {_brief(other, k)}",
                op=int(rec.get("op", 0)),
            )
    return None


def _brief(log: Sequence[dict[str, Any]], k: int) -> str:
    if k >= len(log):
        return "no record"
    r = log[k]
    return " ".join(str(r[f]) for f in ("kind", "block", "tier") if f in r)


def shrink(
    ops: Sequence[T], fails: Callable[[Sequence[T]], bool], *, budget: int = 2000
) -> tuple[list[T], bool]:
    """Delta debugging (ddmin) over ops, then single-op deletion to a fixpoint.

    Returns the shortened ops and whether they are **1-minimal** (no single op can be deleted
    and still fail). ``fails`` must be deterministic; ``budget`` bounds the number of tries.
    """
    cur = list(ops)
    tries = 0
    n = 2
    while len(cur) >= 2 and tries < budget:
        chunk = math.ceil(len(cur) / n)
        for i in range(0, len(cur), chunk):
            cand = cur[:i] + cur[i + chunk :]
            tries += 1
            if fails(cand):
                cur = cand
                n = max(n - 1, 2)
                break
        else:
            if chunk == 1:
                break
            n = min(len(cur), n * 2)
    changed = True
    while changed and tries < budget:
        changed = False
        for i in range(len(cur)):
            cand = cur[:i] + cur[i + 1 :]
            tries += 1
            if fails(cand):
                cur = cand
                changed = True
                break
    one_minimal = tries < budget and not changed
    return cur, one_minimal


def config_to_toml(config: EngineConfig) -> str:
    lines = [f"block_size = {config.block_size}"]
    for t in config.tiers:
        lines += ["", "[[tiers]]", f'name = "{t.name}"', f"blocks = {t.blocks}"]
        if t.bytes_per_block is not None:
            lines.append(f"bytes_per_block = {t.bytes_per_block}")
        if t.pe_cycles is not None:
            lines.append(f"pe_cycles = {t.pe_cycles}")
            lines.append(f"write_amplification = {t.write_amplification}")
    return "\n".join(lines) + "\n"


def _describe_state(engine: Engine) -> list[str]:
    view = engine.view
    out = []
    for bid in view.resident():
        b = view.block(bid)
        holders = ",".join(b.holders) or "-"
        out.append(
            f"    block {bid:>3} {b.tier:<4} depth {b.depth:<3} {b.state.value:<9} "
            f"held by {holders}"
        )
    return out or ["    (nothing resident)"]


def _steps(
    ops: Sequence[Op],
    policy: str,
    config: EngineConfig,
    invariant: str,
    violation: Violation,
    invariants: Iterable[str],
) -> str:
    """A readable listing: every op with what the engine did, and the state around the failure."""
    lines = [
        f"counterexample: {policy} violates {invariant} at op {violation.op}",
        f"  {violation.message}",
        "",
    ]
    fail = violation.op if violation.op is not None else len(ops) - 1
    before = check_ops(ops[:fail], policy, config, ()).engine
    full = check_ops(ops, policy, config, invariants, stop_at=invariant).engine
    for i, op in enumerate(ops):
        mark = ">>" if i == fail else "  "
        lines.append(f"{mark} [{i}] t={op.t:g} {op_name(op)} {dumps_op(op)}")
        for r in full.log:
            if r.op == i:
                d = observation_to_json(r)
                rest = {k: v for k, v in d.items() if k not in ("seq", "t", "op", "kind")}
                lines.append(f"        {d['kind']}: {json.dumps(rest)}")
        if i == fail:
            lines += [
                "     state before this op:",
                *_describe_state(before),
                "     state after it:",
                *_describe_state(full),
            ]
    return "\n".join(lines) + "\n"


_REPRO = '''"""Reproduces a kvmodel counterexample: {policy} violates {invariant}.

This test asserts the invariant and therefore FAILS while the counterexample stands.
Run: python -m pytest {name}
"""

from pathlib import Path

from checkers.harness import check_ops
from kvmodel.config import load_config
from kvmodel.trace import load_trace

HERE = Path(__file__).parent


def test_{ident}_holds() -> None:
    trace = load_trace(HERE / "trace.jsonl")
    config = load_config(HERE / "config.toml")
    run = check_ops(trace.ops, {policy!r}, config, [{invariant!r}], stop_at={invariant!r})
    assert run.first({invariant!r}) is None, run.first({invariant!r})
'''

_REPRO_NONDETERMINISM = '''"""Reproduces a kvmodel finding: {policy} is nondeterministic.

This test replays the trace three times and FAILS while the replays differ.
Run: python -m pytest {name}
"""

from pathlib import Path

from checkers.harness import nondeterminism
from kvmodel.config import load_config
from kvmodel.trace import load_trace

HERE = Path(__file__).parent


def test_{ident}_replays_agree() -> None:
    trace = load_trace(HERE / "trace.jsonl")
    config = load_config(HERE / "config.toml")
    finding = nondeterminism(trace.ops, {policy!r}, config)
    assert finding is None, finding
'''


def write_bundle(
    out: Path,
    ops: Sequence[Op],
    policy: str,
    config: EngineConfig,
    invariant: str,
    violation: Violation,
    *,
    one_minimal: bool,
    invariants: Iterable[str] = (),
) -> Path:
    """Write trace, config, observation log, step listing, the states as ITF
    (``counterexample.itf.json``, kvmodel/itf.py), a page to step through them (``index.html``,
    kvmodel/viewer.py) and a pytest reproducer to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "kvtrace": 1,
        "policy": policy,
        "invariant": invariant,
        "violation": violation.message,
        "at_op": violation.op,
        "one_minimal": one_minimal,
    }
    lines = [json.dumps(meta, separators=(",", ":"))] + [dumps_op(o) for o in ops]
    files = {
        "trace.jsonl": "\n".join(lines) + "\n",
        "config.toml": config_to_toml(config),
        "observations.jsonl": check_ops(ops, policy, config, ()).engine.log.to_jsonl(),
        "steps.txt": _steps(ops, policy, config, invariant, violation, [invariant, *invariants]),
        "counterexample.itf.json": dumps_itf(
            itf_trace(
                ops,
                policy,
                config,
                meta={"invariant": invariant, "message": violation.message, "at": violation.op},
            )
        ),
        "index.html": viewer_html(
            ops,
            policy,
            config,
            finding=Finding(violation.op, invariant, violation.message),
            title=f"{policy} violates {invariant}",
        ),
        "test_repro.py": (
            _REPRO_NONDETERMINISM if invariant == "nondeterministic" else _REPRO
        ).format(
            policy=policy,
            invariant=invariant,
            name="test_repro.py",
            ident=invariant.replace("-", "_"),
        ),
    }
    for name, text in files.items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out / name)
    return out
