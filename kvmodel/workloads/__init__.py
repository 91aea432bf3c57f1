"""Seeded, deterministic workload generators that emit trace ops."""

from __future__ import annotations

from kvmodel.workloads.agentic import PRESETS, AgenticParams, generate_agentic
from kvmodel.workloads.random_ops import RandomParams, random_trace

__all__ = ["PRESETS", "AgenticParams", "RandomParams", "generate_agentic", "random_trace"]
