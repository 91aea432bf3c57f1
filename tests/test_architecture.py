"""The layers are what the README's ARCHITECTURE section says (kvmodel issue 15): imports read
from the source, so a new module that reaches up a floor fails here, not in review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: checkers' floors, ground first: a module may import its own floor and the floors below
CHECKER_FLOORS = ("invariants", "search", "symbolic", "conformance", "discover")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement in ``path`` names (lazy ones in functions too)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _floor(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "checkers" or len(parts) < 2:
        return None
    return CHECKER_FLOORS.index(parts[1]) if parts[1] in CHECKER_FLOORS else None


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_every_checker_module_is_on_a_floor() -> None:
    loose = [
        p.relative_to(ROOT).as_posix()
        for p in _sources("checkers")
        if p.name != "__init__.py" or p.parent.name != "checkers"
        if _floor(".".join(p.relative_to(ROOT).with_suffix("").parts)) is None
    ]
    assert loose == []


@pytest.mark.parametrize("path", _sources("checkers"), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_checker_imports_point_down(path: Path) -> None:
    here = _floor(".".join(path.relative_to(ROOT).with_suffix("").parts))
    if here is None:  # checkers/__init__.py: the package's map re-exports the ground floor
        here = 0
    up = [
        f"line {line}: {mod}"
        for line, mod in _imports(path)
        if (floor := _floor(mod)) is not None and floor > here
    ]
    assert up == [], f"{path.name} is on floor {CHECKER_FLOORS[here]!r} and imports above it"


@pytest.mark.parametrize("package", ["policies"])
def test_the_model_side_never_imports_the_checkers(package: str) -> None:
    found = [
        f"{p.relative_to(ROOT).as_posix()}:{line}: {mod}"
        for p in _sources(package)
        for line, mod in _imports(p)
        if mod == "checkers" or mod.startswith("checkers.")
    ]
    assert found == []


def test_a_planted_upward_import_is_caught(tmp_path: Path) -> None:
    """The checks above can fail: an invariants module that reads the search is refused."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from checkers.search.shrink import shrink\n")
    assert [m for _, m in _imports(bad) if (_floor(m) or 0) > 0] == [
        "checkers.search.shrink",
        "checkers.search.shrink.shrink",
    ]
