"""kvmodel: an executable reference model of lifecycle-aware KV-cache management for LLM agents."""

from __future__ import annotations

__version__ = "0.1.0"
