"""Z3 Optimize bounds (checkers.symbolic.optimal) cross-check the offline policy `belady`."""

from __future__ import annotations

import numpy as np
import pytest

from checkers.symbolic.fragment import Fragment, Harness
from checkers.symbolic.optimal import access_sets, min_writes
from kvmodel.ids import BlockKey
from kvmodel.replay import replay

F = Fragment(contexts=4, slots=2, edits=2)


def _writes(trace, policy: str) -> int:  # type: ignore[no-untyped-def]
    return sum(o.kind == "alloc" for o in replay(trace, policy, F.config).engine.log)


def test_belady_reaches_the_solver_optimum_and_online_policies_do_not_beat_it() -> None:
    rng = np.random.default_rng(7)
    gaps = 0
    for _ in range(120):
        lg, acts = Harness(F), []
        for _ in range(14):  # no pins: every inference is admitted (Belady's setting)
            enabled = [a for a in lg.enabled() if a.kind not in ("pin", "unpin")]
            if not enabled:
                break
            a = enabled[int(rng.integers(len(enabled)))]
            lg.op(a, 0.0)
            acts.append(a)
        tr = F.trace(acts)
        best = min_writes(access_sets(tr, 4), F.slots)
        assert best is not None
        assert _writes(tr, "belady") == best
        lru = _writes(tr, "lru")
        assert lru >= best
        assert _writes(tr, "kvtether") >= best
        gaps += lru > best
    assert gaps >= 2  # the bound is not trivially met by recency


def test_a_trace_with_partial_blocks_is_refused_not_loosely_bounded() -> None:
    from kvmodel.workloads import RandomParams, random_trace

    tr = random_trace(RandomParams(seed=1, ops=40))
    with pytest.raises(ValueError, match=r"op \d+ \(infer c\d+\): \d+ tokens leave a partial"):
        access_sets(tr, 4)
    # the fragment's messages are whole blocks: accepted (and no policy beats the bound, above)
    assert access_sets(F.trace(()), 4) == []


def test_min_writes_on_a_classic_paging_sequence() -> None:
    a, b, c = BlockKey("a"), BlockKey("b"), BlockKey("c")
    seq = [frozenset({x}) for x in (a, b, c, a, b, c, a)]
    assert min_writes(seq, 2) == 5  # a, b, c (evict b), hit a, b (evict a), hit c, a
    assert min_writes(seq, 3) == 3
    assert min_writes([frozenset({a, b, c})], 2) is None  # infeasible


@pytest.mark.parametrize("slots", [1, 2])
def test_no_sharing_means_every_access_is_a_write_with_one_slot(slots: int) -> None:
    seq = [frozenset({BlockKey(str(i % 3))}) for i in range(9)]
    got = min_writes(seq, slots)
    assert got == (9 if slots == 1 else 6)


@pytest.mark.parametrize("hbm", [3, 6, 12])
def test_opt_placement_reaches_the_solver_minimum_of_hbf_writes(hbm: int) -> None:
    from checkers.symbolic.optimal import lifetimes, min_hbf_writes
    from kvmodel import EngineConfig, TierConfig
    from kvmodel.ids import TierName
    from kvmodel.workloads import RandomParams, random_trace

    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), hbm), TierConfig(TierName("hbf"), 4000)))
    for seed in range(12):
        tr = random_trace(RandomParams(seed=seed, ops=60))
        best = min_hbf_writes(lifetimes(tr, 4), hbm)
        assert best is not None
        log = replay(tr, "opt-placement", cfg).engine.log
        assert not any(o.kind == "evict" for o in log)  # its exact setting (spec §opt-placement)
        assert sum(o.kind == "alloc" and o.tier == "hbf" for o in log) == best
        det = replay(tr, "lachesis-det", cfg).engine.log
        assert sum(o.kind == "alloc" and o.tier == "hbf" for o in det) >= best


def test_min_hbf_writes_by_hand() -> None:
    from checkers.symbolic.optimal import min_hbf_writes

    # three overlapping lifetimes and one later one; one HBM slot: keep one of the three + the last
    assert min_hbf_writes([(0, 10), (1, 3), (2, 4), (11, 12)], 1) == 2
    assert min_hbf_writes([(0, 10), (1, 3), (2, 4), (11, 12)], 3) == 0
    assert min_hbf_writes([], 2) == 0
