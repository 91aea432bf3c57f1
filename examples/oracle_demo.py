"""Check another implementation against the reference: a hand-written prefix cache with a bug.

`TinyPrefixCache` is what a team might write to mimic vLLM's prefix cache: one pool of blocks,
lookup until the first miss, evict the least recently used block. Its planted bug: on a tie in
recency (blocks of one request) it evicts the *shallowest* block first -- the root of a chain,
orphaning everything below it. Lockstep testing against `vllm-prefix` finds a trace where that
matters, shrinks it, and prints the divergence. Run: python examples/oracle_demo.py
"""

from __future__ import annotations

from typing import Any

from checkers.conformance.lockstep import differential
from checkers.conformance.vllm_pool import vllm_comparable
from checkers.search.strategies import agent_traces
from kvmodel import EngineConfig, TierConfig
from kvmodel.ids import TierName
from kvmodel.io.trace import Infer, Op
from kvmodel.logical import Sequences


class TinyPrefixCache:
    def __init__(self, config: EngineConfig) -> None:
        self.capacity = config.tiers[0].blocks
        self.seq = Sequences(config.block_size)
        self.used: dict[str, tuple[int, int]] = {}  # key -> (last request, depth)

    def apply(self, i: int, op: Op) -> list[dict[str, Any]]:
        out = self.infer(i, op) if isinstance(op, Infer) else []
        self.seq.apply(op)  # the context's messages after the op (outputs, edits, strips)
        return out

    def infer(self, i: int, op: Infer) -> list[dict[str, Any]]:
        blocks = self.seq.blocks(op.ctx, op.output)
        n_prompt = sum(m.tokens for m in self.seq.messages(op.ctx)) // self.seq.block_size
        hits = 0
        while hits < n_prompt and blocks[hits].key in self.used:
            hits += 1
        keep = {b.key for b in blocks[:hits]}
        need = len(blocks) - hits
        if need > self.capacity - len(keep):
            return [{"kind": "reject"}]
        out: list[dict[str, Any]] = [{"kind": "hit", "key": b.key} for b in blocks[:hits]]
        while len(self.used) + need > self.capacity:
            victims = [k for k in self.used if k not in keep]
            # BUG: ties in recency go to the shallowest block (vLLM takes the deepest)
            k = min(victims, key=lambda k: self.used[k])
            del self.used[k]
            out.append({"kind": "evict", "key": k})
        for d, b in enumerate(blocks[hits:], start=hits):
            out.append({"kind": "alloc", "key": b.key, "tier": "hbm", "depth": d})
        for b in blocks:
            if b.key is not None:  # the partial tail block is freed after its request
                self.used[b.key] = (i, b.depth)
        return out


if __name__ == "__main__":
    config = EngineConfig(4, (TierConfig(TierName("hbm"), 6),))
    result = differential(
        TinyPrefixCache, "vllm-prefix", config, traces=agent_traces().map(vllm_comparable)
    )
    print(result.render())
