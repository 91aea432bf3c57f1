"""The roof: the checkers' commands, plugged into ``kvmodel``'s command line through the
``kvmodel.commands`` entry-point group (pyproject.toml): ``check`` and ``replay --check``
(``check``), ``prove``, ``oracle`` and ``kv-events`` (``oracle``), ``view``, ``discover``.
Each imports the floor it drives when it runs, so ``kvmodel --help`` loads no solver."""

from __future__ import annotations

__all__: list[str] = []
