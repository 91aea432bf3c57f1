"""vLLM KV-cache events as a partial log: check what such a log can show.

vLLM publishes ``BlockStored`` (hashes of newly cached blocks, their parent's hash),
``BlockRemoved`` (hashes dropped from the prefix cache) and ``AllBlocksCleared``. It cannot show
lifecycle states or tiers, but it can show three structural facts, each checked here:

* **removed-unstored** -- only stored hashes are removed;
* **parent-before-child** -- a block is stored only after its parent (a batch of hashes is a
  chain: each one's parent is the previous one, the first's is ``parent_block_hash``);
* **children-before-parents** -- a block is removed only when none of its stored children
  remains (no orphaned KV: prefix-closed residency, spec I-prefix-closed-residency).

Input: JSONL, one event object per line with ``type`` and the fields above (vLLM's names);
a malformed line is a :class:`~kvmodel.errors.TraceError` naming the file and line.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from kvmodel.errors import TraceError
from kvmodel.io.jsonl import read_jsonl

__all__ = ["EventFinding", "check_kv_events", "load_kv_events"]


_TYPES = ("BlockStored", "BlockRemoved", "AllBlocksCleared")


@attrs.frozen
class EventFinding:
    rule: str
    line: int
    message: str


def load_kv_events(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for n, ev in read_jsonl(path, "event log"):
        if not isinstance(ev, dict) or ev.get("type") not in _TYPES:
            raise TraceError(
                f"expected an event with type {'|'.join(_TYPES)} (got {str(ev)[:60]!r})",
                file=str(path),
                line=n,
                field="type",
            )
        out.append((n, ev))
    return out


def _hashes(ev: dict[str, Any], line: int) -> list[str]:
    hs = ev.get("block_hashes")
    if not isinstance(hs, list):
        raise TraceError(
            f"expected a list of block_hashes (got {hs!r})",
            line=line,
            op=str(ev.get("type")),
            field="block_hashes",
        )
    return [str(h) for h in hs]


def check_kv_events(events: Iterable[tuple[int, dict[str, Any]]]) -> list[EventFinding]:
    """Findings in order; an empty list means the log is consistent with the three rules."""
    parent: dict[str, str | None] = {}
    children: dict[str, set[str]] = {}
    found: list[EventFinding] = []
    for line, ev in events:
        kind = ev["type"]
        if kind == "AllBlocksCleared":
            parent.clear()
            children.clear()
            continue
        hs = _hashes(ev, line)
        if kind == "BlockStored":
            prev = ev.get("parent_block_hash")
            prev = None if prev is None else str(prev)
            for h in hs:
                if prev is not None and prev not in parent:
                    found.append(
                        EventFinding(
                            "parent-before-child",
                            line,
                            f"block {h} stored before its parent {prev}",
                        )
                    )
                parent[h] = prev
                if prev is not None:
                    children.setdefault(prev, set()).add(h)
                prev = h
        else:
            for h in hs:
                if h not in parent:
                    found.append(
                        EventFinding("removed-unstored", line, f"block {h} removed but not stored")
                    )
                    continue
                alive = sorted(children.get(h, set()) & parent.keys())
                if alive:
                    found.append(
                        EventFinding(
                            "children-before-parents",
                            line,
                            f"block {h} removed while child {alive[0]} is still stored",
                        )
                    )
                p = parent.pop(h)
                if p is not None and p in children:
                    children[p].discard(h)
    return found
