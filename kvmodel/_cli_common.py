"""Helpers shared by the CLI modules (output files, configs, built-in workloads)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import attrs

from kvmodel.config import EngineConfig, default_config, load_config
from kvmodel.trace import Trace, load_trace
from kvmodel.workloads import PRESETS, AgenticParams, generate_agentic

__all__ = ["agentic_from", "atomic_write", "engine_config", "workload"]


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


def engine_config(path: str | None) -> EngineConfig:
    return load_config(path) if path else default_config()


def agentic_from(args: argparse.Namespace) -> Trace:
    """The built-in generator: a calibrated preset (``--preset``), else the ad-hoc knobs."""
    if getattr(args, "preset_workload", None):
        p = attrs.evolve(PRESETS[args.preset_workload], seed=args.seed)
        if args.sessions is not None:
            p = attrs.evolve(p, sessions=args.sessions)
        return generate_agentic(p)
    return generate_agentic(
        AgenticParams(seed=args.seed, sessions=args.sessions or 4, turns=args.turns)
    )


def workload(
    args: argparse.Namespace,
    *,
    default_preset: str | None = None,
    default_sessions: int | None = None,
) -> Trace:
    """``--workload``: 'agentic', a preset name, or a trace file."""
    if args.workload in PRESETS:
        args.preset_workload = args.workload
        args.workload = "agentic"
    if args.workload != "agentic":
        return load_trace(args.workload)
    args.preset_workload = args.preset_workload or default_preset
    args.sessions = args.sessions or default_sessions
    return agentic_from(args)
