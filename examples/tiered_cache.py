"""Check a tiered KV cache of your own: a GPU prefix cache over a CPU copy tier, on the kit.

`TwoTierCache` is what a team might write to put a host-memory tier under its prefix cache, the
way vLLM's offloading connector does: every block a request computes is copied to the CPU tier
(write-through), a GPU miss that the CPU tier holds is loaded back, and each tier evicts its
oldest request's blocks first, deepest first. `TwoTierAdapter` is all it takes to check it: the
three hooks of the top tier and the four of the tier below (checkers.conformance.tiered), about
forty lines. Lockstep testing against `vllm-offload` (whose copy rules are vLLM's, spec
movement.md MV13) finds no divergence in the correct cache over 200 random traces that load,
store and drop in both tiers, and the search finds the planted bug -- a store that may evict
copies of the very request it is storing -- with a short trace.
Run: python examples/tiered_cache.py
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from checkers.conformance.adapters import Eviction, Request
from checkers.conformance.lockstep import LockstepResult, differential, run_lockstep
from checkers.conformance.oracle import OracleVerdict
from checkers.conformance.tiered import Stored, TieredCacheAdapter
from checkers.conformance.vllm_pool import vllm_comparable
from checkers.search.strategies import agent_traces
from kvmodel import EngineConfig, TierConfig
from kvmodel.ids import BlockKey, TierName
from kvmodel.workloads import RandomParams, random_trace


class TwoTierCache:
    """The cache under test: two pools of block keys, each by (last request, -depth)."""

    def __init__(self, gpu: int, cpu: int, *, protect_store: bool = True) -> None:
        self.gpu_size, self.cpu_size, self.protect = gpu, cpu, protect_store
        self.gpu: dict[BlockKey, tuple[int, int]] = {}  # key -> (last request, -depth)
        self.cpu: dict[BlockKey, tuple[int, int]] = {}
        self.request = 0

    def allocate(self, keep: set[BlockKey], need: int) -> list[BlockKey] | None:
        """Room on the GPU for ``need`` blocks, never evicting ``keep``: the victims."""
        free, evictable = self.gpu_size - len(self.gpu), len(self.gpu.keys() - keep)
        if need > free + evictable:
            return None
        victims = sorted(self.gpu.keys() - keep, key=self.gpu.__getitem__)[: max(0, need - free)]
        for k in victims:
            del self.gpu[k]
        return victims

    def store(self, keys: Sequence[BlockKey], first: int) -> tuple[list[str], list[BlockKey]]:
        """Copy ``keys`` (from depth ``first``) to the CPU at once: what became of each, and
        the copies dropped; all of them or none."""
        new = [k for k in keys if k not in self.cpu]
        keep = set(keys) if self.protect else set()
        short = len(self.cpu) + len(new) - self.cpu_size
        fits = short <= len(self.cpu.keys() - keep)
        dropped = sorted(self.cpu.keys() - keep, key=self.cpu.__getitem__)[: max(0, short)]
        for k in dropped if fits else ():
            del self.cpu[k]
        held = [k in self.cpu for k in keys]
        results = ["held" if h else "written" if fits else "no-room" for h in held]
        self.touch([k for k, h in zip(keys, held, strict=True) if h or fits], first)
        return results, dropped if fits else []

    def touch(self, keys: Sequence[BlockKey], first: int) -> None:
        """``keys`` (from depth ``first``) used by this request: its head the most recent."""
        for d, k in enumerate(keys, first):
            self.cpu[k] = (self.request, -d)


class TwoTierAdapter(TieredCacheAdapter):
    """The seven hooks, on the kit: ``TwoTierCache`` speaks for itself; this only translates."""

    protect_store = True

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.cache = TwoTierCache(
            config.tiers[0].blocks, config.tiers[1].blocks, protect_store=self.protect_store
        )

    def lookup(self, r: Request) -> list[BlockKey]:
        self.cache.request += 1
        hits = []
        for key in r.keys[: r.prompt_blocks]:
            if key is None or key not in self.cache.gpu:
                break
            hits.append(key)
        return hits  # (a page is the key itself here)

    def make_room(self, r: Request, hits: int, need: int) -> list[Eviction] | None:
        victims = self.cache.allocate({k for k in r.keys[:hits] if k is not None}, need)
        return None if victims is None else [Eviction(k) for k in victims]

    def insert(self, r: Request, hits: int) -> list[BlockKey | None]:
        for d, key in enumerate(r.keys):
            if key is not None:  # (the partial tail block is freed with the request)
                self.cache.gpu[key] = (self.cache.request, -d)
        return list(r.keys[hits : r.full_blocks])

    def lower_lookup(self, r: Request, start: int) -> int:
        n = 0
        while start + n < r.prompt_blocks and r.keys[start + n] in self.cache.cpu:
            n += 1
        return n

    def load(self, r: Request, start: int, n: int) -> None:
        # the copies stay on the CPU, read now (the GPU blocks are written by insert)
        self.cache.touch([k for k in r.keys[start : start + n] if k is not None], start)

    def store(self, r: Request, hits: int, loads: int) -> Stored:
        first = hits + loads if loads else 0  # (the whole request unless it loaded)
        keys = [k for k in r.keys[first : r.full_blocks] if k is not None]
        results, dropped = self.cache.store(keys, first)
        return Stored(first, results, keys, dropped)


class BuggyAdapter(TwoTierAdapter):
    protect_store = False  # the planted bug: a store may evict the request's own copies


def main() -> None:
    config = EngineConfig(
        4, (TierConfig(TierName("gpu"), 8), TierConfig(TierName("cpu"), 12, copies_only=True))
    )
    # the correct cache, on 200 random traces with pressure in both tiers: no divergence
    seen: Counter[str] = Counter()
    verdicts = Counter(
        run_lockstep(
            vllm_comparable(random_trace(RandomParams(seed=s, ops=80, max_context_tokens=28))),
            TwoTierAdapter, "vllm-offload", config, seen,
        ).verdict
        for s in range(200)
    )  # fmt: skip
    ok = LockstepResult(OracleVerdict("OK"), coverage=seen)
    print(f"TwoTierAdapter: {dict(verdicts)} over 200 traces\n{ok.coverage_line()}\n")
    # the planted bug, found by the search and shrunk
    small = EngineConfig(
        4, (TierConfig(TierName("gpu"), 8), TierConfig(TierName("cpu"), 6, copies_only=True))
    )
    traces = agent_traces().map(vllm_comparable)
    result = differential(BuggyAdapter, "vllm-offload", small, traces=traces, max_examples=300)
    print(f"BuggyAdapter: {result.render()}")


if __name__ == "__main__":
    main()
