"""Packed KV blocks and hash-chain keys (spec §blocks B1-B6).

Tokens are packed into fixed-size blocks across message boundaries, as paged engines do. A token is
named by (content key of its message, offset in that message), so a block's content is the list of
token ranges it covers::

    messages   | sys (20)             | user (7)  | obs (30)                          |
    tokens     0                    20 21       27                                 57
    blocks     [ b0: sys[0:16] ][ b1: sys[16:20] user[0:7] obs[0:5] ][ b2 ... ][ b3: obs[21:30] ]
                                                                              ^ partial tail

A full block's key is ``H(parent key, content)``; the first block's parent is the root. Two
blocks with one key therefore cover the same tokens *and* the same prefix, which is exactly the
condition under which their KV is identical (spec B3). The partial tail block has no key: it is
never reusable (spec B4).
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Sequence

import attrs

from kvmodel.ids import BlockKey, ContentKey
from kvmodel.messages import Message, MessageKind

__all__ = ["DEFAULT_BLOCK_SIZE", "ROOT_KEY", "BlockSpec", "Segment", "chain_key", "pack"]

DEFAULT_BLOCK_SIZE = 16
ROOT_KEY = BlockKey("root")


@attrs.frozen(slots=True)
class Segment:
    """Tokens ``[start, stop)`` of the message whose content key is ``key``."""

    key: ContentKey
    start: int
    stop: int


@attrs.frozen(slots=True)
class BlockSpec:
    """One block of a context's packed sequence, before or after it is materialized.

    ``uids`` are the context-local instance ids of the messages the block covers (the lifecycle
    state of a block in a context is aggregated over them, spec L5.1); ``key`` is ``None`` exactly
    for a partial block.
    """

    key: BlockKey | None
    parent: BlockKey
    depth: int
    segments: tuple[Segment, ...]
    uids: tuple[int, ...]
    kinds: frozenset[MessageKind]
    tokens: int

    @property
    def full(self) -> bool:
        return self.key is not None


def chain_key(parent: BlockKey, segments: Sequence[Segment]) -> BlockKey:
    """``H(parent, content)`` with an unambiguous length-prefixed encoding (spec B3)."""
    h = hashlib.blake2b(digest_size=12)
    p = parent.encode()
    h.update(len(p).to_bytes(4, "little"))
    h.update(p)
    for s in segments:
        k = s.key.encode()
        h.update(len(k).to_bytes(4, "little"))
        h.update(k)
        h.update(s.start.to_bytes(8, "little"))
        h.update(s.stop.to_bytes(8, "little"))
    return BlockKey(h.hexdigest())


def pack(
    messages: Sequence[tuple[Message, int]],
    starts: Sequence[int],
    *,
    first_block: int,
    parent: BlockKey,
    block_size: int,
) -> list[BlockSpec]:
    """Blocks ``first_block, first_block+1, ...`` of a packed sequence, the tail possibly partial.

    ``messages`` pairs each message with its context-local uid; ``starts[i]`` is the token offset
    of message ``i``. ``parent`` is the key of block ``first_block - 1`` (``ROOT_KEY`` for 0). The
    work is proportional to the blocks produced plus the messages they cover (spec B6).
    """
    if not messages:
        return []
    total = starts[-1] + messages[-1][0].tokens
    offset = first_block * block_size
    if offset >= total:
        return []
    i = bisect_right(starts, offset) - 1
    out: list[BlockSpec] = []
    depth = first_block
    while offset < total:
        end = min(offset + block_size, total)
        segs: list[Segment] = []
        uids: list[int] = []
        kinds: set[MessageKind] = set()
        pos = offset
        while pos < end:
            m, uid = messages[i]
            m_start = starts[i]
            m_stop = m_start + m.tokens
            take_to = min(end, m_stop)
            segs.append(Segment(m.content_key, pos - m_start, take_to - m_start))
            uids.append(uid)
            kinds.add(m.kind)
            pos = take_to
            if pos == m_stop:
                i += 1
        full = end - offset == block_size
        key = chain_key(parent, segs) if full else None
        out.append(
            BlockSpec(key, parent, depth, tuple(segs), tuple(uids), frozenset(kinds), end - offset)
        )
        if key is not None:
            parent = key
        offset = end
        depth += 1
    return out
