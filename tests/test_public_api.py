"""Every public module exports a sorted ``__all__`` naming exactly its public definitions."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

import checkers
import kvmodel
import policies


def _modules() -> list[types.ModuleType]:
    out = []
    for pkg in (kvmodel, policies, checkers):
        out.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not info.name.rsplit(".", 1)[-1].startswith("_"):
                out.append(importlib.import_module(info.name))
    return out


def _isort_key(name: str) -> tuple[int, str]:
    """CONSTANTS, then Classes, then functions, each alphabetical (ruff's RUF022 order)."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("mod", _modules(), ids=lambda m: m.__name__)
def test_all_is_sorted_and_complete(mod: types.ModuleType) -> None:
    names = getattr(mod, "__all__", None)
    if names is None:
        pytest.fail(f"{mod.__name__} has no __all__")
    assert names == sorted(names, key=_isort_key), f"{mod.__name__}.__all__ is not sorted"
    for n in names:
        assert hasattr(mod, n), f"{mod.__name__}.__all__ names missing {n}"
    if hasattr(mod, "__path__"):
        return  # packages re-export; their own definitions are checked in their modules
    defined = {
        n
        for n, v in vars(mod).items()
        if not n.startswith("_")
        and (inspect.isclass(v) or inspect.isfunction(v))
        and getattr(v, "__module__", None) == mod.__name__
    }
    assert defined <= set(names), f"{mod.__name__} defines public {defined - set(names)}"
