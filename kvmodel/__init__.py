"""kvmodel: an executable reference model of lifecycle-aware KV-cache management for LLM agents.

The contract is ``spec/``; the modules here implement it. The names below are the public API.
"""

from __future__ import annotations

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
from kvmodel.policy import BasePolicy, Placement, Policy, RankTerm, Reclaim, resolve_policy
from kvmodel.replay import ReplayResult, Summary, replay
from kvmodel.view import BlockInfo, ContextInfo, ModelView, NewBlock, TierInfo

__version__ = "0.1.0"

__all__ = [
    "AgentKind",
    "BasePolicy",
    "BlockClass",
    "BlockInfo",
    "ConfigError",
    "ContextInfo",
    "Engine",
    "EngineConfig",
    "Event",
    "IllegalTransitionError",
    "InternalError",
    "KVModelError",
    "Message",
    "MessageKind",
    "ModelShape",
    "ModelView",
    "MsgState",
    "NewBlock",
    "Placement",
    "Policy",
    "PolicyError",
    "PolicyNotFoundError",
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
    "default_config",
    "dump_trace",
    "load_config",
    "load_trace",
    "parse_trace_lines",
    "replay",
    "resolve_policy",
]
