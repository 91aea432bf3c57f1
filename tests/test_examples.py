"""Every example runs and prints exactly its golden ``.out`` file (STYLE §12)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_example_output_is_golden(script: Path) -> None:
    golden = script.with_suffix(".out")
    r = subprocess.run(
        [sys.executable, script.name],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    assert golden.exists(), f"{golden.name} missing: run the example and save its output"
    assert r.stdout == golden.read_text()


def test_custom_policy_example_is_short() -> None:
    src = (EXAMPLES / "custom_policy.py").read_text().splitlines()
    assert len(src) < 40
