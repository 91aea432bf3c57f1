"""Drift between the spec and the code that implements it (issue 15 item 5): each test reads the
spec's own text, so an edit on one side that the other does not follow fails here."""

from __future__ import annotations

import re
from pathlib import Path

from kvmodel.lifecycle import TRANSITIONS, Event, MsgState

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec"
#: a clause id: B6.3, P7.7, M4.1, L5.2, T4, PP1, ...
ID = r"(?:PP|B|P|M|L|T|I|E|R)\d+(?:\.\d+)?"


def _defined() -> set[str]:
    """Clause ids the spec defines: a heading (``## B6 ...``) or a line that opens with the id
    (``3. B6.3 every other block``, ``M4.1 **Evictable**``, ``**L5.1 Within one context**``)."""
    out: set[str] = set()
    for md in SPEC.glob("*.md"):
        for line in md.read_text(encoding="utf-8").splitlines():
            for pattern in (rf"^#+\s+({ID})\b", rf"^\s*(?:\d+\.\s+|-\s+)?(?:\*\*)?({ID})\b"):
                if m := re.match(pattern, line):
                    out.add(m.group(1))
    return out


def test_every_spec_clause_the_code_cites_exists() -> None:
    defined = _defined()
    assert {"B6.3", "M4.1", "L5.2", "P7.7", "T4"} <= defined  # the reader finds definitions
    cited: dict[str, list[str]] = {}
    for pkg in ("kvmodel", "checkers", "policies"):
        for py in sorted((ROOT / pkg).rglob("*.py")):
            for n, line in enumerate(py.read_text(encoding="utf-8").splitlines(), 1):
                for m in re.finditer(rf"\bspec\s+§?({ID})\b|\(({ID})(?=[,;)\s])", line):
                    cited.setdefault(m.group(1) or m.group(2), []).append(
                        f"{py.relative_to(ROOT)}:{n}"
                    )
    assert len(cited) > 30  # the scan sees the citations
    missing = {k: v[:3] for k, v in cited.items() if k not in defined}
    assert not missing, f"cited but not defined in spec/: {missing}"


def test_the_lifecycle_table_in_the_spec_is_the_transition_table() -> None:
    """spec/lifecycle.md L3, cell by cell, against kvmodel.lifecycle.TRANSITIONS."""
    lines = (SPEC / "lifecycle.md").read_text(encoding="utf-8").splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| state \\ event |"))
    events = [Event(c.strip()) for c in lines[head].strip("|").split("|")[1:]]
    table: dict[tuple[MsgState | None, Event], MsgState] = {}
    for ln in lines[head + 2 :]:
        if not ln.startswith("|"):
            break
        cells = [c.strip().strip("*") for c in ln.strip().strip("|").split("|")]
        state = None if cells[0] == "—" else MsgState(cells[0].lower())
        for ev, cell in zip(events, cells[1:], strict=True):
            if cell:
                table[(state, ev)] = MsgState(cell.lower())
    assert len(table) > 30
    assert table == dict(TRANSITIONS)


def test_the_builtin_policy_table_is_the_packages_entry_points() -> None:
    """kvmodel.policy.BUILTIN_POLICIES (a name works without installed metadata) and the
    ``kvmodel.policies`` entry points in pyproject.toml (how a third party registers) are one
    list written twice: they must not drift."""
    import tomllib

    from kvmodel.policy import BUILTIN_POLICIES, ENTRY_POINT_GROUP

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP] == dict(BUILTIN_POLICIES)


def test_the_schema_names_exactly_the_trace_ops() -> None:
    """spec/trace.schema.json's op variants and kvmodel.io.trace.OP_NAMES (the parser's registry,
    which the generators' weights and the search's coverage are tested against)."""
    import json

    from kvmodel.io.trace import OP_NAMES

    schema = json.loads((SPEC / "trace.schema.json").read_text(encoding="utf-8"))
    ops = [v["properties"]["op"]["const"] for v in schema["$defs"]["op"]["oneOf"]]
    assert sorted(ops) == sorted(OP_NAMES)
    assert len(ops) == len(set(ops))
