"""Reading JSONL files with located errors (one reader for logs, events and transcripts)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvmodel.errors import TraceError

__all__ = ["iter_jsonl", "read_jsonl"]


#: Python's JSON decoder recurses per nesting level; deeper input is refused, not a crash
_TOO_DEEP = "JSON nested too deeply (no kvmodel input nests more than a few levels)"


def read_jsonl(path: str | Path, what: str) -> list[tuple[int, Any]]:
    """``(line number, decoded value)`` for every non-blank line of ``path``.

    An unreadable file or a malformed line is a :class:`TraceError` naming the file (and line);
    ``what`` names the kind of file in the message ("event log", "transcript", ...).
    """
    return [(n, v) for n, _, _, v in iter_jsonl(path, what)]


def iter_jsonl(path: str | Path, what: str) -> Iterator[tuple[int, int, int, Any]]:
    """:func:`read_jsonl` as a stream: ``(line number, first byte, byte after the line, decoded
    value)`` for every non-blank line, one line held at a time (a judge of a long log holds
    what the log describes, not the log). Lines end at ``\\n``."""
    p = Path(path)
    try:
        f = p.open("rb")
    except OSError as e:
        raise TraceError(f"cannot read {what}: {e.strerror}", file=str(p)) from None
    with f:
        pos = 0
        for n, raw in enumerate(f, start=1):
            start, pos = pos, pos + len(raw)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TraceError(
                    f"{what} is not UTF-8 text: {e.reason}", file=str(p), line=n
                ) from None
            if n == 1:
                text = text.removeprefix("\ufeff")
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise TraceError(f"malformed JSON: {e.msg}", file=str(p), line=n) from None
            except RecursionError:
                raise TraceError(_TOO_DEEP, file=str(p), line=n) from None
            yield n, start, pos, value
