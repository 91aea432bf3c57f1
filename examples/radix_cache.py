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
The adapter's pages are the cache's physical page ids: the kit names each hit by the block
stored in the page the cache returned, so a wrong page would be seen. `SGLangLikeAdapter` stamps
a node before splitting it, as SGLang does (variant `split-refreshes-tail`, spec/invariants.md).
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
from kvmodel.ids import TierName

Tokens = tuple[int, ...]


class Node:
    ids = itertools.count()

    def __init__(self, parent: Node | None, pages: list[Tokens], values: list[int]) -> None:
        #: a node holds token pages and, for each, the physical page it lives in
        self.id, self.parent, self.pages, self.values = next(Node.ids), parent, pages, values
        self.children: dict[Tokens, Node] = {}
        self.last, self.locks = 0, 0


class RadixCache:
    """``stamp_before_split``: stamp a matched node before splitting it, as SGLang's
    ``_match_prefix_helper`` does, so the cut-off tail is refreshed too (variant
    ``split-refreshes-tail``); by default the head inherits the node's recency and is stamped
    as part of the matched path, and the tail keeps its own."""

    def __init__(self, pages: int, *, stamp_before_split: bool = False) -> None:
        self.root, self.free, self.clock = Node(None, [], []), list(range(pages)), 0
        self.stamp_before_split = stamp_before_split

    def match(self, pages: list[Tokens]) -> tuple[list[Node], Node | None]:
        """The path of nodes holding the longest cached prefix (a node split where it ends),
        and the split-off tail if a node was split."""
        node, path, i, tail = self.root, [], 0, None
        while i < len(pages) and (child := node.children.get(pages[i])) is not None:
            if self.stamp_before_split:
                child.last = self.clock
            n = 0
            while n < len(child.pages) and i + n < len(pages) and child.pages[n] == pages[i + n]:
                n += 1
            if n < len(child.pages):  # split: the matched head becomes its own node
                head = Node(node, child.pages[:n], child.values[:n])
                head.last, node.children[pages[i]] = child.last, head
                child.parent, child.pages, child.values = head, child.pages[n:], child.values[n:]
                head.children[child.pages[0]] = child
                child, tail = head, child
            path.append(child)
            node, i = child, i + n
        return path, tail

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
        self.free += victim.values
        return victim


class RadixAdapter(PrefixCacheAdapter):
    """The kit's hooks, for RadixCache: pages are its physical page ids."""

    stamp_before_split = False

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.cache = RadixCache(self.capacity, stamp_before_split=self.stamp_before_split)
        self.path: list[Node] = []
        self.new: list[int] = []

    def tokens(self, r: Request, n: int) -> list[Tokens]:
        return [r.block_tokens(d) for d in range(n)]

    def lookup(self, r: Request) -> list[int]:
        self.cache.clock += 1
        self.path, tail = self.cache.match(self.tokens(r, r.prompt_blocks))
        for node in self.path:
            node.last, node.locks = self.cache.clock, node.locks + 1
        if tail is not None and tail.last == self.cache.clock:
            self.touched = list(tail.values)  # refreshed, not returned
        return [v for node in self.path for v in node.values]

    def make_room(self, r: Request, hits: int, need: int) -> list[Eviction] | None:
        if need > len(self.cache.free) + self.cache.evictable():
            return None
        out = []
        while len(self.cache.free) < need:
            node = self.cache.evict_leaf()
            out += [Eviction(page=v, group=node.id) for v in reversed(node.values)]
        self.new = [self.cache.free.pop() for _ in range(need)]
        return out

    def insert(self, r: Request, hits: int) -> list[int | None]:
        parent = self.path[-1] if self.path else self.cache.root
        full = r.full_blocks - hits
        if full:
            node = Node(parent, self.tokens(r, r.full_blocks)[hits:], self.new[:full])
            node.last, parent.children[node.pages[0]] = self.cache.clock, node
        self.cache.free += self.new[full:]  # the partial tail page is not kept
        self.refuse(r, hits)
        return list(self.new[:full])

    def refuse(self, r: Request, hits: int) -> None:
        for node in self.path:
            node.locks -= 1


class SGLangLikeAdapter(RadixAdapter):
    """The same cache stamping before it splits (SGLang's order)."""

    stamp_before_split = True


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
