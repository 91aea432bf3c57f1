"""Check a radix-tree prefix cache against the reference with the adapter kit.

`RadixCache` is a small cache of the kind SGLang popularised, written for this example: token
pages in a radix tree, a node split where two prompts part ways, recency per node, and eviction
of the least recently used *leaf node* -- all its pages at once, however few are needed. The
adapter (`RadixAdapter`, the part a user writes) is three hooks on `checkers.conformance.adapters`.

Judged against `vllm-prefix` (LRU over blocks, deepest first), lockstep testing finds the two
ways this cache differs from the model, each a behaviour real engines have and the rank does not
fix: it frees whole nodes (more victims than needed), and a refused request's lookup still
stamps the nodes it matched as used. Each has an opt-in variant in the oracle, under which the
cache must still take exactly the victims the rank admits; with both, it conforms.
Run: python examples/radix_cache.py
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

from checkers.conformance.adapters import Eviction, PrefixCacheAdapter, Request, comparable
from checkers.conformance.lockstep import differential
from checkers.search.strategies import agent_traces
from checkers.search.walk import random_walks
from kvmodel import EngineConfig, TierConfig
from kvmodel.ids import BlockKey, TierName

Page = tuple[int, ...]


class Node:
    ids = itertools.count()

    def __init__(self, parent: Node | None, pages: list[Page], keys: list[BlockKey | None]) -> None:
        self.id, self.parent, self.pages, self.keys = next(Node.ids), parent, pages, keys
        self.children: dict[Page, Node] = {}
        self.last, self.locks = 0, 0


class RadixCache:
    def __init__(self, pages: int) -> None:
        self.root, self.free, self.clock = Node(None, [], []), pages, 0

    def match(self, pages: list[Page]) -> list[Node]:
        """The path of nodes holding the longest cached prefix (a node split where it ends)."""
        node, path, i = self.root, [], 0
        while i < len(pages) and (child := node.children.get(pages[i])) is not None:
            n = 0
            while n < len(child.pages) and i + n < len(pages) and child.pages[n] == pages[i + n]:
                n += 1
            if n < len(child.pages):  # split: the matched head becomes its own node
                head = Node(node, child.pages[:n], child.keys[:n])
                head.last, node.children[pages[i]] = child.last, head
                child.parent, child.pages, child.keys = head, child.pages[n:], child.keys[n:]
                head.children[child.pages[0]] = child
                child = head
            path.append(child)
            node, i = child, i + n
        return path

    def evictable(self) -> int:
        stack, n = [self.root], 0
        while stack:
            node = stack.pop()
            stack += node.children.values()
            n += len(node.pages) if node is not self.root and node.locks == 0 else 0
        return n

    def evict_leaf(self) -> Node:
        leaves, stack = [], [self.root]
        while stack:
            node = stack.pop()
            stack += node.children.values()
            if node is not self.root and not node.children and node.locks == 0:
                leaves.append(node)
        victim = min(leaves, key=lambda n: (n.last, n.id))
        assert victim.parent is not None
        del victim.parent.children[victim.pages[0]]
        self.free += len(victim.pages)
        return victim


class RadixAdapter(PrefixCacheAdapter):
    """The kit's hooks, for RadixCache."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.cache = RadixCache(self.capacity)
        self.path: list[Node] = []

    def pages(self, r: Request, n: int) -> list[Page]:
        return [r.block_tokens(d) for d in range(n)]

    def lookup(self, r: Request) -> int:
        self.cache.clock += 1
        self.path = self.cache.match(self.pages(r, r.prompt_blocks))
        for node in self.path:
            node.last, node.locks = self.cache.clock, node.locks + 1
        return sum(len(node.pages) for node in self.path)

    def make_room(self, r: Request, hits: int, need: int) -> list[Eviction] | None:
        if need > self.cache.free + self.cache.evictable():
            return None
        out = []
        while self.cache.free < need:
            node = self.cache.evict_leaf()
            out += [Eviction(k, group=node.id) for k in reversed(node.keys)]
        self.cache.free -= need
        return out

    def insert(self, r: Request, hits: int) -> None:
        parent = self.path[-1] if self.path else self.cache.root
        if r.full_blocks > hits:
            pages = self.pages(r, r.full_blocks)[hits:]
            node = Node(parent, pages, list(r.keys[hits : r.full_blocks]))
            node.last, parent.children[pages[0]] = self.cache.clock, node
        self.cache.free += len(r.keys) - r.full_blocks  # the partial tail page is not kept
        self.refuse(r, hits)

    def refuse(self, r: Request, hits: int) -> None:
        for node in self.path:
            node.locks -= 1


if __name__ == "__main__":
    config = EngineConfig(4, (TierConfig(TierName("gpu"), 12),))
    traces = st.one_of(agent_traces(20), random_walks(80)).map(comparable)
    for allow in ((), ("extra-victims",), ("extra-victims", "refused-lookup-refreshes")):
        r = differential(
            RadixAdapter, "vllm-prefix", config, max_examples=200, traces=traces, allow=allow
        )
        print(f"allow {', '.join(allow) or 'nothing'}:")
        print("  " + r.verdict.render().splitlines()[0])
    print("  " + r.coverage_line())
