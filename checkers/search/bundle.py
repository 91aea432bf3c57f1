"""A counterexample bundle that replays bit for bit: trace, config, observation log, step
listing, the states as ITF, a page to step through them and a pytest reproducer."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from checkers.invariants.replay import check_ops
from checkers.invariants.structural import Violation
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.io.itf import dumps_itf, itf_trace
from kvmodel.io.observations import observation_to_json
from kvmodel.io.trace import Op, dumps_op, op_name
from kvmodel.io.viewer import Finding, viewer_html

__all__ = ["config_to_toml", "write_bundle"]


def config_to_toml(config: EngineConfig) -> str:
    lines = [f"block_size = {config.block_size}"]
    for t in config.tiers:
        lines += ["", "[[tiers]]", f'name = "{t.name}"', f"blocks = {t.blocks}"]
        if t.bytes_per_block is not None:
            lines.append(f"bytes_per_block = {t.bytes_per_block}")
        if t.pe_cycles is not None:
            lines.append(f"pe_cycles = {t.pe_cycles}")
            lines.append(f"write_amplification = {t.write_amplification}")
        if t.read_gbps is not None:
            lines.append(f"read_gbps = {t.read_gbps}")
        if t.copies != "inclusive":
            lines.append(f'copies = "{t.copies}"')
        if t.copies_only:
            lines.append("copies_only = true")
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

from checkers.invariants.replay import check_ops
from kvmodel.config import load_config
from kvmodel.io.trace import load_trace

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

from checkers.invariants.replay import nondeterminism
from kvmodel.config import load_config
from kvmodel.io.trace import load_trace

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
    value_minimal: bool = False,
    invariants: Iterable[str] = (),
) -> Path:
    """Write trace, config, observation log, step listing, the states as ITF
    (``counterexample.itf.json``, kvmodel/io/itf.py), a page to step through them (``index.html``,
    kvmodel/io/viewer.py) and a pytest reproducer to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "kvtrace": 1,
        "policy": policy,
        "invariant": invariant,
        "violation": violation.message,
        "at_op": violation.op,
        "one_minimal": one_minimal,
        "value_minimal": value_minimal,
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
