"""A state of an engine run up to strictly increasing re-timing: the key on which
:mod:`checkers.symbolic.reach` merges states (spec invariants.md §Reach).

:func:`state_key` flattens everything the future can read -- the fragment's harness, the
engine's contexts, its residency store (resident blocks, index, dead set, holders), free lists
and pins, the monitor's memory and its contract model, and the policy's own attributes -- into
one tuple, with every time stamp (float) replaced by its rank among the state's time stamps and
every op stamp by its rank among the op stamps; the policy's floats are kept as they are.
:data:`_SKIP` names, per class, what is left out and why.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Protocol

import attrs

from checkers.invariants import Monitor
from kvmodel.engine import Engine

__all__ = ["state_key"]


class _T(float):
    """A time stamp inside a key before its rank is taken."""


class _O(int):
    """An op stamp inside a key before its rank is taken."""


#: attributes the key leaves out, by class name: history the future never reads (logs,
#: statistics, counters of past work, the violations found so far), per-op scratch the next op
#: resets, back references, constants of the configuration (the same in every state; a float
#: among them would otherwise be ranked with the time stamps), and the engine's caches (derived
#: state; see the module docstring)
_SKIP: dict[str, frozenset[str]] = {
    "Engine": frozenset(
        # blocks, index and dead are the residency store's, read there
        {"log", "stats", "view", "probe", "policy", "config", "victims", "blocks", "index", "dead"}
    ),
    # contexts and memory are the engine's (read there), marks is the victim source (a cache)
    "Residency": frozenset({"contexts", "memory", "marks", "_tick"}),
    "Memory": frozenset({"writes", "tiers", "names", "_by_name", "_end", "_starts"}),
    "ResidentBlock": frozenset({"version"}),
    # the pin depth and first reasoning message are caches of the entries and pins (None:
    # not computed yet), filled or not depending on which checks read them
    "Context": frozenset({"version", "_pin_depth", "_first_reasoning"}),
    "Monitor": frozenset(
        {
            "engine",
            "violations",
            "op_index",
            "_seen",
            "_writes",
            "_pending",
            "_evict_tiers",
            "endurance_years",
            "active",
            # when the whole state was last compared, and how often: the comparison's schedule,
            # like op_index (contract.whole_state_due); a comparison reads the state, never
            # changes it
            "_last_whole",
            "compared_whole",
            # the ops applied: read only to judge a refusal, by the contract model, from the
            # logical state they led to (which the key holds)
            "_history",
            # per-op scratch (the blocks that can be Dead, found once per op) and what the
            # policy's declarations decide once (which parametric checks apply)
            "_maybe_dead_at",
            "_maybe_dead_set",
            "_parametric",
            "_inductive",
        }
    ),
    # rank: the policy's declared rank, a constant (its floats are no time stamps); pool: the
    # candidates kept from an earlier inference, a cache of the state (stamped)
    "Shadow": frozenset(
        {"problems", "evictions", "last_infer", "last_prompt_keys", "rank", "pool"}
    ),
    # serial: the order the run created its contexts in, which the stamps of kept terms read
    "ShadowContext": frozenset({"serial"}),
    "Packer": frozenset({"_keys"}),
}

#: attributes that hold op indices (compared only), or dicts of them: ranked like time stamps
_OP_STAMPS = frozenset({"touch_op", "last_infer_op", "last_op", "op_index"})


def _walk(x: object, out: list[object], stack: set[int], times: set[float], ops: set[int]) -> None:
    """Flatten ``x`` into ``out`` (a canonical token stream), collecting stamps."""
    if x is None or isinstance(x, bool | str | bytes):
        out.append(x)
        return
    if isinstance(x, float):
        times.add(x)
        out.append(_T(x))
        return
    if isinstance(x, int):
        out.append(x)
        return
    if isinstance(x, enum.Enum):
        out.append(f"{type(x).__name__}.{x.name}")
        return
    if id(x) in stack:
        out.append("<cycle>")
        return
    stack.add(id(x))
    try:
        if isinstance(x, dict):
            items = sorted(x.items(), key=lambda kv: repr(kv[0]))
            out.append(("dict", len(items)))
            for k, v in items:
                _walk(k, out, stack, times, ops)
                _walk(v, out, stack, times, ops)
        elif isinstance(x, set | frozenset):
            out.append(("set", len(x)))
            for v in sorted(x, key=repr):
                _walk(v, out, stack, times, ops)
        elif isinstance(x, list | tuple | deque):
            out.append((type(x).__name__, len(x)))
            for v in x:
                _walk(v, out, stack, times, ops)
        else:
            _walk_object(x, out, stack, times, ops)
    finally:
        stack.discard(id(x))


_CLASS_INFO: dict[type, tuple[list[str] | None, frozenset[str]]] = {}


def _fields_of(cls: type, x: object) -> list[str]:
    """The attribute names of ``x`` the key reads (class-level facts cached per class)."""
    info = _CLASS_INFO.get(cls)
    if info is None:
        skip = frozenset().union(*(_SKIP.get(k.__name__, frozenset()) for k in cls.__mro__))
        static: list[str] | None = None
        if attrs.has(cls):
            static = [a.name for a in attrs.fields(cls)]
        elif not hasattr(x, "__dict__"):
            static = []
            for k in reversed(cls.__mro__):
                static += [s for s in getattr(k, "__slots__", ()) if s not in static]
        if static is not None:
            static = [n for n in static if n not in skip and not n.startswith("__")]
        info = _CLASS_INFO[cls] = (static, skip)
    static, skip = info
    if static is not None:
        return static
    return [n for n in sorted(vars(x)) if n not in skip and not n.startswith("__")]


def _walk_object(
    x: object, out: list[object], stack: set[int], times: set[float], ops: set[int]
) -> None:
    cls = type(x)
    names = _fields_of(cls, x)
    if not names and callable(x):
        out.append(("fn", getattr(x, "__qualname__", repr(x))))
        return
    out.append(("obj", cls.__qualname__))
    for n in names:
        v = getattr(x, n, None)
        out.append(n)
        if n in _OP_STAMPS and isinstance(v, int) and not isinstance(v, bool):
            ops.add(v)
            out.append(_O(v))
        elif n in _OP_STAMPS and isinstance(v, dict):  # op stamps by key (the contract's)
            items = sorted(v.items(), key=lambda kv: repr(kv[0]))
            out.append(("dict", len(items)))
            for k, o in items:
                _walk(k, out, stack, times, ops)
                ops.add(o)
                out.append(_O(o))
        else:
            _walk(v, out, stack, times, ops)


class _Keyed(Protocol):
    def key(self) -> tuple[object, ...]: ...


def state_key(engine: Engine, monitor: Monitor | None, harness: _Keyed) -> tuple[object, ...]:
    """The state up to strictly increasing re-timing (see the module docstring); ``harness``
    is the fragment's harness state (what actions are enabled next)."""
    out: list[object] = [harness.key()]
    times: set[float] = set()
    ops: set[int] = set()
    stack: set[int] = set()
    _walk(engine, out, stack, times, ops)
    if monitor is not None:
        _walk(monitor, out, stack, times, ops)
    # the policy's own state, its floats kept as they are (a policy may measure with them)
    pol: list[object] = []
    _walk(engine.policy, pol, stack, set(), set())
    t_rank = {t: i for i, t in enumerate(sorted(times))}
    o_rank = {o: i for i, o in enumerate(sorted(ops))}
    key = [
        ("t", t_rank[v]) if isinstance(v, _T) else ("o", o_rank[v]) if isinstance(v, _O) else v
        for v in out
    ]
    return (*key, *(float(v) if isinstance(v, _T) else v for v in pol))
