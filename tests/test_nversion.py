"""The engine against an independent computation of the contract (checkers/invariants/nversion.py).

The shadow shares no code with the engine's admission path; on memory too large to fill, the two
must agree after every op, on every field (spec/invariants.md §Self-checks of the engine).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

import attrs
import numpy as np
import pytest

from checkers.invariants import INVARIANTS
from checkers.invariants.contract import (
    COMPARE_BUDGET,
    COMPARE_EVERY,
    FULL_COMPARE_OPS,
    ContractCoverage,
    contract_violation,
    diverge,
    whole_state_due,
)
from checkers.invariants.monitor import READS_CONTRACT, Monitor
from checkers.invariants.nversion import Shadow
from checkers.invariants.replay import check_ops, engine_for
from checkers.invariants.shadow_candidates import Candidates, Pool
from checkers.invariants.shadow_state import ShadowState
from checkers.invariants.shadow_terms import (
    KEEP,
    TETHER,
    BlockFigures,
    Eviction,
    EvictionTerms,
    ShadowContext,
)
from checkers.search.engine_check import SELF_CHECK_BLOCK_SIZES, engine_self_check
from checkers.search.engine_mutants import ENGINE_MUTANTS
from checkers.search.swarm import draw_config
from kvmodel import EngineConfig, TierConfig
from kvmodel._engine_view import EngineView, Features
from kvmodel._resident import ResidentBlock
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, BlockKey, ContextId, MessageId, SessionId, TierName
from kvmodel.io.observations import FreeObs, InferObs, Observation
from kvmodel.io.trace import Append, Close, Fork, Infer, Op, Open, Pin, Remove, Return, TurnEnd
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.messages import AgentKind, Message, MessageKind, Role
from kvmodel.policy import Placement, RankTerm, rank_key, registered_policies, resolve_policy
from kvmodel.replay import replay
from kvmodel.view import ModelView, NewBlock
from kvmodel.workloads.agentic import AgenticParams, generate_agentic
from kvmodel.workloads.random_ops import RandomParams, random_trace
from policies.kvtether import KVTether
from policies.lru import LRU

RULES = [(LRU, KEEP), (KVTether, TETHER)]


def msg(mid: str, tokens: int, kind: MessageKind = MessageKind.USER) -> Message:
    return Message(MessageId(mid), Role.USER, kind, tokens)


@pytest.mark.parametrize("block_size", SELF_CHECK_BLOCK_SIZES)
@pytest.mark.parametrize(("policy", "rules"), RULES, ids=["keep", "tether"])
def test_reference_engine_agrees_with_the_contract_on_random_traces(
    block_size: int, policy: type[LRU], rules: object
) -> None:
    # 15 fixed seeds x every op kind: derandomized, a failure names its seed
    for seed in range(15):
        trace = random_trace(RandomParams(seed=seed, ops=70))
        d = diverge(trace.ops, policy, rules, block_size=block_size)  # type: ignore[arg-type]
        assert d is None, f"seed {seed}: {d}"


def test_reference_engine_agrees_on_a_generated_agent_workload() -> None:
    trace = generate_agentic(AgenticParams(seed=3, sessions=2, turns=2, p_fork=0.5))
    for policy, rules in RULES:
        assert diverge(trace.ops, policy, rules, block_size=16) is None


def test_golden_figures_of_a_fork_a_strip_and_a_return() -> None:
    # block size 4: sys 8 tokens = 2 blocks; the fork holds them from its creation (P5)
    ops: list[Op] = [
        Open(0.0, "a", "s", "main"),  # type: ignore[arg-type]
        Append(0.0, "a", (msg("sys", 8, MessageKind.SYSTEM), msg("q", 3))),  # type: ignore[arg-type]
        Infer(1.0, "a", (msg("r", 4, MessageKind.REASONING), msg("o", 2)), 0.5),  # type: ignore[arg-type]
        Fork(2.0, "b", "a"),  # type: ignore[arg-type]
        Pin(2.0, "b", 0, 1),  # type: ignore[arg-type]
        TurnEnd(3.0, "a"),  # type: ignore[arg-type]
        Infer(4.0, "b"),  # type: ignore[arg-type]
        Remove(5.0, "a", 1),  # type: ignore[arg-type]
        Return(6.0, "b", "a", msg("res", 5)),  # type: ignore[arg-type]
        Infer(7.0, "a"),  # type: ignore[arg-type]
    ]
    s = Shadow(4)
    figures = []
    for op in ops:
        s.apply(op)
        if s.last_infer is not None:
            f = s.last_infer
            figures.append((f.prompt_tokens, f.hit_tokens, f.own_blocks, f.hits, f.writes))
    # (prompt, hit tokens, own blocks, hits, writes), worked by hand from the spec:
    # a: 11 prompt tokens, nothing cached; with the output 17 tokens = 4 full blocks + 1 partial
    # b: the fork holds a's 4 valid blocks, all inside its 17 tokens (P5): only the partial
    #    tail is written
    # a: the strip (valid 11//4 = 2), the remove of q (8//4 = 2) and the result leave sys, o,
    #    res = 15 tokens: blocks 0-1 kept by count, block 2 (o + res[0:2]) and the partial
    #    block 3 written
    assert figures == [(11, 0, 0, 0, 5), (17, 16, 4, 0, 1), (15, 8, 2, 0, 2)]
    for policy, rules in RULES:
        assert diverge(ops, policy, rules, block_size=4) is None


@pytest.mark.parametrize("mutant", sorted(ENGINE_MUTANTS))
def test_every_engine_mutant_diverges_from_the_contract(mutant: str) -> None:
    engine = resolve_policy(mutant).engine_class  # type: ignore[attr-defined]
    found = engine_self_check(engine, traces=8)
    assert found is not None, mutant
    assert found.one_minimal
    assert contract_violation(found.ops, engine, block_size=found.config.block_size) == (
        found.violation
    )
    assert contract_violation(found.ops, Engine, block_size=found.config.block_size) is None


def test_invalid_traces_are_no_contract_question() -> None:
    # inferring on an unknown context: the reference engine refuses it, so no verdict
    assert contract_violation([Infer(0.0, "nope")]) is None  # type: ignore[arg-type]


ONLINE = sorted(
    p for p in registered_policies() if not callable(getattr(resolve_policy(p), "prepare", None))
)


@pytest.mark.parametrize("policy", ONLINE)
def test_reference_engine_agrees_when_followed_under_pressure(policy: str) -> None:
    # the shadow takes every policy decision from the log (victims, bypasses, reclaims,
    # rejections) and checks the rest, on a swarm of small engines where these traces evict,
    # spill and reject
    cls = type(resolve_policy(policy))
    evictions = rejections = 0
    for seed in range(12):
        trace = random_trace(RandomParams(seed=seed, ops=60))
        config = draw_config(np.random.default_rng([seed, 7]))
        assert diverge(trace.ops, cls, None, config=config) is None, f"seed {seed}"
        e = replay(trace, policy, config).engine
        evictions += sum(e.stats.evictions.values())
        rejections += e.stats.rejected
    assert evictions  # the comparison ran under pressure
    assert rejections


def test_a_contexts_deadlines_are_exactly_its_pinned_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ShadowContext.pin_depth and Shadow._end_pins read a context with no deadline as having no
    # Pinned message: after every op, in both modes, the deadlines' keys are the Pinned ones
    apply = Shadow.apply
    pinned_ops = 0

    def checked(self: Shadow, op: Op, *args: object, **kwargs: object) -> None:
        nonlocal pinned_ops
        apply(self, op, *args, **kwargs)  # type: ignore[arg-type]
        for c in self.ctxs.values():
            pinned = {u for u, st in c.state.items() if st is MsgState.PINNED}
            assert set(c.deadline) == pinned, (op, c.id)
            pinned_ops += bool(pinned)

    monkeypatch.setattr(Shadow, "apply", checked)
    for seed in range(12):
        trace = random_trace(RandomParams(seed=seed, ops=60))
        assert diverge(trace.ops, LRU, KEEP) is None
        config = draw_config(np.random.default_rng([seed, 7]))
        assert diverge(trace.ops, KVTether, None, config=config) is None
    assert pinned_ops > 100, pinned_ops  # pins were held, and ended, along the way


def _follow_under_pressure(policies: Sequence[str], seeds: int) -> None:
    """Check random traces under each policy on swarm engines of 1-3 tiers, where they evict,
    spill, bypass, reject and reclaim; the reference engine agrees with the contract model."""
    for policy in policies:
        for seed in range(seeds):
            trace = random_trace(RandomParams(seed=seed, ops=60))
            config = draw_config(np.random.default_rng([seed, 7]))
            run = check_ops(trace.ops, policy, config, INVARIANTS)
            if ":" not in policy:  # (a mutant's findings are its own)
                assert not [v for v in run.violations if v.invariant == "engine-contract"], seed


def test_the_contract_models_kept_figures_are_those_computed_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the model keeps each tier's resident count as blocks are indexed and leave (its free-slot
    # checks read it at every eviction and new block), and judges an op's reclaims from holders
    # found once and again only after a drop cut a chain: after every op and at every look, the
    # count is what counting the resident blocks by tier gives, and every block's figures read
    # from kept holders are those computed afresh -- including reclaims of live blocks, whose
    # drops cut chains (DropsForkPrefix frees a prefix a fork still holds)
    apply, free_slots, figures, drop = (
        Shadow.apply,
        Shadow._free_slots,
        ShadowState.figures,
        Shadow._drop,
    )
    looks = kept = cuts = 0

    def counted(self: Shadow) -> Counter[str]:
        return Counter(t for k in self.resident if (t := self.tier.get(k)) is not None)

    def checked(self: Shadow, op: Op, *args: object, **kwargs: object) -> None:
        apply(self, op, *args, **kwargs)  # type: ignore[arg-type]
        assert +self._used == counted(self), op

    def looked(self: Shadow, loose: Counter[str]) -> dict[str, int]:
        nonlocal looks
        assert +self._used == counted(self)
        looks += 1
        return free_slots(self, loose)

    def fresh(self: ShadowState, key: BlockKey, *memo: object) -> BlockFigures:
        nonlocal kept
        got = figures(self, key, *memo)  # type: ignore[arg-type]
        if memo:
            kept += 1
            assert got == figures(self, key), key
        return got

    def dropped(self: Shadow, key: BlockKey) -> list[tuple[BlockKey, ShadowContext]]:
        nonlocal cuts
        cut = drop(self, key)
        cuts += bool(cut)
        return cut

    monkeypatch.setattr(Shadow, "apply", checked)
    monkeypatch.setattr(Shadow, "_free_slots", looked)
    monkeypatch.setattr(ShadowState, "figures", fresh)
    monkeypatch.setattr(Shadow, "_drop", dropped)
    _follow_under_pressure(
        ("lru", "kvtether", "hbm-first", "lachesis-det", "checkers.search.mutants:DropsForkPrefix"),
        10,
    )
    assert looks > 500, looks
    assert kept > 1000, kept
    assert cuts > 10, cuts


def test_a_reclaim_that_cuts_a_chain_is_followed_by_classes_computed_again() -> None:
    # a policy frees a prefix a fork still holds (DropsForkPrefix, at the source's close): the
    # first reclaim drops a live block and cuts the fork's chain there, so the blocks below
    # it are Dead when they are reclaimed next, in the same op. The model judges an op's
    # reclaims from holders kept across them, found again after a cut: kept past it, they
    # named the fork as a holder and made a false finding (reclaim of block 1 logged as
    # dead; it is expired)
    c, f = ContextId("c"), ContextId("f")
    ops: list[Op] = [
        Open(0.0, c, SessionId("s"), AgentKind.MAIN),
        Append(0.0, c, (msg("m", 13),)),
        Infer(1.0, c, (), 0.5),
        Fork(2.0, f, c, None),
        Close(3.0, c),
    ]
    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), 16),))
    run = check_ops(ops, "checkers.search.mutants:DropsForkPrefix", cfg, INVARIANTS)
    frees = [o.state for o in run.engine.log if isinstance(o, FreeObs)]
    assert frees == [BlockClass.ACTIVE] * 2 + [BlockClass.DEAD] * 2
    assert [v.invariant for v in run.violations] == ["reclaim-dead-only"]


def _scanned(
    s: ShadowState,
    victim: BlockKey,
    tiers: Sequence[str],
    flight: set[BlockKey],
    pins: dict[ContextId, int],
    rank: tuple[RankTerm, ...] | None,
) -> Eviction:
    """An eviction's summary from a scan of every resident block, every block's holders and
    terms found afresh: the definition the kept candidates (shadow_candidates.Candidates) must
    equal."""
    holders, pins = s._holders(pins)
    cands = [
        info
        for key in sorted(s.resident)
        if key != victim and key not in flight and s.tier[key] in tiers
        if (info := s.evictable(key, holders, pins)).state is not BlockClass.PINNED
    ]
    reps: dict[tuple[BlockClass, float | None], EvictionTerms] = {}
    for c in cands:  # (in key order: the first of each pair)
        reps.setdefault((c.state, c.suspend_time), c)
    first = min(cands, key=lambda c: rank_key(rank, c)) if rank is not None and cands else None
    mine = s.evictable(victim, holders, pins)
    return Eviction(mine, tuple(reps.values()), victim in flight, len(cands), first)


def test_an_inferences_evictions_are_judged_as_a_scan_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # within one inference the model keeps the evictable blocks and their terms, computing a
    # block's terms again only when a drop cut its holders, and across inferences the blocks
    # no op touched and no context whose stamp moved holds (spec/invariants.md, Where it runs):
    # each eviction's summary equals one made from a scan of every resident block, every
    # block's terms computed afresh at the same moment
    judge = Candidates.eviction
    cut = Candidates.cut
    evictions = reused = recut = moved = ranked = several = 0
    judged: set[int] = set()

    def both(self: Candidates, victim: BlockKey, tiers: Sequence[str]) -> Eviction:
        nonlocal evictions, reused, ranked, several
        want = _scanned(self.shadow, victim, tiers, self.flight, self.memo.pins, self.rank)
        reused += id(self) in judged  # (a later eviction of one inference: the kept blocks)
        judged.add(id(self))
        got = judge(self, victim, tiers)
        assert got == want
        evictions += 1
        ranked += got.first_ranked is not None
        several += len(got.representatives) > 1
        return got

    def counted(
        self: Candidates, victim: BlockKey, lost: list[tuple[BlockKey, ShadowContext]]
    ) -> None:
        nonlocal recut, moved
        was = {k: self.memo.terms.get(k) for k, _ in lost if k != victim}
        recut += sum(t is not None for t in was.values())
        cut(self, victim, lost)
        moved += sum(
            t is not None and (n := self.memo.terms.get(k)) is not None and n.state is not t.state
            for k, t in was.items()
        )

    affected = Pool.affected
    carried = 0

    def synced(
        self: Pool,
        shadow: ShadowState,
        stamps: dict[ContextId, tuple[object, ...]],
        flight: set[BlockKey],
    ) -> set[BlockKey]:
        nonlocal carried
        out = affected(self, shadow, stamps, flight)
        carried += len(shadow.resident - out)
        return out

    monkeypatch.setattr(Candidates, "eviction", both)
    monkeypatch.setattr(Candidates, "cut", counted)
    monkeypatch.setattr(Pool, "affected", synced)
    # (hbm-first's evictions cut chains below other candidates; these seeds' lru's do not)
    _follow_under_pressure(("lru", "kvtether", "hbm-first", "hbm-first-static"), 40)
    # candidates an earlier inference found were carried to the next without being looked at
    # again (shadow_candidates.Pool), and every summary still equals the scan's
    assert carried > 500, carried
    # the kept blocks were judged on again, a candidate's holders were cut under them (its terms
    # computed again, its class changed), the rank's first was named, and evictions chose among
    # several classes
    assert evictions > 200, evictions
    assert reused > 50, reused
    assert recut > 0, recut
    assert moved > 0, moved  # (a cut changed a kept block's class: its old entries are stale)
    assert ranked > 100, ranked
    assert several > 50, several


def test_terms_kept_across_inferences_follow_a_pin_that_changes_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pin changes its context's message states and nothing else (no message, chain or
    phase): the candidates an earlier eviction found among its blocks (Suspended) must not be
    carried over once the pin makes them Pinned (ShadowContext.stamp counts every state change,
    shadow_candidates.Pool). Each eviction's summary is compared with a scan's."""
    judge = Candidates.eviction
    judged = []

    def both(self: Candidates, victim: BlockKey, tiers: Sequence[str]) -> Eviction:
        want = _scanned(self.shadow, victim, tiers, self.flight, self.memo.pins, self.rank)
        got = judge(self, victim, tiers)
        assert got == want
        judged.append(got)
        return got

    monkeypatch.setattr(Candidates, "eviction", both)
    ops: list[Op] = []
    for t, ctx in ((0.0, "b"), (1.0, "a")):  # b's blocks the least recently used
        ops += [
            Open(t, ctx, f"s{ctx}", "main"),  # type: ignore[arg-type]
            Append(t, ctx, (msg(f"{ctx}0", 8),)),  # type: ignore[arg-type]
            Infer(t, ctx),  # type: ignore[arg-type]
        ]
    ops += [
        Open(2.0, "c", "sc", "main"),  # type: ignore[arg-type]
        Append(2.0, "c", (msg("c0", 4),)),  # type: ignore[arg-type]
        Infer(2.0, "c"),  # type: ignore[arg-type]  # evicts one of b's: a's terms are kept
        Pin(3.0, "a", 0, 1),  # type: ignore[arg-type]
        Open(4.0, "d", "sd", "main"),  # type: ignore[arg-type]
        Append(4.0, "d", (msg("d0", 8),)),  # type: ignore[arg-type]
        Infer(4.0, "d"),  # type: ignore[arg-type]  # a's blocks are Pinned now: no candidates
    ]
    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), 4),))
    run = check_ops(ops, "lru", cfg, INVARIANTS)
    assert not [v for v in run.violations if v.invariant == "engine-contract"]
    assert len(judged) == 3
    # the last eviction chose among the blocks of b and c alone: a's two are pinned
    assert {h for e in judged[1:] for r in e.representatives for h in r.holders} <= {"b", "c"}
    assert judged[0].count > judged[-1].count


@pytest.mark.parametrize("mutant", sorted(ENGINE_MUTANTS))
def test_every_engine_mutant_diverges_when_followed_under_pressure(mutant: str) -> None:
    engine = resolve_policy(mutant).engine_class  # type: ignore[attr-defined]
    found = []
    for seed in range(30):
        trace = random_trace(RandomParams(seed=seed, ops=60))
        config = draw_config(np.random.default_rng([seed, 7]))
        found.append(diverge(trace.ops, LRU, None, config=config, engine_class=engine))
        if found[-1] is not None:
            break
    assert found[-1] is not None, mutant


class _LyingView(EngineView):
    """Shows every Suspended block as Active (and so hides MRU order from the policy)."""

    def features(self, b: ResidentBlock) -> Features:
        f = super().features(b)
        if f.state is BlockClass.SUSPENDED:
            return f._replace(state=BlockClass.ACTIVE, suspend_time=None)
        return f


class _LyingEngine(Engine):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.use_view(_LyingView(self))


class _TetherOnALyingEngine(KVTether):
    engine_class = _LyingEngine


def test_the_monitor_judges_evictions_by_the_contract_not_by_the_engines_view() -> None:
    # an engine whose view lies about classes: a monitor reading that view would find the
    # policy's order consistent with it; the monitor reads the contract model's classes instead
    found: set[str] = set()
    for seed in range(30):
        trace = random_trace(RandomParams(seed=seed, ops=60))
        config = draw_config(np.random.default_rng([seed, 7]))
        run = check_ops(trace.ops, _TetherOnALyingEngine(), config, list(INVARIANTS))
        found |= {v.invariant for v in run.violations}
    assert "engine-contract" in found
    assert found & {"state-priority-eviction", "suspended-mru"}
    # the honest engine, same traces: none of them
    for seed in range(30):
        trace = random_trace(RandomParams(seed=seed, ops=60))
        config = draw_config(np.random.default_rng([seed, 7]))
        run = check_ops(trace.ops, KVTether(), config, list(INVARIANTS))
        assert not {v.invariant for v in run.violations} & {
            "engine-contract",
            "state-priority-eviction",
            "suspended-mru",
            "no-live-eviction-before-dead-reclaim",
        }, seed


def _whole_state_ops(n: int, resident: int, every: int) -> list[int]:
    """The ops of an ``n``-op run that whole_state_due picks, ``resident`` blocks throughout."""
    last, picked = -1, []
    for k in range(n):
        if whole_state_due(k, last, resident, every):
            picked.append(k)
            last = k
    return picked


class _MiscountsOneOutput(Engine):
    """Logs one inference's output tokens one too many: an error in a record alone, with the
    state right, so only a comparison on that very op can see it."""

    wrong_op: ClassVar[int] = 50

    def apply(self, op: Op) -> None:
        start = len(self.log)
        super().apply(op)
        if self._ops_seen == self.wrong_op:
            recs = self.log.records
            for i in range(start, len(recs)):
                if isinstance(r := recs[i], InferObs):
                    recs[i] = attrs.evolve(r, output_tokens=r.output_tokens + 1)
        self._ops_seen += 1

    _ops_seen = 0


class _TetherMiscounting(KVTether):
    engine_class = _MiscountsOneOutput


def _miscounted_ops() -> list[Op]:
    """One context appending and inferring; op ``_MiscountsOneOutput.wrong_op`` is an infer."""
    ctx = ContextId("c")
    ops: list[Op] = [Open(0.0, ctx, SessionId("s"), AgentKind.MAIN)]
    while len(ops) < 60:
        t = float(len(ops))
        ops.append(Append(t, ctx, (msg(f"u{len(ops)}", 3),)))
        ops.append(
            Infer(
                t, ctx, (Message(MessageId(f"a{len(ops)}"), Role.ASSISTANT, MessageKind.OUTPUT, 2),)
            )
        )
    assert isinstance(ops[_MiscountsOneOutput.wrong_op], Infer)
    return ops


def test_an_ops_inference_figures_are_compared_on_every_op() -> None:
    """spec/invariants.md, Self-checks of the engine: the state comparison is sampled after
    FULL_COMPARE_OPS, the inference figures never are. The wrong record is on op 50, past the
    full prefix and between two samples."""
    k = _MiscountsOneOutput.wrong_op
    assert k >= FULL_COMPARE_OPS
    assert k not in _whole_state_ops(60, 100, COMPARE_EVERY)
    ops = _miscounted_ops()
    config = EngineConfig(4, (TierConfig(TierName("hbm"), 1024),))
    run = check_ops(ops, _TetherMiscounting(), config, ["engine-contract"])
    [v] = run.violations
    assert v.op == k
    assert "inference figures" in v.message
    assert not check_ops(ops, KVTether(), config, ["engine-contract"]).violations


def test_message_states_are_compared_on_every_op() -> None:
    """A state wrong on one op alone -- a TTL pin that an outside author's engine ends one op
    late (PinEndsLate) -- is found on that op, though it falls between two samples of the
    whole-state comparison; the reference engine agrees on the same trace."""
    from checkers.search.outside_mutants import PinEndsLateTether

    k = FULL_COMPARE_OPS + 1  # the op at the pin's deadline: past the full prefix, unsampled
    assert k not in _whole_state_ops(k + 2, 100, COMPARE_EVERY)
    c = ContextId("c")
    ops: list[Op] = [
        Open(0.0, c, SessionId("s"), AgentKind.MAIN),
        Append(0.0, c, (msg("sys", 6, MessageKind.SYSTEM),)),
        Pin(0.0, c, 0, 1, float(k)),
    ]
    ops += [Append(float(i), c, (msg(f"u{i}", 2),)) for i in range(len(ops), k + 2)]
    assert ops[k].t == k
    config = EngineConfig(4, (TierConfig(TierName("hbm"), 1024),))
    [v] = check_ops(ops, PinEndsLateTether(), config, ["engine-contract"]).violations
    assert v.op == k
    assert "state of message #0 of c" in v.message
    assert not check_ops(ops, KVTether(), config, ["engine-contract"]).violations


def test_the_whole_state_is_compared_on_a_budget() -> None:
    """spec/invariants.md, Self-checks of the engine: the first FULL_COMPARE_OPS ops, then at
    least ``every`` ops apart and ceil(resident / COMPARE_BUDGET) apart."""
    assert (FULL_COMPARE_OPS, COMPARE_EVERY, COMPARE_BUDGET) == (16, 4, 256)
    assert _whole_state_ops(30, 10, COMPARE_EVERY) == [*range(16), 19, 23, 27]  # the Monitor
    assert _whole_state_ops(30, 256, 1) == list(range(30))  # the predicting self-check
    assert _whole_state_ops(30, 257, 1) == [*range(16), 17, 19, 21, 23, 25, 27, 29]
    assert _whole_state_ops(40, 1025, COMPARE_EVERY) == [*range(16), 20, 25, 30, 35]
    # past the first ops, at most COMPARE_BUDGET blocks read per op on average
    for resident in (300, 5_000, 100_000):
        late = [k for k in _whole_state_ops(2_000, resident, 1) if k >= FULL_COMPARE_OPS]
        assert late
        assert resident * len(late) <= COMPARE_BUDGET * (2_000 - FULL_COMPARE_OPS) + resident


class _AgesADeadBlock(Engine):
    """After op ``at``, sets a Dead block's last use one second back: a block figure wrong from
    then on (no later op touches the block), in the state alone -- no record shows it."""

    at: ClassVar[int] = 0

    def apply(self, op: Op) -> None:
        super().apply(op)
        if self._ops_seen == self.at:
            b = self.residency.blocks[min(self.dead)]
            b.touch -= 1.0
            self.residency.bump_block(b)  # (as every change to a block's features does)
        self._ops_seen += 1

    _ops_seen = 0


def _dead_then_growing(rounds: int) -> list[Op]:
    """Context a writes 5 blocks (of 4 tokens) and closes; context b then grows by 16 blocks a
    round (append + infer): over 256 resident blocks after 16 rounds, 965 after 60."""
    a, b, s = ContextId("a"), ContextId("b"), SessionId("s")
    ops: list[Op] = [
        Open(0.0, a, s, AgentKind.MAIN),
        Append(0.0, a, (msg("a0", 20),)),
        Infer(0.0, a),
        Close(0.0, a),
        Open(0.0, b, s, AgentKind.MAIN),
    ]
    for i in range(rounds):
        ops += [Append(float(i), b, (msg(f"b{i}", 64),)), Infer(float(i), b)]
    return ops


@pytest.mark.parametrize("where", ["between", "last"])
def test_a_lasting_wrong_figure_is_found_past_the_budget(where: str) -> None:
    """The predicting self-check compares the whole state further apart once over
    COMPARE_BUDGET blocks are resident; a block figure that goes wrong between two comparisons
    and stays wrong is found at the next (the finding names the last op compared before it), and
    one that goes wrong on the last op by the comparison after the last op."""
    ops = _dead_then_growing(60)
    n = len(ops)
    cov = ContractCoverage()
    assert diverge(ops, LRU, KEEP, coverage=cov) is None
    assert cov.ops == n
    assert cov.widest > 3 * COMPARE_BUDGET
    assert FULL_COMPARE_OPS < cov.whole < n - 20  # the budget spaced the late comparisons
    at = n - 4 if where == "between" else n - 1
    aged = type("_Aged", (_AgesADeadBlock,), {"at": at})
    d = diverge(ops, LRU, KEEP, engine_class=aged)
    assert d is not None
    assert at <= d.op <= at + 3
    assert d.what.startswith("block ")
    assert "last compared whole after op" in d.what
    since = int(d.what.rsplit(" ", 1)[1].rstrip(")"))
    assert since < at  # the divergence arose between the two comparisons
    assert d.engine != d.shadow
    # the same run on a short trace is compared after every op: found on the op itself
    short = _dead_then_growing(6)
    d = diverge(short, LRU, KEEP, engine_class=type("_Aged", (_AgesADeadBlock,), {"at": 8}))
    assert d is not None
    assert d.op == 8
    assert "last compared" not in d.what


def test_the_monitor_compares_the_whole_state_after_the_last_op() -> None:
    """A wrong block figure on a run's last op, which the Monitor's sampling skips, is found by
    the comparison at the end of the run (Monitor.at_end)."""
    ops = _dead_then_growing(11)
    k = len(ops) - 1
    assert _whole_state_ops(len(ops), 100, COMPARE_EVERY)[-2:] == [19, 23]
    assert k == 26
    config = EngineConfig(4, (TierConfig(TierName("hbm"), 1024),))
    clean = check_ops(ops, LRU(), config, ["engine-contract"])
    assert not clean.violations
    assert clean.compared_whole == len(_whole_state_ops(len(ops), 100, COMPARE_EVERY)) + 1
    aged = type("_Aged", (_AgesADeadBlock,), {"at": k})
    policy = type("_LRUAgingADeadBlock", (LRU,), {"engine_class": aged})()
    [v] = check_ops(ops, policy, config, ["engine-contract"]).violations
    assert v.invariant == "engine-contract"
    assert v.op == k
    assert "(last compared whole after op 23): engine BlockFigures" in v.message


def test_a_monitor_without_the_contract_model_makes_no_contract_finding() -> None:
    """``Monitor(contract=False)`` (what bench_checkers measures the contract's cost against)
    really runs no contract model: the miscounted record that the default monitor reports goes
    unseen."""
    config = EngineConfig(4, (TierConfig(TierName("hbm"), 1024),))
    found: dict[bool, object] = {}
    for contract in (True, False):
        mon = Monitor(engine_for(_TetherMiscounting(), config), [], contract=contract)
        for op in _miscounted_ops():
            assert mon.apply(op)
        found[contract] = mon.first("engine-contract")
    assert found[True] is not None
    assert found[False] is None


@pytest.mark.parametrize(
    "policy",
    [
        "lru",
        "kvtether",
        "checkers.search.mutants:MRUInverted",
        "checkers.search.outside_mutants:WindowedTether",
        "checkers.search.mutants:EvictsInFlight",
    ],
)
def test_only_what_reads_the_contract_model_needs_it(policy: str) -> None:
    """READS_CONTRACT is what a shrinker's tries may leave the model out by: every invariant
    outside it is judged the same, violation for violation, without the model, on walks of
    both scopes; and an eviction-order invariant inside it goes unjudged without the model
    (``no-eviction-in-flight`` is also seen when the engine refuses the choice, so the
    shrinker keeps the model for it too)."""
    from checkers.search.walk import walk_recipe

    outside = [n for n in INVARIANTS if n not in READS_CONTRACT]
    inside = sorted(READS_CONTRACT & set(INVARIANTS))
    seen_inside: set[str] = set()
    blind_inside: set[str] = set()
    for i in range(12):
        cfg, params = walk_recipe(0, i)
        ops = random_trace(params).ops
        with_model = check_ops(ops, policy, cfg, INVARIANTS)
        without = check_ops(ops, policy, cfg, INVARIANTS, contract=False)
        assert [v for v in with_model.violations if v.invariant in outside] == [
            v for v in without.violations if v.invariant in outside
        ]
        seen_inside |= {v.invariant for v in with_model.violations if v.invariant in inside}
        blind_inside |= {v.invariant for v in without.violations if v.invariant in inside}
    if policy == "checkers.search.mutants:MRUInverted":
        assert "suspended-mru" in seen_inside
        assert "suspended-mru" not in blind_inside
    assert blind_inside <= {"no-eviction-in-flight"}


def test_the_contract_model_checks_each_admission() -> None:
    """M4.4: the pre-check rejects an inference iff its writes do not fit in the free slots and
    the evictable blocks. Two outside authors' engines break it one way each -- one counts only
    free slots and rejects where it must evict, one skips the pre-check, evicts, then rolls the
    request back -- and only the admission check of the contract model sees either (the
    mutants' docstrings); the reference engine admits and rejects as the contract does."""
    from checkers.search.outside_mutants import (
        CountsFreeOnlyTether,
        OptimisticAdmissionTether,
    )

    a, b = ContextId("a"), ContextId("b")
    out = (Message(MessageId("r"), Role.ASSISTANT, MessageKind.OUTPUT, 4),)
    # a's 3 blocks stay resident and Suspended; b's 2 then need one eviction (4 slots)
    fits: list[Op] = [
        Open(0.0, a, SessionId("s"), AgentKind.MAIN),
        Append(0.0, a, (msg("x", 8),)),
        Infer(0.0, a, out, 0.5),
        Open(1.0, b, SessionId("s"), AgentKind.MAIN),
        Append(1.0, b, (msg("y", 4),)),
        Infer(1.0, b, out, 0.5),
    ]
    # 12 tokens and the output: 4 blocks to write into 2 slots
    too_big: list[Op] = [
        Open(0.0, a, SessionId("s"), AgentKind.MAIN),
        Append(0.0, a, (msg("x", 12),)),
        Infer(0.0, a, out, 0.5),
    ]
    for ops, slots, mutant, what in (
        (fits, 4, CountsFreeOnlyTether, "rejected an inference that fits"),
        (too_big, 2, OptimisticAdmissionTether, "admitted an inference that cannot fit"),
    ):
        config = EngineConfig(4, (TierConfig(TierName("hbm"), slots),))
        [v] = check_ops(ops, mutant(), config, ["engine-contract"]).violations
        assert v.op == len(ops) - 1
        assert what in v.message
        assert "(M4.4)" in v.message
        ref = check_ops(ops, KVTether(), config, list(INVARIANTS))
        assert not ref.violations
        evicted, rejected = ref.engine.stats.evictions["hbm"], ref.engine.stats.rejected
        assert (evicted, rejected) == ((1, 0) if ops is fits else (0, 1))


def test_the_contract_model_checks_each_eviction_is_needed() -> None:
    """M4: a block takes the first preferred tier's free slot, and only when none has one is a
    victim evicted (its slot, in its tier, taken). An engine that keeps KV in fast memory by
    evicting where it should spill passes every invariant (EvictsBeforeSpilling's docstring);
    the contract model sees the free slot."""
    from checkers.search.outside_mutants import EvictsBeforeSpillingTether

    a, b = ContextId("a"), ContextId("b")
    out = (Message(MessageId("r"), Role.ASSISTANT, MessageKind.OUTPUT, 4),)
    ops: list[Op] = [
        Open(0.0, a, SessionId("s"), AgentKind.MAIN),
        Append(0.0, a, (msg("x", 8),)),
        Infer(0.0, a, out, 0.5),  # 3 blocks: hbm's 2, then hbf (a's own are in flight)
        Open(1.0, b, SessionId("s"), AgentKind.MAIN),
        Append(1.0, b, (msg("y", 4),)),
        Infer(1.0, b, out, 0.5),  # 2 blocks: hbf has 3 free, and a's 3 are evictable
    ]
    config = EngineConfig(4, (TierConfig(TierName("hbm"), 2), TierConfig(TierName("hbf"), 4)))
    [v] = check_ops(ops, EvictsBeforeSpillingTether(), config, ["engine-contract"]).violations
    assert v.op == 5
    assert "while tier hbf had 3 free (M4)" in v.message
    claimed = ["engine-contract", *sorted(KVTether.claims & set(INVARIANTS))]
    ref = check_ops(ops, KVTether(), config, claimed)
    assert not ref.violations
    assert ref.engine.stats.evictions == {"hbm": 0, "hbf": 0}
    assert ref.engine.memory.writes == {"hbm": 2, "hbf": 3}


def test_the_contract_model_checks_each_new_blocks_tier() -> None:
    """M4: a new block takes the first tier of its placement that has a free slot. An engine
    that overflows a full HBM into the last tier with room (SSD) instead of the next (HBF)
    evicts and rejects as it should and passes every invariant (SpillsToLastTier's docstring);
    the contract model, told each placement by the probe, sees the tier."""
    from checkers.search.outside_mutants import SpillsToLastTierTether

    a = ContextId("a")
    out = (Message(MessageId("r"), Role.ASSISTANT, MessageKind.OUTPUT, 4),)
    ops: list[Op] = [
        Open(0.0, a, SessionId("s"), AgentKind.MAIN),
        Append(0.0, a, (msg("x", 8),)),
        Infer(0.0, a, out, 0.5),  # 3 blocks: hbm's 2, then one spills
    ]
    tiers = (("hbm", 2), ("hbf", 4), ("ssd", 4))
    config = EngineConfig(4, tuple(TierConfig(TierName(t), n) for t, n in tiers))
    [v] = check_ops(ops, SpillsToLastTierTether(), config, ["engine-contract"]).violations
    assert v.op == 2
    assert "written in tier ssd, not hbf of ['hbm', 'hbf', 'ssd'] (M4)" in v.message
    claimed = ["engine-contract", *sorted(KVTether.claims & set(INVARIANTS))]
    ref = check_ops(ops, KVTether(), config, claimed)
    assert not ref.violations
    assert ref.engine.memory.writes == {"hbm": 2, "hbf": 1, "ssd": 0}


class _OneTierTether(KVTether):
    """A correct policy whose placements list the first tier only: its requests can be refused
    mid-allocation while other tiers have room (P7.7)."""

    name: ClassVar[str] = "test-one-tier-tether"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        pl = super().place(view, block)
        return Placement(pl.tiers[:1], bypass=pl.bypass)


def test_a_refusal_mid_allocation_is_judged_by_its_placement() -> None:
    """P7.7: a write whose placement's tiers have no free slot (and nothing the policy evicts)
    refuses the request, whatever other tiers hold. The contract model judges the refusal by the
    placement the probe saw, not by the pre-check; and a Temporary block written and bypassed
    before the refusal, freed by the roll-back, was never indexed (temporary-bypass). Both were
    flagged on the reference engine before (found by checking this policy: a false verdict on a
    correct policy)."""
    a = ContextId("a")
    out = (
        Message(MessageId("r"), Role.ASSISTANT, MessageKind.REASONING, 4),
        Message(MessageId("t"), Role.ASSISTANT, MessageKind.TOOL_CALL, 3),
    )
    ops: list[Op] = [
        Open(0.0, a, SessionId("s"), AgentKind.MAIN),
        Append(0.0, a, (msg("sys", 6, MessageKind.SYSTEM),)),
        Append(0.0, a, (msg("obs", 1, MessageKind.OBSERVATION),), temporary=True),
        Infer(0.0, a, out, 0.5),  # 4 blocks: hbm takes 2 (the second Temporary, bypassed)
    ]
    config = EngineConfig(4, (TierConfig(TierName("hbm"), 2), TierConfig(TierName("hbf"), 2)))
    run = check_ops(ops, _OneTierTether(), config, ["engine-contract", "temporary-bypass"])
    assert run.violations == ()
    assert run.engine.stats.rejected == 1
    log = run.engine.log.since(0)
    assert [r.kind for r in log if r.kind in ("bypass", "free", "reject")] == [
        "bypass",
        "free",
        "free",
        "reject",
    ]
    # the first write refused: the pinned KV of b fills hbm, hbf's 2 free slots are not a's
    b = ContextId("b")
    reply = (Message(MessageId("o"), Role.ASSISTANT, MessageKind.OUTPUT, 4),)
    first: list[Op] = [
        Open(0.0, b, SessionId("s"), AgentKind.MAIN),
        Append(0.0, b, (msg("q", 4),)),
        Infer(0.0, b, reply, 0.5),
        Pin(1.0, b, 0, 2, None),
        Open(1.0, a, SessionId("s"), AgentKind.MAIN),
        Append(1.0, a, (msg("x", 4),)),
        Infer(1.0, a, reply, 0.5),
    ]
    run = check_ops(first, _OneTierTether(), config, ["engine-contract"])
    assert run.violations == ()
    assert [r.kind for r in run.engine.log.since(0) if r.op == 6][:2] == ["infer", "reject"]


def test_temporary_bypass_names_what_is_missing() -> None:
    """A Temporary block needs a bypass record and a free in its op (bypass at the commit, or
    reject when the request is rolled back); the message says which of the two is missing."""
    from checkers.invariants.predicates import log_bypass
    from kvmodel.ids import BlockKey
    from kvmodel.io.observations import AllocObs, BypassObs, FreeObs, FreeReason

    c, k, hbm = ContextId("c"), BlockKey("k"), TierName("hbm")
    temp = BlockClass.TEMPORARY

    def alloc(b: int) -> AllocObs:
        return AllocObs(b, 0.0, 0, c, BlockId(b), k, hbm, 1, temp)

    def bypass(b: int) -> BypassObs:
        return BypassObs(10 + b, 0.0, 0, c, BlockId(b), k, hbm, 1)

    def free(b: int, reason: str) -> FreeObs:
        return FreeObs(20 + b, 0.0, 0, BlockId(b), k, hbm, 1, temp, reason)

    records: list[Observation] = [
        alloc(1),  # no bypass record
        alloc(2), bypass(2),  # never freed
        alloc(3), bypass(3), free(3, FreeReason.BYPASS),
        alloc(4), bypass(4), free(4, FreeReason.REJECT),  # rolled back (P7.7)
    ]  # fmt: skip
    assert log_bypass(records) == [
        (f"temporary block 1 (key {k}) written without bypass", BlockId(1)),
        (f"temporary block 2 (key {k}) not freed by its op", BlockId(2)),
    ]
