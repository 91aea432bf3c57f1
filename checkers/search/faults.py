"""The fault sweep's subjects: policies and engines that raise, refuse or crash mid-run.

"Never lose a finding" is a promise about every command that judges (``check``, ``replay
--check``, the oracle, lockstep, ``prove``): whatever a policy or an engine under test raises, at
whatever hook, the report comes out, with what was seen before the failure. These are the
subjects that keep the promise tested (``tests/test_findings_kept.py``), written as an outside
author's code fails: not only ``ValueError`` but ``SystemExit`` (a stray ``sys.exit``),
``RecursionError``, ``StopIteration`` escaping an iterator, ``GeneratorExit`` and a bare
``BaseException`` subclass -- and a hang, which the checkers' op deadline ends -- each at the
third call of one hook, so that the run has already done something when it fails.

Each subject resolves by import path like any third-party policy, e.g.
``checkers.search.faults:RaisesSystemExitInPlace`` or
``checkers.search.faults:EngineRaisesSystemExit``; :data:`POLICY_FAULTS` and
:data:`ENGINE_FAULTS` list them. An interrupt (``KeyboardInterrupt``,
:class:`kvmodel.errors.HarnessInterrupt`) is not among them: it stops the checker on purpose.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import TraceError
from kvmodel.ids import BlockId
from kvmodel.io.trace import Op, Trace
from kvmodel.policy import Placement
from kvmodel.view import BlockInfo, ModelView, NewBlock
from policies.lru import LRU

__all__ = ["ENGINE_FAULTS", "FAULT_AT", "HANG", "HOOKS", "POLICY_FAULTS", "RAISES", "Escape"]


class Escape(BaseException):
    """A ``BaseException`` that is neither an ``Exception`` nor an interrupt."""


#: what the subjects raise, by name: every kind an ``except Exception`` would let through, and
#: the usual one
RAISES: Mapping[str, Callable[[], BaseException]] = MappingProxyType(
    {
        "ValueError": lambda: ValueError("planted fault"),
        "SystemExit": lambda: SystemExit(0),
        "RecursionError": lambda: RecursionError("planted fault"),
        "StopIteration": lambda: StopIteration(),
        "GeneratorExit": lambda: GeneratorExit(),
        "Escape": lambda: Escape("planted fault"),
    }
)
#: the kind that does not raise but never returns (the checkers' op deadline ends it)
HANG = "Hang"
#: the policy hooks a fault is planted in (``prepare`` makes the policy an offline one)
HOOKS = ("place", "eviction_order", "observe", "prepare")
#: the call of the hook (or the op of the engine) that raises: the run has done work before it
FAULT_AT = 3


def _fail(kind: str) -> None:
    if kind == HANG:
        time.sleep(3600.0)
    raise RAISES[kind]()


class _FaultyLRU(LRU):
    """LRU whose ``hook`` raises ``raises`` at its :data:`FAULT_AT`-th call."""

    hook: ClassVar[str] = ""
    raises: ClassVar[str] = ""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def _maybe(self, hook: str) -> None:
        if hook == self.hook:
            self.calls += 1
            if self.calls == (1 if hook == "prepare" else FAULT_AT):  # (one prepare a run)
                _fail(self.raises)

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        self._maybe("place")
        return super().place(view, block)

    def observe(self, view: ModelView, op: Op) -> None:
        self._maybe("observe")
        super().observe(view, op)


class _FaultyOrder(_FaultyLRU):
    """The eviction-order fault: an order of its own (the engine calls it at every eviction)."""

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        self._maybe("eviction_order")
        return [b.id for b in sorted(candidates, key=lambda b: (b.last_access, -b.depth, b.id))]


class _FaultyPrepare(_FaultyLRU):
    """The offline fault: ``prepare`` sees the whole trace first (and raises at its third)."""

    def prepare(self, trace: Trace, config: EngineConfig) -> None:
        self._maybe("prepare")


def _policy(hook: str, raises: str) -> type[_FaultyLRU]:
    base = {"eviction_order": _FaultyOrder, "prepare": _FaultyPrepare}.get(hook, _FaultyLRU)
    verb = "Hangs" if raises == HANG else f"Raises{raises}"
    name = f"{verb}In{''.join(p.title() for p in hook.split('_'))}"
    return type(name, (base,), {"name": f"faulty-{hook}-{raises}", "hook": hook, "raises": raises,
                                "__module__": __name__})  # fmt: skip


class _FaultyEngine(Engine):
    """An engine that raises ``raises`` (or, for ``refuses``, a ``TraceError`` as if the op
    were bad input) at its :data:`FAULT_AT`-th op."""

    raises: ClassVar[str] = ""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.ops_seen = 0

    def apply(self, op: Op) -> None:
        self.ops_seen += 1
        if self.ops_seen == FAULT_AT:
            if self.raises == "refuses":
                raise TraceError("planted fault: a valid op refused", field="ctx")
            _fail(self.raises)
        super().apply(op)


def _engine(raises: str) -> type[LRU]:
    name = {"refuses": "EngineRefuses", HANG: "EngineHangs"}.get(raises, f"EngineRaises{raises}")
    engine = type(f"_{name}", (_FaultyEngine,), {"raises": raises, "__module__": __name__})
    return type(name, (LRU,), {"name": f"faulty-engine-{raises}", "engine_class": engine,
                               "__module__": __name__})  # fmt: skip


#: every policy fault by import name: one per (hook, exception kind)
POLICY_FAULTS: Mapping[str, type[_FaultyLRU]] = MappingProxyType(
    {cls.__name__: cls for cls in (_policy(h, r) for h in HOOKS for r in (*RAISES, HANG))}
)
#: every engine fault by import name: one per exception kind, and a refusal of a valid op
ENGINE_FAULTS: Mapping[str, type[LRU]] = MappingProxyType(
    {cls.__name__: cls for cls in (_engine(r) for r in ("refuses", *RAISES, HANG))}
)
globals().update(POLICY_FAULTS)  # (importable by path: checkers.search.faults:Name)
globals().update(ENGINE_FAULTS)
# (isort's order, as every __all__: constants, classes, functions)
__all__ = sorted(
    [*__all__, *POLICY_FAULTS, *ENGINE_FAULTS],
    key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n),
)
