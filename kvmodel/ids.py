"""Named identifier types (spec §blocks B1, §primitives P1).

Distinct ``NewType`` aliases let ``mypy --strict`` catch the classic mix-ups: a message id passed
where a content key is expected, a physical block id where a hash-chain key is expected.
"""

from __future__ import annotations

from typing import NewType

__all__ = [
    "BlockId",
    "BlockKey",
    "ContentKey",
    "ContextId",
    "MessageId",
    "SessionId",
    "TierName",
]

ContextId = NewType("ContextId", str)
SessionId = NewType("SessionId", str)
MessageId = NewType("MessageId", str)
#: A message's KV identity: its explicit ``hash`` if the trace gives one, else its id (spec B1).
ContentKey = NewType("ContentKey", str)
#: A full block's hash-chain key: hash(parent key, covered token ranges) (spec B3).
BlockKey = NewType("BlockKey", str)
#: A physical block slot in one tier's pool (spec M1). Unique across tiers.
BlockId = NewType("BlockId", int)
TierName = NewType("TierName", str)
