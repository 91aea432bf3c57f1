"""networkx views of the model for analysis (spec P2: the fork DAG and the KV prefix tree).

* :func:`fork_dag` -- contexts as nodes (session, agent, open), derivation edges with ``kind`` in
  ``fork | spawn | compaction | return``. It is a DAG: every edge points from an older context to
  a newer one or, for ``return``, from a child to the parent it returns into -- a return edge is
  the reverse of a spawn edge, so the *derivation* DAG is the graph without ``return`` edges.
* :func:`prefix_tree` -- resident full blocks as nodes (by key), an edge from each block's parent
  key; the virtual ``root`` is the parent of every depth-0 block. Shared prefixes (forks, common
  system prompts) appear as shared ancestors; an orphan is a node whose parent is not resident.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import networkx as nx

from kvmodel.blocks import ROOT_KEY
from kvmodel.contexts import Context
from kvmodel.ids import BlockId, BlockKey, ContextId
from kvmodel.view import ModelView

__all__ = ["GraphHost", "fork_dag", "prefix_tree"]


class GraphHost(Protocol):
    """What the graphs read of an engine."""

    @property
    def contexts(self) -> Mapping[ContextId, Context]: ...

    @property
    def edges(self) -> Sequence[tuple[ContextId, ContextId, str]]: ...

    @property
    def view(self) -> ModelView: ...

    def block_parent(self, block: BlockId) -> BlockKey: ...


def fork_dag(engine: GraphHost) -> Any:
    g = nx.DiGraph()
    for cid, c in engine.contexts.items():
        g.add_node(cid, session=c.session, agent=c.agent.value, open=c.is_open, one_shot=c.one_shot)
    for src, dst, kind in engine.edges:
        g.add_edge(src, dst, kind=kind)
    return g


def prefix_tree(engine: GraphHost) -> Any:
    g = nx.DiGraph()
    g.add_node(ROOT_KEY, resident=False, depth=-1)
    for bid in engine.view.resident():
        b = engine.view.block(bid)
        if b.key is None or not b.indexed:
            continue
        g.add_node(b.key, block=bid, tier=b.tier, depth=b.depth, state=b.state.value, resident=True)
        g.add_edge(engine.block_parent(bid), b.key)
    return g
