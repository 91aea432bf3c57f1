"""Exhaustive explicit-state search of the **executable** model over a wide fragment, to a
fixpoint (spec invariants.md §Proofs, "Reach").

The Z3 fragment (:mod:`checkers.symbolic.fragment`, :mod:`checkers.symbolic.transition`) has
one-block contexts on one tier. :class:`Wide` adds what it cannot reach: 2-block chains (an
``append`` after the first message, so orphans and prefix-closed residency), a temporary message
(``append-temp``: bypass), forks (a context opened as a fork of an open one: shared prefixes,
several holders) and a second tier. Its actions name a context; an action is one trace op at ``t =
depth``.

:func:`reach` runs every enabled action from every state, breadth first, with the
:class:`~checkers.invariants.Monitor` checking **every** invariant of spec/invariants.md (but the
end-of-run endurance budget) on every transition. Two states are merged when their
:func:`state_key` is equal: the whole state the future can read -- the engine's contexts,
resident blocks, index, free lists, dead set and pins; the policy's own state; the monitor's
memory and its contract model -- with the time stamps (every float) replaced by their rank
among the state's time stamps and the op stamps by their rank among its op stamps. When a level
adds no new state the search has reached a **fixpoint**: every reachable state has been
checked, so an invariant that never failed holds after *any* number of actions -- a proof, for
the executable model itself.

The merge is exact only if the future depends on time stamps through their order alone
(decisions compare times, never measure durations) and on no state the key leaves out (the
observation log, the statistics, the write counters, and the engine's caches -- the BlockInfo
memo and the victim index, derived state whose transparency the ``engine-contract`` finding and
the engine self-checks test). :func:`exact_merge` says whether that holds for a policy, and why
not; a search that is not exact, or that stops at its caps, reports **bounded**, never proved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from checkers.invariants import FINDINGS, INVARIANTS, Monitor
from checkers.invariants.replay import engine_for
from checkers.search.coverage import WITNESS_POLICIES, Witnesses
from checkers.symbolic.copying import UncopyableError, copier
from checkers.symbolic.statekey import state_key
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.ids import ContextId, MessageId, SessionId, TierName
from kvmodel.io.trace import (
    Append,
    Close,
    Fork,
    Infer,
    Op,
    Open,
    Pin,
    Replace,
    Trace,
    TraceHeader,
    Unpin,
)
from kvmodel.memory import TierConfig
from kvmodel.messages import AgentKind, Message, MessageKind, Role
from kvmodel.policy import (
    BasePolicy,
    Policy,
    declared_rank,
    declared_reclaim,
    moves,
    resolve_policy,
)

__all__ = [
    "REACH_ACTIONS",
    "REACH_INVARIANTS",
    "Reach",
    "Step",
    "Wide",
    "WideHarness",
    "check_merges",
    "exact_merge",
    "merge_assumption",
    "parse_wide",
    "reach",
    "state_key",
]

REACH_ACTIONS = ("infer", "edit", "append", "append-temp", "close", "pin", "unpin", "fork")

#: every invariant but the end-of-run endurance budget (it measures device-years over the run's
#: duration, which a time-abstracted state does not keep)
REACH_INVARIANTS = tuple(n for n in INVARIANTS if n != "endurance-budget")


_BS = 4


@attrs.frozen
class Step:
    kind: str  # one of REACH_ACTIONS
    ctx: int

    def __str__(self) -> str:
        return f"{self.kind}(x{self.ctx})"


@attrs.frozen
class Wide:
    """``contexts`` main contexts opened at ``t = 0`` with one one-block message; ``forks``
    more context slots, each opened by one ``fork`` of an open context; tiers ``hbm`` (and
    ``hbf`` unless 0) of that many blocks; ``edits`` replacements of the first message per
    context. Every context may grow once to two messages (``append``, or ``append-temp`` for a
    temporary one when ``temporary``)."""

    contexts: int = 1
    forks: int = 0
    hbm: int = 2
    hbf: int = 1
    edits: int = 1
    temporary: bool = True

    def __attrs_post_init__(self) -> None:
        for name, low in (("contexts", 1), ("forks", 0), ("hbm", 1), ("hbf", 0), ("edits", 0)):
            if getattr(self, name) < low:
                raise ValueError(f"Wide.{name} must be >= {low} (got {getattr(self, name)})")

    @property
    def slots(self) -> int:
        return self.contexts + self.forks

    @property
    def config(self) -> EngineConfig:
        tiers = [TierConfig(TierName("hbm"), self.hbm)]
        if self.hbf:
            tiers.append(TierConfig(TierName("hbf"), self.hbf))
        return EngineConfig(_BS, tuple(tiers))

    def prelude(self) -> list[Op]:
        ops: list[Op] = [
            Open(0.0, _cid(c), SessionId(f"s{c}"), AgentKind.MAIN) for c in range(self.contexts)
        ]
        ops += [Append(0.0, _cid(c), (_msg(f"{_cid(c)}.m0", False),)) for c in range(self.contexts)]
        return ops

    def ops(self, steps: Sequence[Step]) -> list[Op]:
        """The trace ops of a step sequence (prelude first); every step must be enabled."""
        out = self.prelude()
        h = WideHarness(self)
        for d, s in enumerate(steps, start=1):
            out.append(h.op(s, float(d)))
        return out

    def trace(self, steps: Sequence[Step]) -> Trace:
        return Trace(TraceHeader(), tuple(self.ops(steps)))

    def describe(self) -> str:
        tiers = f"hbm {self.hbm}" + (f" + hbf {self.hbf}" if self.hbf else "")
        return (
            f"{self.contexts} contexts + {self.forks} fork slots, chains of up to 2 blocks"
            f"{', a temporary append' if self.temporary else ''}, {self.edits} edit each, "
            f"tiers {tiers} blocks"
        )


def parse_wide(text: str) -> Wide:
    """``contexts=1,forks=1,hbm=2,hbf=1,edits=1,temporary=yes`` (omitted keys keep their
    defaults) -> :class:`Wide`; ValueError naming the bad part otherwise."""
    fields = {a.name: a for a in attrs.fields(Wide)}
    kw: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, val = part.partition("=")
        name = name.strip()
        if not eq or name not in fields:
            raise ValueError(f"expected key=value with a key in {', '.join(fields)} (got {part!r})")
        if name == "temporary":
            if val.strip() not in ("yes", "no", "1", "0", "true", "false"):
                raise ValueError(f"temporary: expected yes or no (got {val!r})")
            kw[name] = val.strip() in ("yes", "1", "true")
        else:
            try:
                kw[name] = int(val)
            except ValueError:
                raise ValueError(f"{name}: expected an integer (got {val!r})") from None
            if kw[name] > 6:
                raise ValueError(f"{name}: at most 6 (got {kw[name]})")
    return Wide(**kw)


def _cid(c: int) -> ContextId:
    return ContextId(f"x{c}")


def _msg(mid: str, temporary: bool) -> Message:
    kind = MessageKind.OBSERVATION if temporary else MessageKind.USER
    return Message(MessageId(mid), Role.USER, kind, _BS)


@attrs.define
class _Slot:
    opened: bool
    open: bool = True
    pinned: bool = False
    edits: int = 0
    messages: int = 1


class WideHarness:
    """Which steps are enabled, and the op of each (the harness part of a state)."""

    def __init__(self, w: Wide) -> None:
        self.w = w
        self.slots = [_Slot(c < w.contexts) for c in range(w.slots)]

    def key(self) -> tuple[object, ...]:
        return tuple(attrs.astuple(s) for s in self.slots)

    def _free_fork(self) -> int | None:
        return next((i for i, s in enumerate(self.slots) if not s.opened), None)

    def enabled(self) -> list[Step]:
        out: list[Step] = []
        fork_slot = self._free_fork()
        for c, s in enumerate(self.slots):
            if not (s.opened and s.open):
                continue
            out.append(Step("infer", c))
            if not s.pinned and s.edits < self.w.edits:
                out.append(Step("edit", c))
            if s.messages < 2:
                out.append(Step("append", c))
                if self.w.temporary:
                    out.append(Step("append-temp", c))
            if s.pinned:
                out.append(Step("unpin", c))
            else:
                out += [Step("close", c), Step("pin", c)]
            if fork_slot is not None:
                out.append(Step("fork", c))
        return out

    def op(self, s: Step, t: float) -> Op:
        if s not in self.enabled():
            raise ValueError(f"step {s} is not enabled")
        slot, ctx = self.slots[s.ctx], _cid(s.ctx)
        match s.kind:
            case "infer":
                return Infer(t, ctx)
            case "edit":
                slot.edits += 1
                return Replace(t, ctx, 0, _msg(f"{ctx}.m0e{slot.edits}", False))
            case "append" | "append-temp":
                slot.messages = 2
                temp = s.kind == "append-temp"
                return Append(t, ctx, (_msg(f"{ctx}.m1{'t' if temp else ''}", temp),), temp)
            case "close":
                slot.open = False
                return Close(t, ctx)
            case "pin":
                slot.pinned = True
                return Pin(t, ctx)
            case "unpin":
                slot.pinned = False
                return Unpin(t, ctx)
        j = self._free_fork()
        assert j is not None
        new = self.slots[j]
        new.opened, new.messages, new.edits = True, slot.messages, slot.edits
        return Fork(t, _cid(j), ctx)


# ---------------------------------------------------------------- the search


def exact_merge(policy: Policy) -> str | None:
    """None when merging states up to re-timing is exact for ``policy``; else why not."""
    if getattr(policy, "engine_class", None) is not None:
        return "it brings its own engine, whose state the key does not read"
    if callable(getattr(policy, "prepare", None)):
        return "it plans from the whole trace (offline)"
    if moves(policy):
        return "it moves KV between tiers, and the state key does not read copies (MV9)"
    if declared_rank(policy) is None:
        return "its eviction order is code, which may measure time"
    if declared_reclaim(policy) is None:
        return "its reclaim rule is code (on_op is overridden), which may measure time"
    # the declaration speaks only for the ``place`` of the class that makes it (a subclass that
    # overrides ``place`` does not inherit it), as a declared Reclaim speaks only for its on_op
    owner = _place_owner(policy)
    if owner is not None and not (
        vars(owner).get("compares_times_only", False)
        and getattr(policy, "compares_times_only", False)  # a subclass may withdraw it
    ):
        return (
            f"its placement is code ({owner.__name__}.place) and {type(policy).__name__} does "
            "not declare compares_times_only for it (decisions that compare times, never "
            "measure durations)"
        )
    return None


def merge_assumption(policy: Policy) -> str | None:
    """What an exact merge takes on the policy's word, or None: a ``place`` written as code is
    trusted to compare times only because it says so (``compares_times_only``; no search can
    show it for every time). Printed beside every ``proved`` so the proof names its premise."""
    owner = _place_owner(policy)
    if owner is None or exact_merge(policy) is not None:
        return None
    return (
        f"assumes {owner.__name__}.place compares times only, as it declares (the retiming "
        "relation and check_merges test it on samples)"
    )


@attrs.frozen
class Reach:
    wide: Wide
    policy: str
    states: int  # distinct states (up to re-timing), the initial one included
    transitions: int
    depth: int  # the deepest level explored
    fixpoint: bool  # the last level added no new state: every reachable state was checked
    #: per invariant or finding: the shortest failing depth and its steps
    failing: dict[str, tuple[int, tuple[Step, ...], str]]
    #: the shallowest path on which the run stopped (a refused decision or a crash)
    stopped: tuple[int, tuple[Step, ...]] | None
    inexact: str | None  # why a fixpoint would not be a proof for this policy (None: it is)
    capped: str | None  # which cap stopped the search before a fixpoint
    seconds: float
    invariants: tuple[str, ...]
    levels: tuple[int, ...] = ()  # new states per depth
    #: what a proof takes on the policy's word (:func:`merge_assumption`), said beside it
    assumes: str | None = None
    #: the situations each invariant constrains that some reached state made (no proof of an
    #: invariant whose situation never arose: spec invariants.md §Proofs, "vacuity")
    witnesses: Witnesses | None = None
    #: the class whose code ``place`` is, if not the base class's (deterministic-placement
    #: cannot be shown for every feature a code placement may read)
    place_code: str | None = None

    @property
    def proves(self) -> bool:
        """Every checked invariant that never failed holds after any number of steps."""
        return self.fixpoint and self.inexact is None and self.stopped is None

    def verdict(self, name: str) -> tuple[str, str]:
        """(rung, detail) for one invariant: violated, proved or bounded."""
        hit = self.failing.get(name)
        if hit is not None:
            return "violated", f"at depth {hit[0]}: {hit[2]}"
        w = self.witnesses
        lack = w.missing(name) if w is not None and self.proves else None
        if lack is not None:  # (a bounded search says why it is not a proof: that comes first)
            return "unknown", (
                f"the fragment never makes {lack} ({self.states} states to depth {self.depth}): "
                "that it holds there is no evidence"
            )
        if (
            name == "deterministic-placement"
            and self.place_code is not None
            and w is not None
            and self.proves
        ):
            return "unknown", (
                f"{self.place_code}.place is code, which may read what the fragment never makes "
                f"(it made {w.magnitudes()}; depth, decoded output, forks, open contexts): "
                "kvmodel check tests it"
            )
        if self.proves:
            taken = f"; {self.assumes}" if self.assumes else ""
            return "proved", (
                f"all {self.states} reachable states checked (fixpoint at depth {self.depth})"
                + taken
            )
        why = (
            self.capped
            if not self.fixpoint
            else self.inexact
            if self.inexact is not None
            else f"the engine refused a decision at depth {self.stopped[0]}"
            if self.stopped is not None
            else ""
        )
        return "bounded", f"holds to depth {self.depth} ({self.states} states): not a proof: {why}"

    def render(self, claims: Iterable[str] = ()) -> str:
        claimed = set(claims)
        lines = [
            "exhaustive search of the executable model over the wide fragment "
            f"({self.wide.describe()}): "
            f"{self.states} states, {self.transitions} transitions, depth {self.depth}, "
            f"{'fixpoint' if self.fixpoint else 'no fixpoint'}, {self.seconds:.1f} s"
        ]
        for name in (*self.invariants, *(f for f in FINDINGS if f in self.failing)):
            rung, detail = self.verdict(name)
            mark = "!" if rung == "violated" and (name in claimed or name in FINDINGS) else " "
            lines.append(f"{mark} {name:<38} {rung:<9} {detail}")
            hit = self.failing.get(name)
            if hit is not None:
                lines.append("    " + " ; ".join(str(s) for s in hit[1]))
        return "\n".join(lines)


@attrs.define
class _Node:
    engine: Engine
    monitor: Monitor
    harness: WideHarness
    path: tuple[Step, ...]


def reach(
    policy: str | Policy,
    wide: Wide | None = None,
    *,
    invariants: Iterable[str] = REACH_INVARIANTS,
    max_states: int = 100_000,
    max_depth: int = 64,
    max_seconds: float | None = None,
    until: Iterable[str] = (),
    witness_policies: Sequence[str] = WITNESS_POLICIES,
) -> Reach:
    """Breadth-first search of every enabled step sequence to a fixpoint or a cap.

    An invariant is proved only where the fragment makes the situation it constrains
    (:data:`~checkers.invariants.SITUATIONS`): in some state this search reached, or one the same
    search under a ``witness_policies`` policy reached -- the premise of a proof is the fragment,
    not the policy under test, whose own choices may keep the situation from arising (KVTether
    never leaves Dead KV beside an eviction).

    A child is a copy of its parent (engine, monitor, harness) with one op applied through
    the monitor, so a level costs one op per child. Violations, refused decisions and crashes
    are recorded at the shallowest depth they occur (breadth first: the first witness found is
    a shortest one); a path that stops is not extended. ``until``: stop (bounded) at the end of
    the level where every one of these invariants or findings has failed (a hunt, not a proof)."""
    w = wide or Wide()
    pol = resolve_policy(policy)
    if callable(getattr(pol, "prepare", None)):
        raise ValueError(f"{pol.name} plans from the whole trace (offline): no step-wise search")
    names = tuple(invariants)
    t0 = time.perf_counter()
    engine = engine_for(pol, w.config)
    monitor = Monitor(engine, names)
    for op in w.prelude():
        if not monitor.apply(op):
            raise RuntimeError(f"the prelude of the wide fragment stopped: {monitor.violations}")
    root = _Node(engine, monitor, WideHarness(w), ())
    seen = {state_key(engine, monitor, root.harness)}
    failing: dict[str, tuple[int, tuple[Step, ...], str]] = {}
    stopped: tuple[int, tuple[Step, ...]] | None = None
    frontier, depth, transitions, capped = [root], 0, 0, None
    levels: list[int] = []
    wanted = set(until)
    witnesses = Witnesses(names)
    while frontier:
        if depth >= max_depth:
            capped = f"depth cap {max_depth}"
            break
        depth += 1
        nxt: list[_Node] = []
        for node in frontier:
            try:
                thaw = copier(node)
            except UncopyableError as e:
                capped = str(e)
                break
            for s in node.harness.enabled():
                if len(seen) >= max_states:
                    capped = f"state cap {max_states}"
                    break
                if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                    capped = f"time cap {max_seconds:g} s"
                    break
                child = thaw()
                child.path = (*node.path, s)
                op = child.harness.op(s, float(depth))
                before = len(child.monitor.violations)
                ok = child.monitor.apply(op)
                transitions += 1
                witnesses.add(child.engine)
                for v in child.monitor.violations[before:]:
                    if v.invariant not in failing:
                        failing[v.invariant] = (depth, child.path, v.message)
                if not ok:
                    stopped = stopped or (depth, child.path)
                    continue
                key = state_key(child.engine, child.monitor, child.harness)
                if key not in seen:
                    seen.add(key)
                    nxt.append(child)
            if capped:
                break
        levels.append(len(nxt))
        if wanted and wanted <= set(failing) and not capped:
            capped = f"stopped once {', '.join(sorted(wanted))} failed"
        if capped:
            break
        frontier = nxt
    return Reach(
        w,
        pol.name,
        len(seen),
        transitions,
        depth,
        not frontier and capped is None,
        failing,
        stopped,
        exact_merge(pol),
        capped,
        time.perf_counter() - t0,
        names,
        tuple(levels),
        merge_assumption(pol),
        # (only a proof needs the fragment's witnesses: a bounded search claims none)
        _with_fragment_witnesses(witnesses, w, names, witness_policies, max_states, max_depth)
        if not frontier and capped is None and exact_merge(pol) is None and stopped is None
        else witnesses,
        _place_code(pol),
    )


_WITNESSED: dict[tuple[Wide, tuple[str, ...], str], Witnesses] = {}


def _with_fragment_witnesses(
    own: Witnesses,
    w: Wide,
    names: tuple[str, ...],
    policies: Sequence[str],
    max_states: int,
    max_depth: int,
) -> Witnesses:
    """``own`` joined with what the witness policies' searches of the same fragment saw (each
    searched once per fragment and set of invariants, kept for the process)."""
    out = Witnesses(names, set(own.seen), own.most.copy())
    for p in policies:
        if own.missing_any() is None and out.seen >= own.needed():
            break
        key = (w, names, p)
        if key not in _WITNESSED:
            r = reach(
                p, w, invariants=names, max_states=max_states, max_depth=max_depth,
                witness_policies=(),
            )  # fmt: skip
            assert r.witnesses is not None
            _WITNESSED[key] = r.witnesses
        out.seen |= _WITNESSED[key].seen
    return out


def _place_owner(policy: Policy) -> type | None:
    """The class whose ``place`` runs, if it is code (not the base class's: the configured tier
    order, whatever the block); None for the base class's."""
    owner = next((k for k in type(policy).__mro__ if "place" in vars(k)), None)
    return None if owner is None or owner is BasePolicy else owner


def _place_code(policy: Policy) -> str | None:
    """The name of the class whose ``place`` is code (an instance's own counts), or None."""
    if "place" in getattr(policy, "__dict__", {}):
        return type(policy).__name__
    owner = _place_owner(policy)
    return None if owner is None else owner.__name__


def check_merges(
    policy: str | Policy,
    wide: Wide | None = None,
    *,
    walks: int = 40,
    steps: int = 10,
    follow: int = 6,
    seed: int = 0,
) -> tuple[int, list[str]]:
    """A sampled test of the merge :func:`reach` makes: seeded random walks; whenever a walk
    reaches a state whose key an earlier state on another path had, both are continued with the
    same ``follow`` random steps, and after each the keys must stay equal and the same invariants
    must fail. Returns (pairs compared, mismatches). It tests :func:`state_key` (a field it
    leaves out that the future reads) and the policy's ``compares_times_only``."""
    import numpy as np

    w = wide or Wide()
    pol = resolve_policy(policy)
    rng = np.random.default_rng(seed)
    engine = engine_for(pol, w.config)
    monitor = Monitor(engine, REACH_INVARIANTS)
    for op in w.prelude():
        monitor.apply(op)
    root = copier(_Node(engine, monitor, WideHarness(w), ()))
    first: dict[tuple[object, ...], tuple[Callable[[], _Node], int]] = {}
    pairs, bad = 0, []
    for _ in range(walks):
        node: _Node = root()
        for d in range(1, steps + 1):
            options = node.harness.enabled()
            if not options:
                break
            s = options[int(rng.integers(len(options)))]
            node.path = (*node.path, s)
            if not node.monitor.apply(node.harness.op(s, float(d))):
                break
            key = state_key(node.engine, node.monitor, node.harness)
            seen = first.get(key)
            if seen is None:
                first[key] = (copier(node), d)
                continue
            other: _Node = seen[0]()
            if other.path == node.path:
                continue
            pairs += 1
            a, b = copier(node)(), other
            for k in range(1, follow + 1):
                opts = a.harness.enabled()
                if not opts:
                    break
                s2 = opts[int(rng.integers(len(opts)))]
                na, nb = len(a.monitor.violations), len(b.monitor.violations)
                oka = a.monitor.apply(a.harness.op(s2, float(d + k)))
                okb = b.monitor.apply(b.harness.op(s2, float(seen[1] + k)))
                va = sorted({v.invariant for v in a.monitor.violations[na:]})
                vb = sorted({v.invariant for v in b.monitor.violations[nb:]})
                if (
                    oka != okb
                    or va != vb
                    or (
                        oka
                        and state_key(a.engine, a.monitor, a.harness)
                        != state_key(b.engine, b.monitor, b.harness)
                    )
                ):
                    bad.append(
                        f"{' ; '.join(map(str, a.path))} and {' ; '.join(map(str, b.path))} "
                        f"were merged but differ after {s2}: violations {va} vs {vb}"
                    )
                    break
                if not oka:
                    break
    return pairs, bad
