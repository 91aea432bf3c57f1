"""The small harness fragment the symbolic model and the exhaustive search share (spec
invariants.md §Proofs).

``C`` main-agent contexts, each opened at ``t = 0`` with one message of exactly one block; one
memory tier of ``K`` slots; ``E`` edits per context at most. An **action** is one trace op at
``t = depth``: ``infer`` (no output), ``edit`` (replace the message with fresh content),
``close``, ``pin``, ``unpin`` -- each naming a context. So every block is one context's one
message version, every inference writes at most one block, and eviction happens only when all
``K`` slots are full.

:func:`explore` is the exhaustive breadth-first search of the **executable** model over this
fragment (states deduplicated up to the order of their time stamps, which is all the future can
observe); it gives, per invariant, the shortest failing depth and a witness.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from checkers.invariants import Monitor
from checkers.invariants.monitor import READS_CONTRACT
from checkers.invariants.replay import engine_for
from checkers.search.coverage import Witnesses
from checkers.symbolic.copying import UncopyableError, copier
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.ids import ContextId, MessageId, SessionId, TierName
from kvmodel.io.trace import Close, Infer, Op, Open, Pin, Replace, Trace, TraceHeader, Unpin
from kvmodel.memory import TierConfig
from kvmodel.messages import AgentKind, Message, MessageKind, Role
from kvmodel.policy import Policy, resolve_policy

__all__ = [
    "ACTIONS",
    "FRAGMENT_INVARIANTS",
    "Action",
    "Fragment",
    "Harness",
    "Shortest",
    "explore",
]

ACTIONS = ("infer", "edit", "close", "pin", "unpin")

#: the invariants the fragment can exercise (the others need forks, sub-agents, temporaries,
#: chains longer than one block or several tiers)
FRAGMENT_INVARIANTS = (
    "accounting",
    "free-at-boundary",
    "no-live-eviction-before-dead-reclaim",
    "no-zombie-kv",
    "pinned-never-evicted",
    "state-priority-eviction",
    "suspended-mru",
)

_BS = 4


@attrs.frozen
class Action:
    kind: str  # one of ACTIONS
    ctx: int

    def __str__(self) -> str:
        return f"{self.kind}(c{self.ctx})"


@attrs.frozen
class Fragment:
    contexts: int = 3
    slots: int = 2
    edits: int = 1

    @property
    def config(self) -> EngineConfig:
        return EngineConfig(_BS, (TierConfig(TierName("hbm"), self.slots),))

    def prelude(self) -> list[Op]:
        ops: list[Op] = []
        for c in range(self.contexts):
            ctx = ContextId(f"c{c}")
            ops.append(Open(0.0, ctx, SessionId(f"s{c}"), AgentKind.MAIN))
        for c in range(self.contexts):
            ops.append(_append(c, 0))
        return ops

    def ops(self, actions: Sequence[Action]) -> list[Op]:
        """The trace ops of an action sequence (prelude first); actions must be enabled."""
        out = self.prelude()
        st = Harness(self)
        for d, a in enumerate(actions, start=1):
            out.append(st.op(a, float(d)))
        return out

    def trace(self, actions: Sequence[Action]) -> Trace:
        return Trace(TraceHeader(), tuple(self.ops(actions)))

    def depth_of(self, op_index: int) -> int:
        """The action depth (1-based) of a trace op index."""
        return op_index - 2 * self.contexts + 1


def _message(c: int, version: int) -> Message:
    return Message(MessageId(f"c{c}.v{version}"), Role.USER, MessageKind.USER, _BS)


def _append(c: int, version: int) -> Op:
    from kvmodel.io.trace import Append

    return Append(0.0, ContextId(f"c{c}"), (_message(c, version),))


class Harness:
    """Which actions are enabled, and the op of each (the fragment's harness state)."""

    def __init__(self, f: Fragment) -> None:
        self.f = f
        self.open = [True] * f.contexts
        self.pinned = [False] * f.contexts
        self.ver = [0] * f.contexts

    def enabled(self) -> list[Action]:
        out = []
        for c in range(self.f.contexts):
            if not self.open[c]:
                continue
            out.append(Action("infer", c))
            if not self.pinned[c] and self.ver[c] < self.f.edits:
                out.append(Action("edit", c))
            if not self.pinned[c]:
                out += [Action("close", c), Action("pin", c)]
            else:
                out.append(Action("unpin", c))
        return out

    def op(self, a: Action, t: float) -> Op:
        if a not in self.enabled():
            raise ValueError(f"action {a} is not enabled")
        ctx = ContextId(f"c{a.ctx}")
        if a.kind == "infer":
            return Infer(t, ctx)
        if a.kind == "edit":
            self.ver[a.ctx] += 1
            return Replace(t, ctx, 0, _message(a.ctx, self.ver[a.ctx]))
        if a.kind == "close":
            self.open[a.ctx] = False
            return Close(t, ctx)
        if a.kind == "pin":
            self.pinned[a.ctx] = True
            return Pin(t, ctx)
        self.pinned[a.ctx] = False
        return Unpin(t, ctx)


@attrs.frozen
class Shortest:
    """Per invariant: the shortest failing depth and one witness, or None (holds to depth)."""

    depth: int
    states: int  # distinct states explored
    failing: dict[str, tuple[int, tuple[Action, ...]]]
    #: the shallowest path on which the run stopped (a refused policy decision or a crash)
    stopped: tuple[int, tuple[Action, ...]] | None = None
    #: the situations each invariant constrains that some explored state made
    witnesses: Witnesses | None = None
    #: why the search stopped before ``depth`` (a state it cannot copy), or None: what it found
    #: until then is kept, and nothing it did not reach may be called proved
    capped: str | None = None


def _abstract(engine: Engine, lg: Harness) -> tuple[object, ...]:
    """The state up to the order of its time stamps (the future compares times only): for a
    policy inside the fragment -- declared rank and reclaim, so no state of its own -- what its
    decisions and the fragment invariants read. (A policy with code decisions is never proved
    here; :mod:`checkers.symbolic.reach` keys the whole state.)"""
    v = engine.view
    blocks = [v.block(b) for b in v.resident()]
    ctxs = [engine.contexts[ContextId(f"c{c}")] for c in range(lg.f.contexts)]
    times = sorted(
        {b.last_access for b in blocks}
        | {b.alloc_time for b in blocks}
        | {c.suspended_at for c in ctxs if c.suspended_at is not None}
    )
    rank = {x: i for i, x in enumerate(times)}
    per_ctx = tuple(
        (lg.open[i], lg.pinned[i], lg.ver[i], c.valid, rank.get(c.suspended_at, -1))  # type: ignore[arg-type]
        for i, c in enumerate(ctxs)
    )
    per_block = tuple(
        sorted(
            (
                str(b.key),
                int(b.id),  # the rank's universal tie-break
                b.state.value,
                rank[b.last_access],
                rank[b.alloc_time],
                len(b.holders),
            )
            for b in blocks
        )
    )
    # which slot the next write takes (ids decide ties)
    free = tuple(int(x) for t in engine.memory.names for x in engine.memory.free_blocks(t))
    return per_ctx, per_block, free


@attrs.define
class _Node:
    """One explored state: the engine with its monitor attached, the harness state, the path."""

    engine: Engine
    monitor: Monitor
    logical: Harness
    path: tuple[Action, ...]
    stopped: bool = False  # the engine refused a policy decision: nothing follows


def explore(
    policy: str | Policy,
    fragment: Fragment,
    depth: int,
    invariants: Iterable[str] = FRAGMENT_INVARIANTS,
) -> Shortest:
    """Breadth-first search of the executable model over all enabled action sequences.

    Each child is a deep copy of its parent's engine, monitor and harness state (one pickle of
    the parent, thawed per child: :func:`~checkers.symbolic.copying.copier`) with one more
    op applied (as :func:`~checkers.invariants.replay.check_ops` applies ops), so a level costs one
    op per child rather than a replay from the start.

    The contract model follows the engine only where one of ``invariants`` reads it
    (:data:`~checkers.invariants.monitor.READS_CONTRACT`): every other invariant is judged from
    the engine's state and log alone, the same with or without it, and copying the model was
    most of a child's cost (spec/invariants.md, Proofs)."""
    names = list(invariants)
    failing: dict[str, tuple[int, tuple[Action, ...]]] = {}
    witnesses = Witnesses(tuple(names))
    engine = engine_for(resolve_policy(policy), fragment.config)
    monitor = Monitor(engine, names, contract=not READS_CONTRACT.isdisjoint(names))
    for op in fragment.prelude():
        monitor.apply(op)
    frontier = [_Node(engine, monitor, Harness(fragment), ())]
    seen: set[tuple[object, ...]] = set()
    stopped: tuple[int, tuple[Action, ...]] | None = None
    n_states = 0
    capped: str | None = None
    for d in range(1, depth + 1):
        nxt: list[_Node] = []
        for node in frontier:
            actions = node.logical.enabled()
            if not actions:
                continue
            try:
                thaw = copier(node)  # frozen once, thawed per child
            except UncopyableError as e:
                capped = f"at depth {d}: {e}"
                break
            for a in actions:
                child = thaw()
                child.path = (*node.path, a)
                op = child.logical.op(a, float(d))
                before = len(child.monitor.violations)
                child.stopped = not child.monitor.apply(op)
                witnesses.add(child.engine)
                for v in child.monitor.violations[before:]:
                    if v.invariant not in failing:
                        failing[v.invariant] = (d, child.path)
                if child.stopped:
                    stopped = stopped or (d, child.path)
                    continue
                key = _abstract(child.engine, child.logical)
                if key in seen:
                    continue
                seen.add(key)
                n_states += 1
                nxt.append(child)
        frontier = nxt
        if not frontier or capped:
            break
    return Shortest(depth, n_states, failing, stopped, witnesses, capped)
