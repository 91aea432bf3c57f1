"""vLLM v1's prefix-cache eviction order, as a rank (spec/policies.md §vllm-prefix).

vLLM keeps free blocks in one queue. When a request finishes its blocks are released tail-first,
each cached (hashed) block to the back of the queue, each uncached (partial) block to the front;
allocation and eviction take from the front; a prefix hit takes a block out of the queue until its
request releases it again; a cached block is dropped only when its slot is reused.

In the model every inference is a request that is released when it ends, and partial blocks are
freed at once (spec B4), so the queue order of resident blocks is: by the index of the last
request that used the block (release order), oldest first; within one release, deepest first.
The difference from ``lru`` is the first key: release order counts requests, so two requests at
the same time ``t`` are still ordered, where ``lru`` would fall through to depth.
"""

from __future__ import annotations

from typing import ClassVar

from kvmodel.policy import STRUCTURAL_CLAIMS, BasePolicy, RankTerm

__all__ = ["VLLMPrefix"]


class VLLMPrefix(BasePolicy):
    name: ClassVar[str] = "vllm-prefix"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("last_op"),
        RankTerm("depth", descending=True),
    )
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS | frozenset(
        {
            "prefix-closed-residency",
        }
    )
