"""Importers from real agent logs into kvmodel traces."""

from __future__ import annotations

from kvmodel.importers.openai import ImportReport, import_openai

__all__ = ["ImportReport", "import_openai"]
