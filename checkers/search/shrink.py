"""Delta debugging: shrink a failing op sequence to a 1-minimal one (every search's last step),
the engine it fails on to a 1-minimal one, and the numbers in its ops (message sizes, durations,
times) to smaller and rounder ones."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from decimal import ROUND_FLOOR, Decimal
from typing import TypeVar

import attrs

from kvmodel.config import EngineConfig
from kvmodel.io.ops import (
    EndSession,
    Fork,
    Infer,
    Op,
    Open,
    Pin,
    carried_messages,
    named_ids,
    renamed,
    scaled_clock,
    with_messages,
)

__all__ = [
    "numbered",
    "op_groups",
    "shrink",
    "shrink_clock",
    "shrink_engine",
    "shrink_scale",
    "shrink_values",
]

T = TypeVar("T")

#: what a first pass may delete whole: given the ops, predicates each picking out one group
Groups = Callable[[Sequence[T]], Sequence[Callable[[T], bool]]]


def shrink(
    ops: Sequence[T],
    fails: Callable[[Sequence[T]], bool],
    *,
    budget: int = 2000,
    groups: Groups[T] | None = None,
) -> tuple[list[T], bool]:
    """Delta debugging over ops: deleting chunks of halving size (ddmin's complements, the scan
    going on after a deletion rather than starting over), down to single ops, to a fixpoint.

    Returns the shortened ops and whether they are **1-minimal** (no single op can be deleted
    and still fail). ``fails`` must be deterministic; ``budget`` bounds the number of tries.
    ``groups`` (e.g. :func:`op_groups`) names sets of ops to try deleting whole first, pass
    after pass until none goes: ops that depend on each other (a context's ops on its opening)
    scatter through a long trace, where ddmin's contiguous chunks mostly cut a dependency and
    fail for that reason alone.
    """
    cur = list(ops)
    tries = 0
    progress = True
    while groups is not None and progress and tries < budget:
        progress = False
        for member in groups(cur):
            cand = [o for o in cur if not member(o)]
            if not cand or len(cand) == len(cur) or tries >= budget:
                continue
            tries += 1
            if fails(cand):
                cur, progress = cand, True
    # complements of chunks, halving the chunk size pass by pass; after a deletion the next
    # chunk is tried where the deleted one was (the scan goes on, it does not start over: a
    # trace whose fault needs many ops spread through it -- a crowd of agents, each needing
    # only its opening -- cost ddmin's restarts a number of tries quadratic in its length).
    # Single ops last, pass after pass until one deletes nothing: 1-minimal
    chunk = max(1, math.ceil(len(cur) / 2))
    one_minimal = False
    while tries < budget:
        deleted = False
        i = 0
        while i < len(cur) and tries < budget:
            cand = cur[:i] + cur[i + chunk :]
            tries += 1
            if fails(cand):
                cur, deleted = cand, True
            else:
                i += chunk
        if i < len(cur):
            break  # the budget ran out within the pass
        if chunk == 1 and not deleted:
            one_minimal = True
            break
        if chunk > 1:
            chunk = math.ceil(chunk / 2)
    return cur, one_minimal


def op_groups(ops: Sequence[Op]) -> list[Callable[[Op], bool]]:
    """The groups of a trace that only make sense whole: each context with every context opened
    or forked from it, in order of opening (its ops, theirs, and their returns), then each
    session (its contexts and its end). A context whose tree is its whole session takes the
    session's end into its group, and the session gets none of its own."""
    children: dict[str, list[str]] = {}
    sessions: dict[str, set[str]] = {}
    order: list[str] = []
    for op in ops:
        if isinstance(op, Open):
            order.append(op.ctx)
            sessions.setdefault(op.session, set()).add(op.ctx)
            if op.parent is not None:
                children.setdefault(op.parent, []).append(op.ctx)
        elif isinstance(op, Fork):
            order.append(op.ctx)
            children.setdefault(op.src, []).append(op.ctx)

    def subtree(root: str) -> frozenset[str]:
        out, todo = {root}, [root]
        while todo:
            for c in children.get(todo.pop(), ()):
                if c not in out:
                    out.add(c)
                    todo.append(c)
        return frozenset(out)

    def member(ctxs: frozenset[str], session: str | None = None) -> Callable[[Op], bool]:
        def pick(op: Op) -> bool:
            if isinstance(op, EndSession):
                return op.session == session
            return op.ctx in ctxs

        return pick

    trees = {c: subtree(c) for c in order}
    whole = {s: frozenset().union(*(trees[c] for c in ctxs)) for s, ctxs in sessions.items()}
    # a context whose tree is its whole session goes with the session's end: the same group
    # twice (the tree, then the session) would be tried twice
    of = {c: s for s, ctxs in sessions.items() for c in ctxs}
    groups = [
        member(trees[c], of[c]) if c in of and whole[of[c]] == trees[c] else member(trees[c])
        for c in order
    ]
    covered = {of[c] for c in order if c in of and whole[of[c]] == trees[c]}
    groups += [member(ctxs, s) for s, ctxs in whole.items() if s not in covered]

    def after_opening(ctx: str) -> Callable[[Op], bool]:
        def pick(op: Op) -> bool:
            return not isinstance(op, (Open, Fork, EndSession)) and op.ctx == ctx

        return pick

    # then what each context did once open, its opening kept: a fault that needs many agents
    # in flight needs their openings alone (each one group, where ddmin's chunks of a crowd
    # each hold an opening the fault needs)
    groups += [after_opening(c) for c in order]
    return groups


def _smallest(hi: int, fails_at: Callable[[int], bool], more: Callable[[], bool]) -> int:
    """The smallest size in ``[1, hi]`` that still fails, as a binary search and then steps of
    one find it (failing need not be monotone in a size: the search's find is walked down one
    at a time). ``fails_at(hi)`` holds; ``more()`` says whether the budget allows a try."""
    lo = 1
    while lo < hi and more():
        mid = (lo + hi) // 2
        if fails_at(mid):
            hi = mid
        else:
            lo = mid + 1
    while hi > 1 and more() and fails_at(hi - 1):
        hi -= 1
    return hi


def shrink_engine(
    config: EngineConfig, fails: Callable[[EngineConfig], bool], *, budget: int = 200
) -> tuple[EngineConfig, bool]:
    """Shrink a failing engine: drop its last tiers, then take blocks from each tier (a binary
    search down to the fewest that still fail, then one at a time), round after round until
    nothing shrinks. Returns the engine and whether it is **1-minimal** (neither dropping the
    last tier nor taking one block from any tier still fails). Tiers are dropped from the end
    only, so the tiers that remain keep their places, names and wear. ``fails(config)`` is
    true on ``config`` and must be deterministic; ``budget`` bounds the tries."""
    cur = config
    tries = 0

    def attempt(cand: EngineConfig) -> bool:
        nonlocal tries
        tries += 1
        return fails(cand)

    def with_blocks(cfg: EngineConfig, i: int, blocks: int) -> EngineConfig:
        tiers = list(cfg.tiers)
        tiers[i] = attrs.evolve(tiers[i], blocks=blocks)
        return attrs.evolve(cfg, tiers=tuple(tiers))

    changed = True
    while changed and tries < budget:
        changed = False
        while len(cur.tiers) > 1 and tries < budget:
            cand = attrs.evolve(cur, tiers=cur.tiers[:-1])
            if not attempt(cand):
                break
            cur, changed = cand, True
        for i in range(len(cur.tiers)):
            hi = _smallest(
                cur.tiers[i].blocks,
                lambda n: attempt(with_blocks(cur, i, n)),  # noqa: B023 (called at once)
                lambda: tries < budget,
            )
            if hi < cur.tiers[i].blocks:
                cur, changed = with_blocks(cur, i, hi), True
    return cur, tries < budget and not changed


def shrink_scale(
    ops: Sequence[Op], config: EngineConfig, fails: Callable[[Sequence[Op], EngineConfig], bool]
) -> tuple[list[Op], EngineConfig]:
    """Divide the engine's block size and every message's token count by a common factor, the
    largest that still fails: a trace drawn at a token scale (``RandomParams.token_scale``) is
    the same trace block for block at scale 1, so a fault that does not read token counts
    comes back at the sizes it was drawn at, and one that does comes down as far as it allows.
    ``fails(ops, config)`` is true on the arguments; returns them unchanged when no factor
    fails (or there is none)."""
    g = config.block_size
    for op in ops:
        for m in carried_messages(op):
            g = math.gcd(g, m.tokens)
    factors = sorted({d for i in range(1, math.isqrt(g) + 1) if g % i == 0 for d in (i, g // i)})
    for d in reversed(factors[1:]):  # (the largest first; 1 is no change)
        cand = [
            with_messages(op, [attrs.evolve(m, tokens=m.tokens // d) for m in carried_messages(op)])
            for op in ops
        ]
        smaller = attrs.evolve(config, block_size=config.block_size // d)
        if fails(cand, smaller):
            return cand, smaller
    return list(ops), config


def shrink_clock(ops: Sequence[Op], scale: int, fails: Callable[[Sequence[Op]], bool]) -> list[Op]:
    """Divide every time of ``ops`` (``scaled_clock``) by the largest power of two up to
    ``scale``, the clock scale they were drawn at (``RandomParams.clock_scale``), that still
    fails: the same trace op for op at each, so a fault that reads no time's magnitude comes
    back on the clock it was drawn on, and one that does comes down as far as it allows.
    ``fails(ops)`` is true on the argument; returns it unchanged when no division fails."""
    d = scale
    while d > 1:
        cand = [scaled_clock(op, 1 / d) for op in ops]  # (1/d: exact, d a power of two)
        if fails(cand):
            return cand
        d //= 2
    return list(ops)


#: the names :func:`numbered` gives, by kind of id
_NUMBERED = {"context": "c", "session": "s", "message": "m"}


def numbered(ops: Sequence[Op]) -> list[Op]:
    """``ops`` with their contexts, sessions and messages renamed ``c1, c2, ...``, ``s1, ...``,
    ``m1, ...`` in order of first appearance, so that a counterexample reads from the start and
    its names say nothing of the search that drew them. Content hashes are kept (they say which
    messages share KV); ``ops`` comes back unchanged if a new name is one of them. Renaming
    changes no decision of the engine (B1, B3: the metamorphic ``renaming`` relation), but a
    policy may read names: the caller keeps the result only if it still fails."""
    new: dict[str, str] = {}
    count = dict.fromkeys(_NUMBERED, 0)
    hashes: set[str] = set()
    for op in ops:
        for kind, name in named_ids(op):
            if kind == "hash":
                hashes.add(name)
            elif name not in new:
                count[kind] += 1
                new[name] = f"{_NUMBERED[kind]}{count[kind]}"
    if hashes & set(new.values()):
        return list(ops)
    return [renamed(op, new) for op in ops]


def _simpler(x: float, floor: float) -> list[float]:
    """Simpler values for a number ``x`` that is at least ``floor``, simplest first: ``floor``
    itself, then ``x`` cut to a whole number and to one and two decimals -- each below ``x``
    (so a value only ever goes down, and shrinking ends) and not below ``floor``."""
    out: list[float] = []
    cuts = (Decimal(repr(x)).quantize(Decimal(q), rounding=ROUND_FLOOR) for q in ("1", ".1", ".01"))
    for v in (floor, *(float(c) for c in cuts)):
        if floor <= v < x and v not in out:
            out.append(v)
    return out


def _sized_together(ops: Sequence[Op]) -> list[list[tuple[int, int]]]:
    """The message positions ``(op, index in carried_messages)`` whose sizes shrink as one, in
    order of first appearance: every message of one content key when they all have one size
    (B1: one content key, identical tokens -- a shared system prompt, a message copied into a
    compaction), else each message on its own."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    for i, op in enumerate(ops):
        for j, m in enumerate(carried_messages(op)):
            by_key.setdefault(m.content_key, []).append((i, j))
    out: list[list[tuple[int, int]]] = []
    for where in by_key.values():
        sizes = {carried_messages(ops[i])[j].tokens for i, j in where}
        out += [where] if len(sizes) == 1 else [[p] for p in where]
    return out


def _resized(ops: Sequence[Op], where: Sequence[tuple[int, int]], tokens: int) -> list[Op]:
    """``ops`` with the messages at ``where`` resized to ``tokens``."""
    out = list(ops)
    for i, j in where:
        ms = list(carried_messages(out[i]))
        ms[j] = attrs.evolve(ms[j], tokens=tokens)
        out[i] = with_messages(out[i], ms)
    return out


def _at_time(op: Op, t: float) -> Op:
    return attrs.evolve(op, t=t)


def _with_duration(op: Op, v: float) -> Op:
    assert isinstance(op, Infer)
    return attrs.evolve(op, duration=v)


def _with_ttl(op: Op, v: float) -> Op:
    assert isinstance(op, Pin)
    return attrs.evolve(op, ttl=v)


def shrink_values(
    ops: Sequence[Op], fails: Callable[[Sequence[Op]], bool], *, budget: int = 1000
) -> tuple[list[Op], bool]:
    """Make a failing trace's numbers smaller and rounder while it still fails:

    * each message's token count, or together the counts of the messages of one content key
      (:func:`_sized_together`): a binary search down to 1, then one token at a time, since
      failing need not be monotone in a size;
    * each op's time: the previous op's time, else the time cut to a whole number, one decimal
      or two, never below the previous op's (time does not go backwards); a whole time none of
      those fail at goes down to the earliest whole second that still fails (a binary search,
      then one second at a time): a fault that needs a clock past a day shows a day and a
      second, not the walk's clock;
    * each inference's duration: 0, else cut the same way; each pin's TTL cut the same way (it
      stays above 0); a whole one goes down to the smallest whole number that still fails.

    Pass after pass until a pass changes nothing. Returns the ops and whether they are
    **value-minimal**: the last pass changed nothing within the ``budget`` of tries, so no
    message (or content key) can lose one token, and no time, duration or TTL can take any of
    its simpler values or, if whole, lose one, while the trace still fails. Ops are never
    added, deleted or reordered; ``fails`` must be deterministic and true on ``ops``."""
    cur = list(ops)
    tries = 0

    def attempt(cand: list[Op]) -> bool:
        nonlocal cur, tries
        tries += 1
        if fails(cand):
            cur = cand
            return True
        return False

    def at(i: int, op: Op) -> list[Op]:
        return [*cur[:i], op, *cur[i + 1 :]]

    def whole(i: int, x: float, lo: int, make: Callable[[Op, float], Op]) -> bool:
        """``x``, a number of op ``i`` (``make(op, v)`` sets it to ``v``), whole and above
        ``lo``: down to the smallest whole number in ``[lo, x]`` that still fails (a binary
        search, then one at a time)."""
        if x != int(x) or x <= lo or not attempt(at(i, make(cur[i], x - 1))):
            return False  # (one less passes: already the smallest, a pass's one try)
        _smallest(  # (from one less, which fails: cur holds it now)
            int(x) - lo,
            lambda n: attempt(at(i, make(cur[i], float(lo + n - 1)))),
            lambda: tries < budget,
        )
        return True

    changed = True
    while changed and tries < budget:
        changed = False
        for where in _sized_together(cur):
            i, j = where[0]
            size = carried_messages(cur[i])[j].tokens
            hi = _smallest(
                size,
                lambda n: attempt(_resized(cur, where, n)),  # noqa: B023 (called at once)
                lambda: tries < budget,
            )
            changed |= hi < size
        for i in range(len(cur)):
            prev = cur[i - 1].t if i else 0.0
            for t in _simpler(cur[i].t, prev):
                if tries >= budget:
                    break
                if attempt(at(i, attrs.evolve(cur[i], t=t))):
                    changed = True
                    break
            else:  # a whole time the fault needs: the earliest whole second that still fails
                changed |= whole(i, cur[i].t, math.ceil(prev), _at_time)
            op = cur[i]
            simpler: list[Op] = []
            if isinstance(op, Infer) and op.duration:
                simpler = [attrs.evolve(op, duration=v) for v in _simpler(op.duration, 0.0)]
            elif isinstance(op, Pin) and op.ttl is not None:  # (a TTL is above 0)
                simpler = [attrs.evolve(op, ttl=v) for v in _simpler(op.ttl, 0.0) if v > 0]
            for cand in simpler:
                if tries >= budget:
                    break
                if attempt(at(i, cand)):
                    changed = True
                    break
            else:
                if isinstance(op, Infer) and op.duration:
                    changed |= whole(i, op.duration, 1, _with_duration)
                elif isinstance(op, Pin) and op.ttl is not None:
                    changed |= whole(i, op.ttl, 1, _with_ttl)
    return cur, tries < budget and not changed
