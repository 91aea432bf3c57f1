"""Running the engine beside the contract model (:class:`~checkers.invariants.nversion.Shadow`)
and comparing them (spec/invariants.md, Self-checks of the engine).

:func:`compare` -- after one op, the first field on which the engine and the model differ (the
Monitor's ``engine-contract`` check on every run); :func:`diverge` -- a whole trace on memory too
large to fill, the model predicting every decision or following the engine's; and
:func:`contract_violation` -- the finding, under the two reference policies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import attrs

from checkers.invariants.deadline import HUNG, OpHung, op_deadline
from checkers.invariants.nversion import Shadow, contract_refusal
from checkers.invariants.shadow_terms import KEEP, TETHER, BlockFigures, InferFigures, Rules
from checkers.invariants.structural import Violation
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import TraceError, is_interrupt
from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.io.observations import AllocObs, HitObs, InferObs
from kvmodel.io.trace import Op
from kvmodel.lifecycle import MsgState
from kvmodel.memory import TierConfig
from kvmodel.policy import Policy, copy_rules

__all__ = [
    "COMPARE_BUDGET",
    "COMPARE_EVERY",
    "FULL_COMPARE_OPS",
    "ContractCoverage",
    "Divergence",
    "ample_config",
    "compare",
    "compare_state",
    "contract_violation",
    "diverge",
    "whole_state_due",
]

#: when the engine's whole state (every context and resident block) is compared with the contract
#: model: after each of a run's first ``FULL_COMPARE_OPS`` ops, then at least ``every`` ops apart
#: (the Monitor: ``COMPARE_EVERY``; the predicting self-check: 1) and far enough apart that the
#: comparison reads on average at most ``COMPARE_BUDGET`` resident blocks per op, and after a
#: run's last op. An op's inference figures and its message states are compared after every op.
#: 16, not 48: the stateful machine's examples are ~50 ops, and the full comparison was a fifth
#: of its time; the budget: on memory that never fills every block written stays resident, and a
#: whole comparison after every op made the self-check quadratic in the trace (spec/invariants.md,
#: Self-checks of the engine)
FULL_COMPARE_OPS = 16
COMPARE_EVERY = 4
COMPARE_BUDGET = 256


def whole_state_due(k: int, last: int, resident: int, every: int) -> bool:
    """Whether op ``k``'s comparison covers the whole state: ``last`` is the last op compared
    whole (-1 if none), ``resident`` the resident blocks (by the model's count)."""
    return k < FULL_COMPARE_OPS or k - last >= max(every, -(-resident // COMPARE_BUDGET))


@attrs.define
class ContractCoverage:
    """What one engine-beside-model run compared: the ops followed (every op's inference
    figures and message states), the ops after which the whole state was compared, and the most
    resident blocks one of those comparisons read."""

    ops: int = 0
    whole: int = 0
    widest: int = 0

    def __str__(self) -> str:
        return f"after {self.whole} of {self.ops} ops (up to {self.widest} resident blocks)"


@attrs.frozen
class Divergence:
    """The first disagreement between the engine and the shadow: after op ``op`` (0-based),
    ``what`` differs; ``engine`` and ``shadow`` are the two values."""

    op: int
    what: str
    engine: object
    shadow: object

    def __str__(self) -> str:
        return f"op {self.op}: {self.what}: engine {self.engine!r}, contract {self.shadow!r}"


# ------------------------------------------------------------------ running both


def ample_config(ops: Sequence[Op], block_size: int) -> EngineConfig:
    """One tier larger than every block the trace can write: no eviction, no rejection."""
    written = 0
    s = Shadow(block_size)
    for op in ops:
        s.apply(op)
        if s.last_infer is not None:
            written += s.last_infer.writes
    return EngineConfig(block_size, (TierConfig(TierName("hbm"), written + 1),))


def diverge(
    ops: Sequence[Op],
    policy: Callable[[], Policy],
    rules: Rules | None,
    *,
    block_size: int = 4,
    engine_class: type[Engine] | None = None,
    config: EngineConfig | None = None,
    coverage: ContractCoverage | None = None,
    tick: Callable[[], None] | None = None,
) -> Divergence | None:
    """Run the engine (``engine_class``, default the policy's own or the reference) beside the
    shadow; the first divergence, or ``None`` if they agree after every op (the whole state
    after the ops :func:`whole_state_due` picks, with no floor: every op while at most
    ``COMPARE_BUDGET`` blocks are resident, and the last).

    ``rules``: the shadow predicts every decision (memory that cannot fill: ``config`` defaults
    to :func:`ample_config`). ``None``: the shadow follows the engine's decisions from its log
    and checks everything else -- any policy, any ``config`` (default ample). ``coverage``:
    counts what was compared; ``tick``: called after each op compared."""
    pol = policy()
    cls: type[Engine] = (
        engine_class if engine_class is not None else getattr(pol, "engine_class", Engine)
    )
    cfg = config if config is not None else ample_config(ops, block_size)
    engine = cls(cfg, pol)
    shadow = Shadow(
        cfg.block_size,
        rules or KEEP,
        tiers=[t.name for t in cfg.tiers],
        exclusive=frozenset(t.name for t in cfg.tiers if t.copies == "exclusive"),
        copy_rules=copy_rules(pol),
    )
    cov = coverage if coverage is not None else ContractCoverage()
    last_whole = -1
    end = len(ops) - 1
    for k, op in enumerate(ops):
        seen = len(engine.log)
        try:
            with op_deadline(pol):
                engine.apply(op)
        except OpHung as err:
            return Divergence(k, "the engine or its policy", f"{HUNG} {err.seconds:g} s", "done")
        except TraceError as err:
            # bad input is the contract model's to say, never the engine's alone
            why = contract_refusal(ops[: k + 1])
            if why is not None:
                raise  # not a valid trace: no contract question
            return Divergence(k, "the engine refused valid input", repr(err), "accepted")
        except BaseException as err:
            if is_interrupt(err):
                raise
            return Divergence(k, "the engine raised", repr(err), "no error")
        records = engine.log.since(seen)
        shadow.apply(op, records if rules is None else None)
        if shadow.problems:
            return Divergence(k, "the log", shadow.problems[0], "what the contract allows")
        cov.ops += 1
        found = compare(k, engine, shadow, records)
        if found is None and (k == end or whole_state_due(k, last_whole, len(shadow.resident), 1)):
            cov.whole += 1
            cov.widest = max(cov.widest, len(shadow.resident))
            found = compare_state(k, engine, shadow, since=last_whole)
            last_whole = k
        if found is not None:
            return found
        engine.log.forget()  # (the op's records are read: a long trace holds none of them)
        if tick is not None:
            tick()
    return None


def compare(
    k: int,
    e: Engine,
    s: Shadow,
    records: Sequence[object],
    *,
    states: Mapping[ContextId, Mapping[int, MsgState]] | None = None,
) -> Divergence | None:
    """After op ``k``: the first field on which the engine (its view and the op's ``records``)
    and the shadow differ among what is compared after every op -- the op's inference figures
    (they exist only on the op itself) and every message's state (work proportional to the
    messages); the whole state is :func:`compare_state`'s, on :func:`whole_state_due`'s
    schedule. ``states``: every context's ``states()`` now, if the caller has them (the Monitor
    reads them for legal-transitions too)."""

    def differ(what: str, ev: object, sv: object) -> Divergence | None:
        return _differ(k, what, ev, sv)

    infer = next((r for r in records if isinstance(r, InferObs)), None)
    fig = s.last_infer
    if (infer is None) != (fig is None):
        return Divergence(k, "an infer record", infer, fig)
    if infer is not None and fig is not None:
        got = InferFigures(
            infer.prompt_tokens,
            infer.hit_tokens,
            infer.miss_tokens,
            infer.output_tokens,
            infer.own_blocks,
            sum(isinstance(r, HitObs) for r in records),
            sum(isinstance(r, AllocObs) for r in records),
        )
        if (d := differ(f"inference figures of {infer.ctx}", got, fig)) is not None:
            return d
    # the state of every message of every open context, every op: a state wrong for one op (a
    # pin that ends late) shows only on that op, which the whole-state comparison below meets
    # one time in COMPARE_EVERY (a closed context's messages are not compared: the model has
    # them all Expired for good, and no block is classed by them)
    for cid, c in s.ctxs.items():
        if not c.open:
            continue
        if states is not None:
            now = states.get(cid, {})
        else:
            ec = e.contexts.get(cid)
            now = {} if ec is None else ec.states()
        if now != c.state:
            keys = c.state.keys() | now.keys()
            uid = min(u for u in keys if now.get(u) is not c.state.get(u))
            what = f"state of message #{uid} of {cid}"
            return Divergence(k, what, now.get(uid), c.state.get(uid))
    return None


def compare_state(k: int, e: Engine, s: Shadow, *, since: int | None = None) -> Divergence | None:
    """After op ``k``: the first field of the whole state (every context and resident block) on
    which the engine and the shadow differ. ``since``: the last op compared whole before ``k``
    (the state was compared after some ops only), named in a divergence's ``what``."""
    found = _compare_state(k, e, s)
    if found is None or since is None or since == k - 1:
        return found
    seen = f"{found.what} (last compared whole after op {since})" if since >= 0 else found.what
    return attrs.evolve(found, what=seen)


def _differ(k: int, what: str, ev: object, sv: object) -> Divergence | None:
    return None if ev == sv else Divergence(k, what, ev, sv)


def _compare_state(k: int, e: Engine, s: Shadow) -> Divergence | None:
    def differ(what: str, ev: object, sv: object) -> Divergence | None:
        return _differ(k, what, ev, sv)

    view = e.view
    infos = {bid: view.block(BlockId(bid)) for bid in view.resident()}

    def key_of(bid: BlockId) -> BlockKey | None:
        info = infos.get(bid)
        return (info if info is not None else view.block(bid)).key

    for cid, c in s.ctxs.items():
        info = view.context(cid)
        shape = (info.is_open, info.messages, info.tokens, info.materialized_blocks)
        want = (c.open, len(c.seq), c.tokens(), len(c.chain))
        if d := differ(f"context {cid} (open, messages, tokens, chain)", shape, want):
            return d
        if not c.open:
            continue
        timing = (info.valid_blocks, info.phase, info.suspended_at, info.last_infer)
        phase = MsgState.ACTIVE if c.runnable else MsgState.SUSPENDED
        want_t = (c.valid, phase, c.suspended_at, c.last_infer)
        if d := differ(f"context {cid} (valid, phase, suspended at, last infer)", timing, want_t):
            return d
        chain = [key_of(b) for b in view.chain(cid)]
        if d := differ(f"chain of {cid}", chain, [key for key, _ in c.chain]):
            return d
    mine = s.blocks()
    theirs: dict[BlockKey, BlockFigures] = {}
    for bid, b in infos.items():
        if b.key is None:
            return Divergence(k, f"block {bid} at depth {b.depth}", "resident", "no full block")
        theirs[b.key] = BlockFigures(
            b.depth, b.state, tuple(b.holders), b.suspend_time, b.last_access, b.last_op,
            b.alloc_time,
        )  # fmt: skip
    if (d := differ("resident blocks (by key)", sorted(theirs), sorted(mine))) is not None:
        return d
    dead = sorted(dk for b in view.dead() if (dk := key_of(BlockId(b))) is not None)
    if (d := differ("dead blocks (by key)", dead, sorted(s.dead()))) is not None:
        return d
    for key in sorted(mine):
        if (d := differ(f"block {key}", theirs[key], mine[key])) is not None:
            return d
    return None


# ------------------------------------------------------------------ the self-check


def _reference_policies() -> tuple[tuple[str, Callable[[], Policy], Rules], ...]:
    from policies.kvtether import KVTether
    from policies.lru import LRU

    return (("lru", LRU, KEEP), ("kvtether", KVTether, TETHER))


def contract_violation(
    ops: Sequence[Op],
    engine_class: type[Engine] = Engine,
    *,
    block_size: int = 4,
    coverage: dict[str, ContractCoverage] | None = None,
    tick: Callable[[str], None] | None = None,
) -> Violation | None:
    """``engine-contract``: ``engine_class`` on ample memory, under LRU (no bypass, no reclaim)
    and under KVTether (bypass, eager reclaim), disagrees with :class:`Shadow`. ``None`` when it
    agrees or the trace is not valid (the reference engine raises a ``TraceError`` on it).
    ``coverage``: filled with what was compared under each reference policy, by its name;
    ``tick``: called with that name after each op compared."""
    from kvmodel.logical import Sequences

    check = Sequences(block_size)
    try:
        for op in ops:
            check.apply(op)
    except TraceError:
        return None
    config = ample_config(ops, block_size)
    for name, policy, rules in _reference_policies():
        cov = ContractCoverage()
        if coverage is not None:
            coverage[name] = cov
        try:
            step = None if tick is None else functools.partial(tick, name)
            d = diverge(
                ops, policy, rules, engine_class=engine_class, config=config, coverage=cov,
                tick=step,
            )  # fmt: skip
        except TraceError as err:  # a valid trace the engine under test refuses
            d = Divergence(len(ops), "the engine refused a valid trace", str(err), "no error")
        if d is not None:
            return Violation(
                "engine-contract",
                f"the engine under {name} on ample memory (block size {block_size}) disagrees "
                f"with the contract at op {d.op} on {d.what}: engine {d.engine!r}, contract "
                f"{d.shadow!r}",
                op=d.op,
            )
    return None
