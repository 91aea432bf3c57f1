"""The tutorials (docs/tutorial.md: a policy; docs/tutorial-engine.md: an engine) run as
written (issue 63 item 2): their files are written, their commands run in order in an empty
directory, each exits as the page says (``<!-- exit N -->``
before a block; 0 otherwise) and prints what the page shows (a ``text`` block after it, ``...``
standing for lines or the rest of a line left out). So the page cannot drift from the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
TUTORIALS = [TUTORIAL, ROOT / "docs" / "tutorial-engine.md"]

_BLOCK = re.compile(r"(?:<!-- exit (\d+) -->\n)?```(\w+)([^\n]*)\n(.*?)```", re.S)


@attrs.frozen
class Block:
    lang: str
    info: str
    body: str
    exit: int


def blocks(text: str) -> list[Block]:
    return [
        Block(m.group(2), m.group(3).strip(), m.group(4), int(m.group(1) or 0))
        for m in _BLOCK.finditer(text)
    ]


def commands(body: str) -> list[str]:
    """A bash block's commands, continuation lines joined."""
    return [c.strip() for c in body.replace("\\\n", " ").splitlines() if c.strip()]


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(p) for p in line.rstrip().split("...")))


def shows(expected: str, got: str) -> bool:
    """``got`` has the lines of ``expected`` in order: a line ``...`` skips any number of lines,
    ``...`` inside a line any text."""
    want = expected.splitlines()
    have = [g.rstrip() for g in got.splitlines()]

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return True
        if want[i].strip() == "...":
            return any(match(i + 1, k) for k in range(j, len(have) + 1))
        return j < len(have) and bool(_pattern(want[i]).fullmatch(have[j])) and match(i + 1, j + 1)

    return match(0, 0)


def test_the_output_matcher_can_fail() -> None:
    assert shows("a\n...\nc ... d", "a\nb\nb\nc x d\n")
    assert not shows("a\nc", "a\nb\nc\n")  # no ellipsis: lines must follow each other
    assert not shows("a\n...\nz", "a\nb\n")
    assert not shows("hit 85.3%", "hit 85.4%")


def test_the_tutorial_has_what_it_promises() -> None:
    bs = blocks(TUTORIAL.read_text(encoding="utf-8"))
    files = [b for b in bs if b.lang == "python"]
    assert [b.info for b in files] == ['title="my_policy.py"'] * 2  # written, then fixed
    run = [c for b in bs if b.lang == "bash" for c in commands(b.body)]
    assert any(c.startswith("kvmodel check") for c in run)
    assert any(c.startswith("kvmodel prove") for c in run)
    assert [b.exit for b in bs if b.exit] == [1]  # the broken policy's check fails


def test_the_engine_tutorial_has_what_it_promises() -> None:
    bs = blocks(TUTORIALS[1].read_text(encoding="utf-8"))
    files = [b.info for b in bs if b.lang == "python"]
    assert files == ['title="toy_engine.py"'] * 2 + ['title="many_traces.py"']
    outputs = [b.body for b in bs if b.lang == "text"]
    assert outputs[0].startswith("ILLEGAL")  # the bug is found
    assert outputs[2].startswith("OK")  # and the fix conforms


@pytest.mark.skipif(sys.platform == "win32", reason="the tutorial's commands are bash")
@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.name)
def test_the_tutorial_runs_as_written(page: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        # the interpreter running the tests runs the commands (its `kvmodel`, its `python`)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "100",
    }
    last = ""
    for b in blocks(page.read_text(encoding="utf-8")):
        if b.lang == "python":
            name = re.fullmatch(r'title="([^"]+)"', b.info)
            assert name is not None, f"a python block without a file name: {b.info!r}"
            (tmp_path / name.group(1)).write_text(b.body, encoding="utf-8")
        elif b.lang == "bash":
            last = ""
            for cmd in commands(b.body):
                if cmd.startswith("pip install"):
                    continue  # the suite runs in the installed project
                out = subprocess.run(
                    ["bash", "-c", cmd],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=False,
                )
                assert out.returncode == b.exit, f"{cmd}\nexit {out.returncode}\n{out.stderr}"
                last += out.stdout
        elif b.lang == "text":
            assert shows(b.body, last), f"the page shows:\n{b.body}\nthe command printed:\n{last}"
