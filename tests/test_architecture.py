"""The layers are what docs/architecture.md says (kvmodel issue 15): imports read
from the source, so a new module that reaches up a floor fails here, not in review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: checkers' floors, ground first: a module may import its own floor and the floors below
CHECKER_FLOORS = ("invariants", "search", "symbolic", "conformance", "discover", "cli")


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


def test_the_model_never_imports_a_policy() -> None:
    """Policies sit on the model, as a user's would (issue 63 item 4: kvmodel/cli/studies.py
    imported the spawn predictor; its command now plugs in from policies/cli.py)."""
    found = [
        f"{p.relative_to(ROOT).as_posix()}:{line}: {mod}"
        for p in _sources("kvmodel")
        for line, mod in _imports(p)
        if mod == "policies" or mod.startswith("policies.")
    ]
    assert found == []


@pytest.mark.parametrize("package", ["kvmodel", "policies"])
def test_the_model_side_never_imports_the_checkers(package: str) -> None:
    """One named exception: the public namespace (``kvmodel/__init__.py``) names the checkers'
    entry points, imported only for a type checker and loaded on first use, so importing the
    model still imports no checker (tests/test_public_api.py runs that)."""
    import kvmodel

    facade = ROOT / "kvmodel" / "__init__.py"
    lazy = set(kvmodel._FROM_CHECKERS.values())
    found = [
        f"{p.relative_to(ROOT).as_posix()}:{line}: {mod}"
        for p in _sources(package)
        for line, mod in _imports(p)
        if mod == "checkers" or mod.startswith("checkers.")
        if not (p == facade and (mod in lazy or mod.rsplit(".", 1)[0] in lazy))
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


def _pyproject_group(group: str) -> dict[str, str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return dict(project["entry-points"][group])


def test_every_command_is_an_entry_point_and_the_install_is_current() -> None:
    """The parser has exactly the commands of the ``kvmodel.commands`` group, and the installed
    metadata is pyproject.toml's (a stale editable install would hide a new command)."""
    from importlib.metadata import entry_points

    from kvmodel.cli import COMMAND_GROUP, _parser

    declared = _pyproject_group(COMMAND_GROUP)
    installed = {e.name: e.value for e in entry_points(group=COMMAND_GROUP)}
    assert installed == declared, "reinstall: pip install -e ."
    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices is not None
    assert set(sub.choices) == set(declared)
    model = sorted(n for n, v in declared.items() if v.startswith("kvmodel."))
    assert model == [
        *("compare", "demo", "export-itf", "generate", "import"),
        *("policies", "replay", "simulate", "stats", "sweep"),
    ]
    # the policies package plugs its own in (the model's command line imports no policy)
    assert sorted(n for n, v in declared.items() if v.startswith("policies.")) == ["lachesis"]


def test_the_model_runs_without_the_checkers(tmp_path: Path) -> None:
    """With only the model's own commands registered, ``replay`` runs and imports no checker;
    its ``--check`` (the checkers' extension) is then a usage error, exit 2."""
    import subprocess
    import sys

    trace = str(tmp_path / "t.jsonl")
    script = (
        "import sys\n"
        "import kvmodel.cli as cli\n"
        "every = cli._commands\n"
        "cli._commands = lambda: [e for e in every() if e.value.startswith('kvmodel.')]\n"
        f"assert cli.main(['generate', '--sessions', '1', '-o', {trace!r}]) == 0\n"
        f"assert cli.main(['replay', {trace!r}]) == 0\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'checkers'], 'checkers loaded'\n"
        f"assert cli.main(['replay', {trace!r}, '--check']) == 2\n"
        "assert cli.main(['check', 'lru']) == 2\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "policy lru" in done.stdout


def _model_imports(path: Path) -> list[str]:
    """The kvmodel modules ``path`` imports, type-only imports included."""
    return [m for _, m in _imports(path) if m == "kvmodel" or m.startswith("kvmodel.")]


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_model_has_no_import_circle() -> None:
    """Type-only imports count: the engine's helpers name what they read of it as a Protocol
    of their own (``AdmissionHost``, ``EvictionHost``, ``ViewHost``, ``GraphHost``)."""
    import networkx as nx

    modules = {_module_of(p): p for p in _sources("kvmodel")}
    g = nx.DiGraph()
    for name, path in modules.items():
        for target in _model_imports(path):
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]  # ``from kvmodel.x import name``
            if target != name and target != "kvmodel":
                g.add_edge(name, target)
    assert list(nx.simple_cycles(g)) == []


def _private_reads(path: Path, root: Path = ROOT) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls``/``super()`` and ``_name`` is not one the
    module itself defines (``self._name = ...``, a ``_name`` class or function): a reach into
    another module's privates."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
    } | {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in own
        ):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super":
                continue
            out.append(f"{path.relative_to(root).as_posix()}:{node.lineno}: .{node.attr}")
    return out


def test_no_model_module_touches_another_objects_privates() -> None:
    found = [hit for p in _sources("kvmodel") for hit in _private_reads(p)]
    assert found == []


def test_a_reach_into_privates_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "class C:\n"
        "    def __init__(self):\n"
        "        self._mine = 0\n"
        "    def f(self, e, other):\n"
        "        return e._fl, other._mine, self._ok\n"
    )
    assert _private_reads(bad, tmp_path) == ["bad.py:5: ._fl"]
