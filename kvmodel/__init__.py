"""kvmodel: an executable reference model of lifecycle-aware KV-cache management for LLM agents.

The contract is ``spec/``; the modules here implement it. The names in ``__all__`` are the public
API, the one namespace a user imports from for the common tasks:

- load and replay a trace: :func:`load_trace`, :func:`replay`, :class:`EngineConfig`;
- write a policy: :class:`BasePolicy`, :class:`ModelView`, :class:`RankTerm`, ...;
- check a policy: :func:`check_policies` (``kvmodel check``), :func:`prove` (``kvmodel prove``),
  :func:`check_ops` (one trace, every invariant judged op by op: ``kvmodel replay --check``);
- judge another implementation's log: :func:`load_log`, :func:`check_log` (``kvmodel oracle``).

Semantic versioning (CHANGELOG.md) covers these names, the command line and the file formats
(which carry their own versions: spec/trace-format.md). Everything else (``kvmodel.engine``'s
internals, ``checkers.search``'s machinery) may change in any release.

The checkers' names (:func:`check_policies`, :func:`check_log`, :func:`prove`, ...) are loaded on
first use: importing ``kvmodel`` never imports ``checkers`` (the model sits below them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from kvmodel.config import EngineConfig, default_config, load_config
from kvmodel.engine import Engine
from kvmodel.errors import (
    ConfigError,
    IllegalTransitionError,
    InternalError,
    KVModelError,
    PolicyError,
    PolicyNotFoundError,
    TraceError,
)
from kvmodel.io.trace import Trace, dump_trace, load_trace, parse_trace_lines
from kvmodel.lifecycle import BlockClass, Event, MsgState
from kvmodel.memory import ModelShape, TierConfig
from kvmodel.messages import AgentKind, Message, MessageKind, Role, SpawnRecord
from kvmodel.policy import (
    BasePolicy,
    Placement,
    Policy,
    RankTerm,
    Reclaim,
    claimed_invariants,
    resolve_policy,
)
from kvmodel.replay import ReplayResult, Summary, replay
from kvmodel.view import BlockInfo, ContextInfo, ModelView, NewBlock, TierInfo

if TYPE_CHECKING:
    from checkers.conformance.oracle import check_log
    from checkers.conformance.oracle_log import Divergence, LogStream, OracleVerdict, load_log
    from checkers.invariants import INVARIANTS, Monitor, Violation
    from checkers.invariants.replay import CheckRun, check_ops
    from checkers.search.report import PolicyReport, check_policies
    from checkers.symbolic.bmc import Answer, prove

__version__ = "0.7.0"

# name -> the checkers module that defines it (read on first use; see the module docstring)
_FROM_CHECKERS = {
    "Answer": "checkers.symbolic.bmc",
    "CheckRun": "checkers.invariants.replay",
    "Divergence": "checkers.conformance.oracle_log",
    "INVARIANTS": "checkers.invariants",
    "LogStream": "checkers.conformance.oracle_log",
    "Monitor": "checkers.invariants",
    "OracleVerdict": "checkers.conformance.oracle_log",
    "PolicyReport": "checkers.search.report",
    "Violation": "checkers.invariants",
    "check_log": "checkers.conformance.oracle",
    "check_ops": "checkers.invariants.replay",
    "check_policies": "checkers.search.report",
    "load_log": "checkers.conformance.oracle_log",
    "prove": "checkers.symbolic.bmc",
}


if not TYPE_CHECKING:  # a type checker reads the imports above (and flags a misspelt name)

    def __getattr__(name: str) -> object:
        module = _FROM_CHECKERS.get(name)
        if module is None:
            raise AttributeError(f"module 'kvmodel' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # once loaded, an ordinary attribute
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM_CHECKERS))


__all__ = [
    "INVARIANTS",
    "AgentKind",
    "Answer",
    "BasePolicy",
    "BlockClass",
    "BlockInfo",
    "CheckRun",
    "ConfigError",
    "ContextInfo",
    "Divergence",
    "Engine",
    "EngineConfig",
    "Event",
    "IllegalTransitionError",
    "InternalError",
    "KVModelError",
    "LogStream",
    "Message",
    "MessageKind",
    "ModelShape",
    "ModelView",
    "Monitor",
    "MsgState",
    "NewBlock",
    "OracleVerdict",
    "Placement",
    "Policy",
    "PolicyError",
    "PolicyNotFoundError",
    "PolicyReport",
    "RankTerm",
    "Reclaim",
    "ReplayResult",
    "Role",
    "SpawnRecord",
    "Summary",
    "TierConfig",
    "TierInfo",
    "Trace",
    "TraceError",
    "Violation",
    "check_log",
    "check_ops",
    "check_policies",
    "claimed_invariants",
    "default_config",
    "dump_trace",
    "load_config",
    "load_log",
    "load_trace",
    "parse_trace_lines",
    "prove",
    "replay",
    "resolve_policy",
]
