"""Importing this puts ``examples/`` on ``sys.path`` (tests that reuse an example's code)."""

import sys
from pathlib import Path

_EXAMPLES = str(Path(__file__).resolve().parents[1] / "examples")
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)
