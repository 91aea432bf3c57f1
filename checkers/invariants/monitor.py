"""The :class:`Monitor`: applies the selected invariants to one engine run, beside the contract
model (:class:`checkers.invariants.nversion.Shadow`)."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from checkers.invariants.contract import (
    COMPARE_EVERY,
    FULL_COMPARE_OPS,
    Divergence,
    compare,
    compare_state,
    whole_state_due,
)
from checkers.invariants.deadline import HUNG, OpHung, op_deadline
from checkers.invariants.inductive import (
    INDUCTIVE,
    StateTerms,
    declared,
    inductive_applies,
    wellformed,
)
from checkers.invariants.nversion import Shadow, contract_refusal
from checkers.invariants.predicates import (
    BLOCK,
    CONCRETE,
    BlockAt,
    block_name,
    contested,
    evict_live_before_dead,
    evict_mru,
    evict_priority,
    evict_rank_first,
    log_bypass,
    log_pinned,
    log_reclaim_dead,
    place_deterministic,
    reachable,
)
from checkers.invariants.registry import FINDINGS, invariant_names
from checkers.invariants.structural import (
    Violation,
    check_accounting,
    check_chains,
    check_prefix_closed,
)
from kvmodel.engine import Engine
from kvmodel.errors import PolicyError, TraceError, is_interrupt, policy_raised
from kvmodel.ids import BlockId, ContextId, TierName
from kvmodel.io.observations import (
    AllocObs,
    CopyObs,
    EvictObs,
    FreeObs,
    HitObs,
    InferObs,
    Observation,
)
from kvmodel.io.trace import Close, EndSession, Fork, Infer, Op, Open, Return
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.policy import Placement, copy_rules, declared_rank
from kvmodel.view import NewBlock

__all__ = [
    "COMPARE_EVERY",
    "FULL_COMPARE_OPS",
    "READS_CONTRACT",
    "Monitor",
]


#: the eviction-order invariants, judged at each eviction on the contract model's view of it
_EVICTION_ORDER = (
    ("no-live-eviction-before-dead-reclaim", evict_live_before_dead),
    ("state-priority-eviction", evict_priority),
    ("suspended-mru", evict_mru),
)
#: what the Monitor judges on the contract model (:class:`Shadow`): every eviction-time
#: invariant, ``no-stale-hit`` (the prompt's keys are the model's own packing) and the
#: ``engine-contract`` finding. A run that monitors none of these can leave the model out
#: (``contract=False``) and judge the rest exactly as it would with it: a shrinker's tries
#: (spec/invariants.md, Counterexamples)
READS_CONTRACT = frozenset(
    {"no-eviction-in-flight", "no-stale-hit", "engine-contract", *(n for n, _ in _EVICTION_ORDER)}
)


# ----------------------------------------------------------------------------- the monitor


@attrs.define
class _Pending:
    """What the monitor remembers across one op."""

    dead: set[BlockId] = attrs.field(factory=set)
    closing: bool = False
    #: the open context an inference runs on (no-stale-hit judges its kept prefix)
    ctx: ContextId | None = None


@functools.cache
def _dead_verdicts(state: BlockClass, was_dead: bool, closing: bool) -> tuple[bool, bool]:
    """no-zombie-kv and free-at-boundary on a resident block: their :data:`BLOCK` predicates,
    evaluated once per distinct (class, was Dead, closing) -- the only terms they read here."""
    terms = BlockAt(resident=True, state=state, was_dead=was_dead, closing=closing)
    return (
        bool(BLOCK["no-zombie-kv"](terms, CONCRETE)),
        bool(BLOCK["free-at-boundary"](terms, CONCRETE)),
    )


@functools.cache
def _model_left(
    state: BlockClass,
    no_holder: bool,
    temporary_kv: bool,
    indexed: bool,
    inductive: tuple[str, ...],
) -> tuple[str, ...]:
    """What a resident block of a quiescent state leaves of the parametric model: its
    well-formedness axiom and the ``inductive`` invariants, each evaluated once per distinct
    tuple of the terms they read (a cache of a few dozen answers, not one per block)."""
    terms = StateTerms(
        quiescent=True,
        resident=True,
        state=state,
        in_flight=False,
        holders=0 if no_holder else 1,
        temporary_kv=temporary_kv,
        indexed=indexed,
    )
    out = [] if wellformed(terms, CONCRETE) else ["the well-formedness axiom"]
    out += [f"the {c} inductive invariant" for c in inductive if not INDUCTIVE[c](terms, CONCRETE)]
    return tuple(out)


def _disagreement(d: Divergence | None) -> str:
    """An engine-contract finding's message for a divergence ("": none)."""
    return "" if d is None else f"the engine disagrees with the contract on {d}"


def _cannot_follow(err: Exception) -> str:
    """An engine-contract finding's message when the model cannot follow the engine's log."""
    return f"the contract model cannot follow the log: {type(err).__name__}: {err}"


class Monitor:
    """Checks the selected invariants on one engine run; installs itself as the engine's probe.

    Drive it with ``before_op(op)``, apply the op, then ``after_op(op)`` (or ``policy_error``
    if the engine refused a policy decision); ``violations`` accumulates results.
    """

    def __init__(
        self,
        engine: Engine,
        invariants: Iterable[str],
        *,
        endurance_years: float = 5.0,
        contract: bool = True,
    ) -> None:
        """``contract=False``: no contract model follows the engine, so no ``engine-contract``
        finding is made and the invariants that read the model (:data:`READS_CONTRACT`) judge
        nothing. For measuring what the model costs (benchmarks/bench_checkers.py) and for a
        shrinker's tries on an invariant that does not read it, never for a verdict."""
        # the findings are recorded whatever is asked
        invariants = invariant_names([n for n in invariants if n not in FINDINGS], default=())
        self.engine = engine
        self.active = frozenset(invariants)
        self.endurance_years = endurance_years
        self.violations: list[Violation] = []
        #: the run cannot go on (``apply`` returned False): the engine stopped in the middle of
        #: an op, in a state no trace reaches, so every later ``apply`` refuses at once
        self.stopped = False
        self.op_index = -1
        self._seen = 0
        #: the ops applied: if the engine refuses an op as bad input, the contract model
        #: decides, from them, whether the input was bad (whatever the engine's type: a patched
        #: reference is judged like any other engine)
        self._history: list[Op] = []
        #: each context's message states after the last op (legal-transitions)
        self._states: dict[ContextId, dict[int, MsgState]] = {}
        self._temp_indexed: set[BlockId] = set()
        self._pending = _Pending()
        self._writes: dict[str, int] = dict.fromkeys(engine.memory.names, 0)
        #: the policy's declarative rank, when it is its order: every victim must be its first
        self._rank = declared_rank(engine.policy)
        #: the parametric proofs' runtime side (spec/invariants.md §Parametric proofs): for a
        #: policy the parametric model reads, its well-formedness axiom and the inductive
        #: invariants its declarations make inductive, on every quiescent state
        self._parametric = declared(engine.policy).unsupported is None
        self._maybe_dead_at = -2
        self._maybe_dead_set: set[BlockId] = set()
        self._inductive = tuple(
            c for c in INDUCTIVE if self._parametric and inductive_applies(engine.policy, c)
        )
        #: the contract model, following the engine's log (None once it could not follow)
        self._shadow: Shadow | None = (
            Shadow(
                engine.block_size,
                tiers=engine.memory.names,
                capacity={t.name: t.blocks for t in engine.memory.tiers},
                rank=self._rank,
                exclusive=frozenset(t.name for t in engine.memory.tiers if t.copies == "exclusive"),
                copy_rules=copy_rules(engine.policy),
                copy_tiers=frozenset(t.name for t in engine.memory.tiers if t.copies_only),
            )
            if contract
            else None
        )
        self._diverged = False
        #: the last op after which the whole state was compared, and how many were
        self._last_whole = -1
        self.compared_whole = 0
        self._evict_tiers: list[tuple[TierName, ...]] = []
        self._place_tiers: list[tuple[TierName, ...]] = []
        #: eviction-order invariant -> evictions it constrained (:func:`contested`): how often
        #: the run put it to the test, whatever the verdict
        self.contested: Counter[str] = Counter()
        #: the most evictable blocks any eviction of the run chose among (in the contract
        #: model's view): how large a choice the run put the eviction order to
        self.widest_choice = 0
        #: the most contexts open at once in the run: how many agents the run had in flight
        self.most_open = 0
        engine.probe = self

    # -- plumbing

    def _add(
        self, name: str, message: str, block: BlockId | None = None, ctx: ContextId | None = None
    ) -> None:
        if name in self.active:
            self.violations.append(Violation(name, message, block, ctx, self.op_index))

    def first(self, name: str) -> Violation | None:
        return next((v for v in self.violations if v.invariant == name), None)

    # -- engine probe

    def before_evict(self, engine: Engine, victim: BlockId, tiers: tuple[TierName, ...]) -> None:
        """Remember which tiers the allocation could evict from; the eviction itself is judged
        after the op, on the contract model's view of that moment (no engine state is read)."""
        self._evict_tiers.append(tiers)

    def _evictions(self) -> None:
        if self._shadow is None or not self._shadow.evictions:
            return
        order = [(name, check) for name, check in _EVICTION_ORDER if name in self.active]
        names = [name for name, _ in order]
        for ev in self._shadow.evictions:
            victim = ev.victim.id
            self.widest_choice = max(self.widest_choice, ev.count)
            if ev.in_flight:
                self._add(
                    "no-eviction-in-flight", f"evicted in-flight {block_name(ev.victim)}", victim
                )
            # (the order invariants read a block's class and suspension alone: judged on one
            # block of each such pair, the first in key order -- shadow_terms.Eviction)
            for name, check in order:
                if (msg := check(ev.victim, ev.representatives)) is not None:
                    self._add(name, msg, victim)
            self.contested.update(contested(names, ev.victim, ev.representatives))
            first = () if ev.first_ranked is None else (ev.first_ranked,)
            if (
                self._rank is not None
                and not self._diverged
                and (msg := evict_rank_first(self._rank, ev.victim, first)) is not None
            ):
                # the engine's victim source (its rank index or sorted order) is judged, not
                # the policy: the finding is the engine's (spec, Self-checks of the engine)
                self._diverged = True
                self.violations.append(Violation("engine-contract", msg, victim, op=self.op_index))

    def _contract(
        self,
        op: Op,
        records: Sequence[Observation],
        states: dict[ContextId, dict[int, MsgState]] | None,
    ) -> None:
        """Follow the op in the contract model and compare (spec §Self-checks of the engine).
        ``states``: every context's message states now (None: compare reads them)."""
        # this op's, whether followed or not
        tiers, self._evict_tiers = self._evict_tiers, []
        places, self._place_tiers = self._place_tiers, []
        if self._shadow is None:
            return
        try:
            self._shadow.apply(op, records, tiers, places)
            if self._diverged:
                return
            if self._shadow.problems:
                msg = f"the log breaks the contract: {self._shadow.problems[0]}"
            else:
                # (the schedule: contract.whole_state_due; an op's figures and message states
                # on every op)
                k, used = self.op_index, len(self._shadow.resident)
                d = compare(k, self.engine, self._shadow, records, states=states)
                if d is None and whole_state_due(k, self._last_whole, used, COMPARE_EVERY):
                    d = self._compare_whole(self._shadow)
                msg = _disagreement(d)
        except Exception as err:
            self._shadow = None
            msg = _cannot_follow(err)
        self._contract_finding(msg)

    def _contract_finding(self, msg: str) -> None:
        """The contract model's finding, if ``msg`` says one (the run's first: the model has
        diverged from the engine, and stops comparing)."""
        if msg:
            self._diverged = True
            self.violations.append(Violation("engine-contract", msg, op=self.op_index))

    def _compare_whole(self, shadow: Shadow) -> Divergence | None:
        """The whole state after the current op, compared (and counted)."""
        since, self._last_whole = self._last_whole, self.op_index
        self.compared_whole += 1
        return compare_state(self.op_index, self.engine, shadow, since=since)

    def before_alloc(self, engine: Engine, block: NewBlock, placement: Placement) -> None:
        """Remember each new block's placement; which tier it took (or that none had a slot)
        is judged after the op, by the contract model."""
        self._place_tiers.append(tuple(placement.tiers))

    def after_place(
        self, engine: Engine, block: NewBlock, placement: Placement, slot: BlockId
    ) -> None:
        if "deterministic-placement" in self.active and block.key is not None:
            msg = place_deterministic(engine, block, slot)
            if msg is not None:
                self._add("deterministic-placement", msg, slot, block.ctx)

    # -- around ops

    def before_op(self, op: Op) -> None:
        e = self.engine
        self.op_index = e.op_index + 1
        p = _Pending(dead=set(e.dead))
        match op:
            case Close() | Return():
                p.closing = True
            case EndSession():
                p.closing = True
            case Infer():
                c = e.contexts.get(op.ctx)
                if c is not None and c.is_open:
                    p.closing = c.one_shot
                    p.ctx = c.id
        self._pending = p

    def apply(self, op: Op) -> bool:
        """Apply one op to the engine with the checks around it. False when the run cannot go
        on: the engine refused a policy decision, crashed, or (an engine other than the
        reference) refused as bad input an op the reference accepts (each recorded as a
        violation). Bad input (:class:`~kvmodel.errors.TraceError`) propagates.

        Once False, always False: the op that stopped the run may have stopped half-applied
        (a policy raising in the middle of an inference's admission leaves some of its blocks
        written), and what later ops did to that state would be findings no trace replays
        (spec/invariants.md, Findings)."""
        if self.stopped:
            return False
        self.before_op(op)
        try:
            with op_deadline(self.engine.policy):
                self.engine.apply(op)
        except OpHung as e:
            self._hung(e)
            return self._stop()
        except TraceError as e:
            why = contract_refusal([*self._history, op])
            if why is not None and why[0] == len(self._history):
                raise  # bad input: the contract refuses it too
            if why is None:
                where = "the engine refused valid input"
            else:  # (an earlier op the engine accepted is what the contract refuses)
                where = f"the engine accepted op {why[0]}, which the contract refuses ({why[1]})"
            self.internal_error(e, where=where)
            return self._stop()
        except PolicyError as e:
            self.policy_error(e)
            return self._stop()
        except BaseException as e:  # an engine that crashes is a finding, not a checker crash
            if is_interrupt(e):  # (SystemExit from the engine's code is a crash too)
                raise
            self.internal_error(e)
            return self._stop()
        self._history.append(op)
        try:
            self.after_op(op)
        except BaseException as e:  # a state the checks cannot read: reported with the trace
            if is_interrupt(e):
                raise
            self.internal_error(e, where="the monitor could not read the engine's state")
            return self._stop()
        return True

    def _hung(self, e: OpHung) -> None:
        name = "policy-protocol" if e.in_policy else "engine-internal"
        who = f"policy {self.engine.policy.name!r}" if e.in_policy else "the engine"
        msg = f"{who} {HUNG} {e.seconds:g} s (op {self.op_index}: a hang)"
        self.violations.append(Violation(name, msg, op=self.op_index))

    def call_policy(self, hook: str, fn: Callable[[], object]) -> bool:
        """Call the policy's ``hook`` outside an op (an offline policy's ``prepare``) as
        :meth:`apply` calls the engine: under the op deadline, whatever it raises but bad input
        (a ``TraceError``, which propagates) or an interrupt a finding that stops the run.
        False when it stopped the run."""
        try:
            with op_deadline(self.engine.policy):
                fn()
        except OpHung as e:
            self._hung(e)
            return self._stop()
        except TraceError:
            raise
        except BaseException as e:
            if is_interrupt(e):
                raise
            self.policy_error(policy_raised(self.engine.policy.name, hook, e))
            return self._stop()
        return True

    def _stop(self) -> bool:
        self.stopped = True
        return False

    def policy_error(self, err: PolicyError) -> None:
        name = {
            "evict-in-flight": "no-eviction-in-flight",
            "evict-pinned": "pinned-never-evicted",
            "bad-free": "accounting",  # freeing what is not resident: a double free
        }.get(err.kind)
        if name is not None and name in self.active:
            self._add(name, f"the engine refused the policy's choice: {err}")
        else:  # never lost: a refusal ends the run, so it is reported whatever is monitored
            self.violations.append(Violation("policy-protocol", str(err), op=self.op_index))

    def internal_error(self, err: BaseException, where: str = "the engine crashed") -> None:
        """The engine crashed (an ``InternalError`` or worse), or left a state the checks cannot
        read: a bug in the engine under test (or in a check), never a crash of the checker."""
        self.violations.append(
            Violation("engine-internal", f"{where}: {type(err).__name__}: {err}", op=self.op_index)
        )

    def after_op(self, op: Op) -> None:
        e = self.engine
        if isinstance(op, (Open, Fork)):  # (only an open or a fork adds an open context)
            n = sum(1 for c in e.contexts.values() if c.is_open)
            self.most_open = max(self.most_open, n)
        records = e.log.since(self._seen)
        self._seen = len(e.log)
        a = self.active
        # every context's message states, read once for legal-transitions and the contract
        # (without legal-transitions, the contract reads the open contexts' alone)
        now = (
            {cid: c.states() for cid, c in e.contexts.items()} if "legal-transitions" in a else None
        )
        self._contract(op, records, now)
        self._evictions()
        for r in records:
            if isinstance(r, AllocObs) or (isinstance(r, CopyObs) and r.result == "written"):
                self._writes[r.tier] += 1
        if "accounting" in a:
            for v in check_accounting(e):
                self._add("accounting", v.message, v.block)
            if e.movement is not None:  # copies hold free space only (spec/movement.md MV1)
                for tn in e.memory.names:
                    if (n := e.movement.copies.count(tn)) > e.memory.free_count(tn):
                        self._add(
                            "accounting",
                            f"tier {tn}: {n} copies in {e.memory.free_count(tn)} free slots",
                        )
            for tier, n in self._writes.items():
                if e.memory.writes[TierName(tier)] != n:
                    self._add(
                        "accounting",
                        f"tier {tier}: {e.memory.writes[TierName(tier)]} "
                        f"writes counted, {n} alloc and copy records",
                    )
        if "chains" in a:
            for v in check_chains(e):
                self._add("chains", v.message, v.block, v.ctx)
        if now is not None:
            for cid, states in now.items():
                before = self._states.get(cid, {})
                if states == before:  # (most contexts, most ops: one comparison in C)
                    continue
                for uid, s in states.items():
                    old = before.get(uid)
                    if old is not s and not reachable(old, s):
                        self._add(
                            "legal-transitions",
                            f"message #{uid} of {cid}: {old.value if old else 'absent'} -> "
                            f"{s.value}",
                            ctx=cid,
                        )
            self._states = now
        if "pinned-never-evicted" in a:
            for msg, b in log_pinned(records):
                self._add("pinned-never-evicted", msg, b)
        if "reclaim-dead-only" in a:
            for msg, b in log_reclaim_dead(records):
                self._add("reclaim-dead-only", msg, b)
        if "temporary-bypass" in a:
            self._temporary(records)
        elif "temporary-bypass" in self._inductive:  # (the symbolic-model check reads them)
            self._track_temporary(records)
        if "no-stale-hit" in a:
            self._stale(records)
        if "prefix-closed-residency" in a:
            for v in check_prefix_closed(e):
                self._add("prefix-closed-residency", v.message, v.block)
        if "no-zombie-kv" in a or ("free-at-boundary" in a and self._pending.closing):
            self._block_states()
        if self._parametric:
            self._symbolic_model()
        if "no-zombie-kv" in a and e.movement is not None and e.movement.copies.dead_count():
            key, tier = e.movement.copies.dead_copies()[0]
            self._add(
                "no-zombie-kv",
                f"{e.movement.copies.dead_count()} copies of dead KV kept below "
                f"(e.g. key {key} in tier {tier}; spec/movement.md MV6)",
            )

    def _block_states(self) -> None:
        """no-zombie-kv and free-at-boundary: their :data:`BLOCK` predicates over every resident
        block, its class read from the engine's view."""
        e, p = self.engine, self._pending
        zombie, killed = [], []
        # Both predicates need a Dead block. Reading every resident block's class through the
        # view each op doubled the cost of a checked replay, so the blocks judged are those that
        # can be Dead: in the engine's dead set, or held by no context (a holder list the engine
        # forgot to update shows here, as the ForgetsHolder mutant does). The predicate, on the
        # class the view computes, is still what decides.
        for bid in sorted(self._maybe_dead()):
            is_zombie, is_killed = _dead_verdicts(e.view.block(bid).state, bid in p.dead, p.closing)
            if is_zombie:
                zombie.append(bid)
            if is_killed:
                killed.append(bid)
        if zombie:
            zombie.sort()
            self._add(
                "no-zombie-kv",
                f"{len(zombie)} dead blocks resident (e.g. {self._named(zombie[0])})",
                zombie[0],
            )
        if killed:
            killed.sort()
            self._add(
                "free-at-boundary",
                f"{len(killed)} blocks killed by this op stay resident "
                f"(e.g. {self._named(killed[0])})",
                killed[0],
            )

    def _maybe_dead(self) -> set[BlockId]:
        """The resident blocks that can be Dead after this op: in the engine's dead set, or
        held by no context (a holder list the engine forgot to update shows here). Found once
        per op for every check that reads it."""
        if self._maybe_dead_at != self.op_index:
            e = self.engine
            self._maybe_dead_set = set(e.dead) | {
                bid for bid, b in e.blocks.items() if not b.holders
            }
            self._maybe_dead_at = self.op_index
        return self._maybe_dead_set

    def _symbolic_model(self) -> None:
        """The parametric model's axiom and inductive invariants on this quiescent state: a
        block that leaves one is a model that does not describe the engine (finding
        ``symbolic-model``). Read on the blocks that can break them -- those that can be Dead
        (held by no context, or in the dead set: a class is Dead only there, L5.2) and those
        holding KV written as Temporary -- not on every resident block. Where this op's
        no-zombie-kv or free-at-boundary check already read every block that can be Dead (the
        engine's view memoizes what it read), all of them; otherwise the blocks that died in
        this op, so a run that monitors neither pays for no scan of the resident blocks (a
        block that left the axiom is judged at the op it died in)."""
        e = self.engine
        if self._maybe_dead_at == self.op_index:
            judged = self._maybe_dead()
        else:
            judged = set(e.dead) - self._pending.dead
        if "temporary-bypass" in self._inductive:
            judged = judged | self._temp_indexed
        broken: dict[str, list[BlockId]] = {}
        temp, view, index = self._temp_indexed, e.view, e.index
        for bid in judged:
            b = e.blocks.get(bid)
            if b is None:
                continue
            key = b.spec.key
            left = _model_left(
                view.block(bid).state,
                not b.holders,
                bid in temp,
                key is not None and index.get(key) == bid,
                self._inductive,
            )
            for what in left:
                broken.setdefault(what, []).append(bid)
        for what, bids in broken.items():
            bids.sort()
            first = e.blocks[bids[0]]
            self.violations.append(
                Violation(
                    "symbolic-model",
                    f"{len(bids)} blocks leave {what} (e.g. {self._named(bids[0])}: "
                    f"{e.view.block(bids[0]).state.value}, {len(first.holders)} holders)",
                    bids[0],
                    op=self.op_index,
                )
            )

    def _named(self, bid: BlockId) -> str:
        """A resident block as a user finds it in a log: its slot and its hash-chain key (the
        name every log record carries, and the only one another implementation shares)."""
        b = self.engine.blocks.get(bid)
        return f"block {bid}" if b is None else f"block {bid} (key {b.spec.key})"

    def _temporary(self, records: Sequence[Observation]) -> None:
        for msg, b in log_bypass(records):
            self._add("temporary-bypass", msg, b)
        for r in records:
            if isinstance(r, HitObs) and BLOCK["temporary-bypass"](
                BlockAt(hit=True, temporary_kv=r.block in self._temp_indexed), CONCRETE
            ):
                self._add(
                    "temporary-bypass",
                    f"temporary block {r.block} (key {r.key}) served as a hit",
                    r.block,
                    r.ctx,
                )
        self._track_temporary(records)

    def _track_temporary(self, records: Sequence[Observation]) -> None:
        """The resident blocks holding KV written as Temporary, after ``records``."""
        for r in records:
            if isinstance(r, AllocObs) and r.state is BlockClass.TEMPORARY and not r.rewrite:
                self._temp_indexed.add(r.block)
            elif isinstance(r, EvictObs | FreeObs):
                self._temp_indexed.discard(r.block)

    def _stale(self, records: Sequence[Observation]) -> None:
        p = self._pending
        # the prompt's keys recomputed from the trace by B2-B3 (the contract model's own
        # packing of the inference it just followed), not read from the engine's context
        exp = self._shadow.last_prompt_keys if self._shadow is not None else None
        if p.ctx is None or exp is None:
            return
        infer = next((r for r in records if isinstance(r, InferObs)), None)
        if infer is None:
            return
        own = infer.own_blocks
        if own > len(exp):
            self._add(
                "no-stale-hit",
                f"{own} blocks kept but the prompt has only {len(exp)} full blocks",
                ctx=p.ctx,
            )
            return
        c = self.engine.contexts.get(infer.ctx)
        if c is not None and c.is_open:
            kept = [s.key for s in c.materialized[:own]]
            if kept != exp[:own]:
                # the first depth that differs, or the shorter length when one is a prefix
                d = next(
                    (i for i, (x, y) in enumerate(zip(kept, exp, strict=False)) if x != y),
                    min(len(kept), own),
                )
                self._add(
                    "no-stale-hit",
                    f"kept block at depth {d} does not match the prompt (invalidated KV served)",
                    ctx=p.ctx,
                )
        depth = own
        for r in records:
            if isinstance(r, HitObs):
                if r.depth != depth or r.depth >= len(exp) or r.key != exp[r.depth]:
                    self._add(
                        "no-stale-hit",
                        f"hit at depth {r.depth} does not match the prompt's chain",
                        r.block,
                        r.ctx,
                    )
                depth += 1

    def at_end(self) -> None:
        """The run ended: its whole state compared, if its last op was not, and the endurance
        budget judged."""
        shadow = self._shadow
        done = self.stopped or self._diverged or self._last_whole == self.op_index
        if shadow is not None and not done:
            try:
                msg = _disagreement(self._compare_whole(shadow))
            except Exception as err:
                msg = _cannot_follow(err)
            self._contract_finding(msg)
        if "endurance-budget" not in self.active:
            return
        e = self.engine
        st = e.stats
        seconds = (st.t_last or 0.0) - (st.t_first or 0.0)
        for t in e.memory.tiers:
            years = e.memory.device_years(t.name, seconds)
            if years is not None and years < self.endurance_years:
                self._add(
                    "endurance-budget",
                    f"tier {t.name}: {years:.3g} device-years < {self.endurance_years:g}",
                )

    def summary(self) -> dict[str, Any]:
        return {"violations": [attrs.asdict(v) for v in self.violations]}
