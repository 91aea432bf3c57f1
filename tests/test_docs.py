"""The README and docs/ are what these tests say (issue 63 items 1-2, a first step): the README
fits on two screens, every relative link of the README and docs/ resolves, and every
``kvmodel`` command they show is a command the parser has, with flags it accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kvmodel.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_fits_on_two_screens() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 100


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    bad = []
    for m in re.finditer(r"\]\(([^)#\s]+)(#[^)]*)?\)", page.read_text(encoding="utf-8")):
        target = m.group(1)
        if not target.startswith(("http://", "https://")) and not (page.parent / target).exists():
            bad.append(target)
    assert bad == []


def _commands(text: str) -> list[list[str]]:
    """The ``kvmodel ...`` lines of a page's bash blocks, comments and continuations joined."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            for part in line.split("#", 1)[0].split("&&"):
                words = shlex.split(part)
                if words[:1] == ["kvmodel"]:
                    out.append(words[1:])
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_shown_parses(page: Path) -> None:
    parser = _parser()
    shown = _commands(page.read_text(encoding="utf-8"))
    for argv in shown:
        try:
            parser.parse_args(argv)
        except SystemExit as e:  # argparse refuses: an unknown command or flag
            raise AssertionError(f"{page.name}: kvmodel {' '.join(argv)} does not parse") from e


def test_the_command_check_reads_commands_and_can_fail() -> None:
    shown = [argv for page in PAGES for argv in _commands(page.read_text(encoding="utf-8"))]
    assert len(shown) >= 30
    assert {a[0] for a in shown} >= {"check", "prove", "oracle", "compare", "replay", "import"}
    parser = _parser()
    for bad in (["chek", "lru"], ["check", "lru", "--no-such-flag"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
