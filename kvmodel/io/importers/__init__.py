"""Importers from real agent logs into kvmodel traces."""

from __future__ import annotations

from kvmodel.io.importers.claude_code import import_claude_code
from kvmodel.io.importers.openai import ImportReport, import_openai

__all__ = ["ImportReport", "import_claude_code", "import_openai"]
