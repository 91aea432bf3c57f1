"""Reading JSONL files with located errors (one reader for logs, events and transcripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvmodel.errors import TraceError

__all__ = ["read_jsonl"]


#: Python's JSON decoder recurses per nesting level; deeper input is refused, not a crash
_TOO_DEEP = "JSON nested too deeply (no kvmodel input nests more than a few levels)"


def read_jsonl(path: str | Path, what: str) -> list[tuple[int, Any]]:
    """``(line number, decoded value)`` for every non-blank line of ``path``.

    An unreadable file or a malformed line is a :class:`TraceError` naming the file (and line);
    ``what`` names the kind of file in the message ("event log", "transcript", ...).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise TraceError(f"cannot read {what}: {e.strerror}", file=str(p)) from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{what} is not UTF-8 text: {e.reason}", file=str(p)) from None
    out = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            out.append((n, json.loads(raw)))
        except json.JSONDecodeError as e:
            raise TraceError(f"malformed JSON: {e.msg}", file=str(p), line=n) from None
        except RecursionError:
            raise TraceError(_TOO_DEEP, file=str(p), line=n) from None
    return out
