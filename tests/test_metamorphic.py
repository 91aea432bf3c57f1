"""Metamorphic relations of the engine (checkers/search/metamorphic.py): each holds for the
reference engine on random traces, with and without memory pressure, and each is shown to fail on a
broken engine or policy (spec/invariants.md §Self-checks of the engine)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import pytest

from checkers.invariants.contract import ample_config
from checkers.search.engine_mutants import EagerEdits, ForkWithoutPrefix
from checkers.search.metamorphic import RELATIONS, Run, interleaving, runner
from checkers.search.mutants import IdleTimeoutReclaim, SharedCursorLRU
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, TierName
from kvmodel.io.trace import Op
from kvmodel.memory import TierConfig
from kvmodel.policy import Policy, RankTerm
from kvmodel.view import BlockInfo, ModelView
from kvmodel.workloads.random_ops import RandomParams, random_trace
from policies.kvtether import KVTether
from policies.lru import LRU

SMALL = EngineConfig(4, (TierConfig(TierName("hbm"), 6), TierConfig(TierName("hbf"), 10)))


def check(
    name: str, ops: list[Op], policy: Callable[[], Policy], engine: type[Engine]
) -> str | None:
    relation, ample = RELATIONS[name]
    run: Run = runner(policy, ample_config(ops, 4) if ample else SMALL, engine)
    if name == "inverse-edit":
        return relation(ops, run, 4)
    return relation(ops, run)


@pytest.mark.parametrize("name", sorted(RELATIONS))
@pytest.mark.parametrize("policy", [LRU, KVTether], ids=["lru", "kvtether"])
def test_relation_holds_for_the_reference_engine(name: str, policy: Callable[[], Policy]) -> None:
    # fixed seeds (derandomized); "ample" relations on memory that cannot fill, the rest on a
    # two-tier engine of 16 blocks, where these traces evict and reject
    for seed in range(10):
        ops = list(random_trace(RandomParams(seed=seed, ops=60)).ops)
        assert check(name, ops, policy, Engine) is None, f"seed {seed}"


class WriterNameOrder(LRU):
    """Evicts the blocks of the alphabetically first writer context first: its decisions depend
    on how contexts are named."""

    name: ClassVar[str] = "test-writer-name-order"
    rank: ClassVar[tuple[RankTerm, ...]] = ()

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        return [b.id for b in sorted(candidates, key=lambda b: (b.writer, b.id))]


#: relation -> (a broken engine or policy it catches, under which policy)
CAUGHT: dict[str, tuple[type[Engine], Callable[[], Policy]]] = {
    "no-op-pin": (EagerEdits, KVTether),
    "batched-edits": (EagerEdits, KVTether),
    "inverse-edit": (EagerEdits, KVTether),
    "fork-holds-the-prefix": (ForkWithoutPrefix, KVTether),
    "renaming": (Engine, WriterNameOrder),
    # a policy keeping state outside itself: a copy of a run does not continue like the run
    "snapshot": (Engine, SharedCursorLRU),
    # an idle timeout measures durations
    "retiming": (Engine, IdleTimeoutReclaim),
}


@pytest.mark.parametrize("name", sorted(RELATIONS))
def test_relation_catches_a_broken_engine_or_policy(name: str) -> None:
    engine, policy = CAUGHT[name]
    found = None
    for seed in range(20):
        ops = list(random_trace(RandomParams(seed=seed, ops=60)).ops)
        found = found or check(name, ops, policy, engine)
    assert found is not None, name


def _belady_hits(ops: list[Op], blocks: int) -> tuple[int, int]:
    from kvmodel.io.trace import Trace, TraceHeader
    from kvmodel.replay import replay

    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), blocks),))
    s = replay(Trace(TraceHeader(), tuple(ops)), "belady", cfg).summary
    return s.hit_tokens, s.rejected


def test_more_capacity_never_lowers_beladys_hits_when_nothing_is_rejected() -> None:
    pairs = 0
    for seed in range(25):
        ops = list(random_trace(RandomParams(seed=seed, ops=80)).ops)
        prev: tuple[int, int] | None = None
        for blocks in range(2, 40, 2):
            hits, rejected = _belady_hits(ops, blocks)
            if rejected:
                prev = None
                continue
            if prev is not None:
                pairs += 1
                assert hits >= prev[1], (seed, prev, blocks, hits)
            prev = (blocks, hits)
    assert pairs >= 30  # the relation was exercised


def test_with_rejections_more_capacity_can_lower_beladys_hits() -> None:
    # pinned finding (spec/invariants.md, Self-checks): at 14 blocks 11 inferences are rejected
    # (not costed, nothing written); at 16 one more is admitted and its forced writes evict KV
    # that later hits needed
    ops = list(random_trace(RandomParams(seed=9, ops=80)).ops)
    assert _belady_hits(ops, 14) == (40, 11)
    assert _belady_hits(ops, 16) == (28, 10)


def test_interleaving_independent_sessions_changes_no_figure_without_pressure() -> None:
    for seed in range(10):
        a = list(random_trace(RandomParams(seed=seed, ops=50)).ops)
        b = list(random_trace(RandomParams(seed=seed + 100, ops=50)).ops)
        blocks = ample_config(a, 4).tiers[0].blocks + ample_config(b, 4).tiers[0].blocks
        for policy in (LRU, KVTether):
            run = runner(policy, EngineConfig(4, (TierConfig(TierName("hbm"), blocks),)), Engine)
            assert interleaving(a, b, run, seed) is None, seed


def test_interleaving_is_not_vacuous_under_pressure() -> None:
    # on a small engine the sessions compete for blocks: the relation must see the difference
    found = []
    for seed in range(10):
        a = list(random_trace(RandomParams(seed=seed, ops=50)).ops)
        b = list(random_trace(RandomParams(seed=seed + 100, ops=50)).ops)
        found.append(interleaving(a, b, runner(LRU, SMALL, Engine), seed))
    assert any(found)


def test_every_policy_that_compares_times_only_passes_retiming() -> None:
    # the declaration checkers.symbolic.reach relies on, tested for every built-in policy making it
    from checkers.search.metamorphic import retiming
    from kvmodel.policy import registered_policies, resolve_policy

    declared = [
        p for p in registered_policies() if getattr(resolve_policy(p), "compares_times_only", False)
    ]
    assert {"kvtether", "tether-lachesis", "lachesis-det"} <= set(declared)
    for name in declared:
        for seed in range(6):
            ops = list(random_trace(RandomParams(seed=seed, ops=60)).ops)
            run = runner(functools.partial(resolve_policy, name), SMALL, Engine)
            assert retiming(ops, run, seed) is None, (name, seed)
