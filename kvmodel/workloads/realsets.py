"""The shared real agent sessions, per family, split into a fit half and a validation half
(spec/importers.md R9).

A generator fitted to real sessions is judged on real sessions it was not fitted to: a figure
measured on a fitted preset is a claim about the generator until the same comparison on the
validation half agrees with it. The split is fixed here, once, for every reader (the fit, the
presets' tests, the validation benchmark): the family's sessions are grouped (a tau-bench task's
trials are one group -- trials of one task are near-copies, and one in each half would let the
fit see its validation sessions), the groups sorted by name (task numbers as numbers), and the
even-numbered groups are the fit half, the odd-numbered the validation half. No random draw, no
choice by outcome: a session's half follows from its name alone.

The folder is ``$KVMODEL_SHARED_TRACES`` or ``../shared/traces`` beside the checkout (a fresh
clone may not have it: :func:`traces_root` is then None and the readers skip, saying why).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import attrs

from kvmodel.errors import ConfigError
from kvmodel.io.trace import EndSession, Op, Open, Trace, TraceHeader
from kvmodel.workloads.resample import sessions_of

__all__ = [
    "FAMILIES",
    "HALVES",
    "Family",
    "Half",
    "family_trace",
    "group_of",
    "half_of",
    "split_sessions",
    "traces_root",
]

Half = Literal["fit", "validation"]
HALVES: tuple[Half, ...] = ("fit", "validation")


@attrs.frozen
class Family:
    """One kind of real agent run: its importer and the files (globs under the traces root)."""

    name: str
    importer: Literal["openai", "claude-code"]
    globs: tuple[str, ...]
    #: the preset fitted to this family's fit half
    preset: str
    #: sessions a comparison runs on (spec E9): Claude Code's are 150 inferences of 100k-token
    #: prompts each, so fewer
    sessions: int = 24


FAMILIES: Mapping[str, Family] = MappingProxyType(
    {
        "mini-swe-agent": Family(
            "mini-swe-agent",
            "openai",
            ("mini_swe_agent_gemini3pro/*.traj.json", "mini_swe_agent_gemini3pro/more/*.json"),
            "mini-swe-agent-fit",
        ),
        "tau-bench": Family("tau-bench", "openai", ("tau_bench/*.json",), "tau-bench-fit"),
        "claude-code": Family(
            "claude-code", "claude-code", ("claude_code_spotter/*.jsonl",), "claude-code-fit", 8
        ),
    }
)


def traces_root() -> Path | None:
    """The shared traces folder, or None where this machine has none."""
    env = os.environ.get("KVMODEL_SHARED_TRACES")
    root = Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "traces"
    return root if root.is_dir() else None


_TRIAL = re.compile(r"^(?P<task>.*\.task\d+)\.\d+$")


def group_of(session: str) -> str:
    """The group a session is split with: a tau-bench run's task (``<file>.task<N>``, its
    trials together), any other session alone."""
    m = _TRIAL.match(session)
    return m.group("task") if m else session


def _natural(name: str) -> tuple[object, ...]:
    """Sort key: digit runs as numbers (task2 before task10)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def half_of(groups: Sequence[str]) -> dict[str, Half]:
    """Each group's half: sorted naturally, even positions fit, odd validation."""
    ordered = sorted(set(groups), key=_natural)
    return {g: ("fit" if i % 2 == 0 else "validation") for i, g in enumerate(ordered)}


def split_sessions(trace: Trace, keep: Callable[[str], bool], **meta: object) -> Trace:
    """The sessions of ``trace`` whose name ``keep`` accepts, on the trace's own clock; the
    header keeps its keys (``untimed_sessions`` cut to the kept ones) plus ``meta``."""
    ops = []
    kept = set()
    for session_ops in sessions_of([trace]):
        sid = _session_name(session_ops)
        if keep(sid):
            kept.add(sid)
            ops.extend(session_ops)
    order = {id(op): i for i, op in enumerate(trace.ops)}
    ops.sort(key=lambda op: order[id(op)])
    header = dict(trace.header.meta)
    if "untimed_sessions" in header:
        untimed = header["untimed_sessions"]
        assert isinstance(untimed, list)
        header["untimed_sessions"] = [s for s in untimed if s in kept]
    header.update(meta)
    return Trace(TraceHeader(trace.header.version, header), tuple(ops))


def _session_name(ops: Sequence[Op]) -> str:
    for op in ops:
        if isinstance(op, Open | EndSession):
            return str(op.session)
    raise AssertionError("a session without open or end_session")  # (sessions_of's grouping)


@cache
def _imported(family: str, root: Path) -> Trace:
    fam = FAMILIES[family]
    paths = sorted({p for g in fam.globs for p in root.glob(g)})
    if not paths:
        raise ConfigError(f"no {family} traces under {root} (looked for {', '.join(fam.globs)})")
    if fam.importer == "openai":
        from kvmodel.io.importers.openai import import_openai

        trace, _ = import_openai(paths)
    else:
        from kvmodel.io.importers.claude_code import import_claude_code

        trace, _ = import_claude_code(paths)
    return trace


def family_trace(family: str, half: Half | None = None, root: Path | None = None) -> Trace:
    """The family's real sessions imported on one clock (R5), all of them or one half."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown trace family {family!r}; known: {', '.join(FAMILIES)}")
    root = root if root is not None else traces_root()
    if root is None:
        raise ConfigError("no shared traces folder (set KVMODEL_SHARED_TRACES)")
    trace = _imported(family, root.resolve())
    if half is None:
        return trace
    names = [_session_name(s) for s in sessions_of([trace])]
    halves = half_of([group_of(n) for n in names])
    return split_sessions(trace, lambda s: halves[group_of(s)] == half, family=family, half=half)
