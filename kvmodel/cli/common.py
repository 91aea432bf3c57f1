"""What every command module needs, whichever package contributes it: argument types, output
files written whole or not at all, engine configs and the built-in workloads."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO, TypeAlias

import attrs

from kvmodel.config import EngineConfig, default_config, load_config
from kvmodel.errors import ConfigError
from kvmodel.io.trace import Trace, load_trace
from kvmodel.workloads import PRESETS, AgenticParams, generate_agentic

__all__ = [
    "Subparsers",
    "agentic_from",
    "agentic_params",
    "atomic_write",
    "atomic_writer",
    "engine_config",
    "int_at_least",
    "number_in",
    "output_dir",
    "workload",
    "workload_args",
    "workload_params",
]

#: what a command's ``add`` function is given: the ``kvmodel`` parser's subcommands
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def int_at_least(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= ``lo`` (and <= ``hi``, for a size whose work grows with
    it); anything else is a usage error, exit 2."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer (got {text!r:.40})") from None
        if v < lo or (hi is not None and v > hi):
            want = f">= {lo}" if hi is None else f"in [{lo}, {hi:,}]"
            raise argparse.ArgumentTypeError(f"expected an integer {want} (got {v})")
        return v

    return parse


def number_in(lo: float, hi: float = math.inf, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in ``[lo, hi]`` (``(lo, hi]`` with ``low_open``)."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number (got {text!r})") from None
        ok = math.isfinite(v) and (v > lo if low_open else v >= lo) and v <= hi
        if not ok:
            lo_s = f"> {lo:g}" if low_open else f">= {lo:g}"
            hi_s = "" if math.isinf(hi) else f" and <= {hi:g}"
            raise argparse.ArgumentTypeError(f"expected a finite number {lo_s}{hi_s} (got {text})")
        return v

    return parse


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place: a reader never
    sees half a file, and a path that cannot be written is a ConfigError (exit 2) naming it."""
    with atomic_writer(path) as f:
        f.write(text)


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[TextIO]:
    """:func:`atomic_write` for text written as it is made (a long log, line by line): the
    temporary file is renamed into place when the block ends, and removed if it raises."""
    try:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    except ValueError:
        raise ConfigError(f"{path}: cannot write here: not a file name") from None
    try:
        try:
            with tmp.open("w", encoding="utf-8") as f:
                yield f
            tmp.replace(path)
        except OSError as e:
            raise ConfigError(f"{path}: cannot write: {e.strerror}") from None
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                tmp.unlink()


def output_dir(path: str, flag: str = "--out") -> Path:
    """The directory a command will write into, made now, before any work: a path that names a
    file or cannot be made is a ConfigError (exit 2) naming it, not a traceback after the
    work (``discover --out FILE`` failed after 53 s)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag} {path}: exists and is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot make the directory: {e.strerror}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: the directory is not writable")
    return p


def engine_config(path: str | None) -> EngineConfig:
    return load_config(path) if path else default_config()


def agentic_params(args: argparse.Namespace) -> AgenticParams:
    """The built-in generator's parameters: a calibrated preset (``--preset``), else the ad-hoc
    knobs."""
    if getattr(args, "preset_workload", None):
        p = attrs.evolve(PRESETS[args.preset_workload], seed=args.seed)
        if args.sessions is not None:
            p = attrs.evolve(p, sessions=args.sessions)
        return p
    return AgenticParams(seed=args.seed, sessions=args.sessions or 4, turns=args.turns)


def agentic_from(args: argparse.Namespace) -> Trace:
    """The built-in generator's trace (:func:`agentic_params`)."""
    return generate_agentic(agentic_params(args))


def workload_params(
    args: argparse.Namespace,
    *,
    default_preset: str | None = None,
    default_sessions: int | None = None,
) -> AgenticParams | None:
    """``--workload``'s generator parameters, or None for a trace file."""
    if args.workload in PRESETS:
        args.preset_workload = args.workload
        args.workload = "agentic"
    if args.workload != "agentic":
        return None
    args.preset_workload = args.preset_workload or default_preset
    args.sessions = args.sessions or default_sessions
    return agentic_params(args)


def workload(
    args: argparse.Namespace,
    *,
    default_preset: str | None = None,
    default_sessions: int | None = None,
) -> Trace:
    """``--workload``: 'agentic', a preset name, or a trace file."""
    p = workload_params(args, default_preset=default_preset, default_sessions=default_sessions)
    return load_trace(args.workload) if p is None else generate_agentic(p)


def workload_args(sp: argparse.ArgumentParser) -> None:
    """The built-in generator's options: ``--seed``, ``--sessions``, ``--turns``,
    ``--workload-preset``."""
    sp.add_argument(
        "--seed", type=int_at_least(0), default=0, help="the generator's seed (default 0)"
    )
    sp.add_argument(
        "--sessions",
        type=int_at_least(1, 100_000),
        help="sessions (default: 4, or the preset's; at most 100,000)",
    )
    sp.add_argument("--turns", type=int_at_least(1, 10_000), default=3, help="at most 10,000")
    sp.add_argument(
        "--workload-preset",
        dest="preset_workload",
        choices=sorted(PRESETS),
        help="a calibrated generator preset (see kvmodel.workloads.PRESETS)",
    )
