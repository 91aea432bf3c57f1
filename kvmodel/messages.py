"""Messages, agents and spawn records: the harness-side values (spec §primitives P1-P2)."""

from __future__ import annotations

import enum

import attrs

from kvmodel.ids import ContentKey, MessageId

__all__ = ["AgentKind", "Message", "MessageKind", "Role", "SpawnRecord"]


class Role(enum.Enum):
    """Who wrote a message, as chat APIs name it."""

    # members are singletons compared by identity: hash them by identity too (the C slot), not
    # by Enum's Python-level hash of the name -- sets and tables of them are on the hot path
    __hash__ = object.__hash__

    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class MessageKind(enum.Enum):
    """What a message is for; the vocabulary of spec P1.

    ``reasoning`` matters to the model itself (``turn_end`` strips it, spec P9); the other kinds are
    carried for policies (Lachesis classes segments by them) and for workload statistics.
    """

    # members are singletons compared by identity: hash them by identity too (the C slot), not
    # by Enum's Python-level hash of the name -- sets and tables of them are on the hot path
    __hash__ = object.__hash__

    SYSTEM = "system"
    USER = "user"
    INSTRUCTION = "instruction"
    REASONING = "reasoning"
    OUTPUT = "output"
    TOOL_CALL = "tool_call"
    OBSERVATION = "observation"
    SUMMARY = "summary"
    RESULT = "result"


class AgentKind(enum.Enum):
    """The role of the agent that owns a context (spec P2)."""

    # members are singletons compared by identity: hash them by identity too (the C slot), not
    # by Enum's Python-level hash of the name -- sets and tables of them are on the hot path
    __hash__ = object.__hash__

    MAIN = "main"
    LEAD = "lead"
    WORKER = "worker"
    REVIEWER = "reviewer"
    COMPACTOR = "compactor"


@attrs.frozen(slots=True)
class Message:
    """One message. Its KV identity is :attr:`content_key` (spec B1)."""

    id: MessageId
    role: Role
    kind: MessageKind
    tokens: int
    hash: str | None = None

    @property
    def content_key(self) -> ContentKey:
        """``hash`` if given, else ``id``: two messages with one key have identical KV."""
        return ContentKey(self.hash if self.hash is not None else self.id)


@attrs.frozen(slots=True)
class SpawnRecord:
    """What a parent handed a sub-agent when it spawned it (Lachesis's spawn signal)."""

    instruction: str
    tools: tuple[str, ...]
    context_tokens: int
    #: the harness's name for the kind of sub-agent (Claude Code's ``subagent_type``:
    #: ``Explore``, ``Plan``, ...); empty where the harness has none (spec R3)
    agent_type: str = ""
