"""The exhaustive search of the executable model over the wide fragment
(checkers/symbolic/reach.py): fixpoint proofs for the reference policies, shortest replayable
violations, mutants the Z3 fragment cannot see, honest "bounded" verdicts, and a sampled test of
the state merge."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from checkers.invariants.replay import check_ops
from checkers.search.mutants import MUTANTS
from checkers.symbolic.reach import (
    REACH_INVARIANTS,
    Step,
    Wide,
    WideHarness,
    check_merges,
    exact_merge,
    parse_wide,
    reach,
    state_key,
)
from kvmodel.cli import main
from kvmodel.policy import Placement, claimed_invariants, resolve_policy
from kvmodel.view import ModelView, NewBlock
from policies.kvtether import KVTether
from policies.tether_lachesis import TetherLachesis

#: one context growing to a 2-block chain (or a temporary append), one edit, tiers of 2 + 1
TINY = Wide(contexts=1, forks=0, hbm=2, hbf=1)
#: two contexts and a fork: too big to search to its fixpoint in a test, fine for random walks
WIDER = Wide(contexts=2, forks=1, hbm=2, hbf=1)


#: the claims the tiny fragment cannot put to the test: one context, so no eviction ever
#: chooses between two blocks another context holds (no order is ever contested)
VACUOUS_ON_TINY = {
    "no-live-eviction-before-dead-reclaim",
    "state-priority-eviction",
    "suspended-mru",
}


@pytest.mark.parametrize("policy", ["kvtether", "tether-lachesis"])
def test_reference_policies_prove_what_the_tiny_fragment_can_test(policy: str) -> None:
    """Every claim whose situation the fragment makes is proved; the eviction orders, which it
    never contests, and a placement written as code are ``unknown`` with the reason -- never a
    vacuous ``proved`` (issue 62)."""
    r = reach(policy, TINY)
    assert r.fixpoint
    assert r.proves
    assert r.inexact is None
    assert r.capped is None
    assert (r.states, r.depth) == (605, 12)  # golden: the merge or the fragment changed
    claims = claimed_invariants(resolve_policy(policy))
    owner = "KVTether" if policy == "kvtether" else "TetherLachesis"
    for name in REACH_INVARIANTS:
        rung, detail = r.verdict(name)
        if name in VACUOUS_ON_TINY:
            assert rung == "unknown", name
            assert detail.startswith("the fragment never makes an eviction choosing between")
        elif name == "deterministic-placement" and name in claims:
            assert rung == "unknown"
            assert f"{owner}.place is code" in detail
        elif name in claims:
            assert rung == "proved", (name, r.failing.get(name))
            # the proof names the premise it takes on the policy's word: tether-lachesis's place
            # is code; kvtether's is BasePolicy's (its bypass declared, spec PP2), nothing taken
            premise = f"assumes {owner}.place compares times only, as it declares"
            assert (premise in detail) is (policy == "tether-lachesis"), detail
    findings = ("policy-protocol", "engine-internal", "engine-contract")
    assert not any(f in r.failing for f in findings)


def test_a_fragment_with_two_contexts_contests_the_orders() -> None:
    """Two contexts and an edit: the fragment makes evictions choosing between Dead and live
    KV and between classes the priority orders, so those orders are put to the test there (the
    witnesses a proof would need); too big to search to its fixpoint in a test, so bounded."""
    wide = Wide(contexts=2, forks=0, hbm=2, hbf=0, edits=1, temporary=False)
    r = reach("kvtether", wide, max_states=500)
    assert r.witnesses is not None
    for name in ("no-live-eviction-before-dead-reclaim", "state-priority-eviction"):
        assert r.witnesses.missing(name) is None, name
        assert r.verdict(name)[0] == "bounded"
    assert r.witnesses.missing("suspended-mru") is not None  # (one suspension time each)


def test_violations_are_shortest_and_replay() -> None:
    r = reach("lru", TINY)
    # LRU keeps dead KV (no-zombie-kv) and writes temporaries into the index
    depth, path, _ = r.failing["no-zombie-kv"]
    assert depth == 2
    assert len(path) == 2
    for name in ("no-zombie-kv", "temporary-bypass"):
        depth, path, _ = r.failing[name]
        run = check_ops(TINY.ops(path), "lru", TINY.config, [name])
        assert run.violations
        assert run.violations[0].invariant == name
        # shortest: the path without its last step does not show it
        shorter = check_ops(TINY.ops(path[:-1]), "lru", TINY.config, [name])
        assert not shorter.violations
    rung, detail = r.verdict("prefix-closed-residency")
    assert rung == "proved"
    assert "assumes" not in detail  # LRU's placement is BasePolicy's: nothing taken on its word


#: mutants whose bug needs a 2-block chain, a temporary, an edit of a chain or a second tier --
#: outside the Z3 fragment (one-block contexts, one tier)
WIDE_ONLY = [
    "checkers.search.mutants:RootFirstLRU",
    "checkers.search.mutants:IndexesTemporary",
    "checkers.search.claim_mutants:NoBypassTetherLachesis",
    "checkers.search.mutants:StaleHitAfterReplace",
    "checkers.search.claim_mutants:ReclaimsExpiredTetherLachesis",
    "checkers.search.claim_mutants:AllHBMFirstTetherLachesis",
    "checkers.search.mutants:ForgetsHolder",
    "checkers.search.mutants:WritesPerSegment",
]


@pytest.mark.parametrize("mutant", WIDE_ONLY, ids=lambda m: m.split(":")[1])
def test_catches_mutants_outside_the_z3_fragment(mutant: str) -> None:
    target = MUTANTS[mutant]
    r = reach(mutant, TINY, max_states=5000)
    assert target in r.failing, sorted(r.failing)
    _, path, _ = r.failing[target]
    run = check_ops(TINY.ops(path), mutant, TINY.config, [target])
    assert target in {v.invariant for v in run.violations}


class IdlePlacement(KVTether):
    """Places blocks by how long the context has been idle: its placement measures time."""

    name: ClassVar[str] = "test-idle-placement"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        tiers = tuple(t.name for t in view.tiers())
        return Placement(tiers if view.now < 5 else tiers[::-1])


def test_a_policy_that_may_measure_time_is_never_proved() -> None:
    idle = "checkers.search.mutants:IdleTimeoutReclaim"
    assert exact_merge(resolve_policy(idle)) is not None
    assert "compares_times_only" in (exact_merge(IdlePlacement()) or "")
    r = reach(idle, TINY)
    assert not r.proves
    holding = [n for n in r.invariants if n not in r.failing]
    assert holding
    assert all(r.verdict(n)[0] in ("bounded", "unknown") for n in holding)
    assert "not a proof" in r.verdict(holding[0])[1]


class _DeepHBMFirst(TetherLachesis):
    """An outside author's placement: long-lived KV HBM-first only from depth 3 on (a rule the
    tiny fragment, whose chains are 2 blocks long, never reaches)."""

    name: ClassVar[str] = "test-deep-hbm-first"
    compares_times_only: ClassVar[bool] = True

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        tiers = view.tier_names()
        return Placement(tiers if block.depth >= 3 else tiers[::-1])


def test_a_placement_written_as_code_is_never_proved_deterministic() -> None:
    """issue 62: `prove --reach` printed `deterministic-placement proved` for placements that
    branch on what the fragment never makes; now the verdict says what the fragment made."""
    r = reach(_DeepHBMFirst(), TINY)
    rung, detail = r.verdict("deterministic-placement")
    assert rung == "unknown", detail
    assert "_DeepHBMFirst.place is code" in detail
    assert "chains of up to 2 blocks" in detail


def test_a_capped_search_is_bounded() -> None:
    r = reach("kvtether", TINY, max_states=50)
    assert not r.fixpoint
    assert r.capped == "state cap 50"
    rung, detail = r.verdict("no-zombie-kv")
    assert rung == "bounded"
    assert "state cap 50" in detail


def test_state_key_forgets_history_and_keeps_state() -> None:
    from checkers.invariants import Monitor
    from checkers.invariants.replay import engine_for

    def key(steps: list[Step]) -> tuple[object, ...]:
        e = engine_for(resolve_policy("kvtether"), TINY.config)
        m = Monitor(e, REACH_INVARIANTS)
        h = WideHarness(TINY)
        for op in TINY.prelude():
            m.apply(op)
        for d, s in enumerate(steps, start=1):
            m.apply(h.op(s, float(d)))
        return state_key(e, m, h)

    infer, pin, unpin = Step("infer", 0), Step("pin", 0), Step("unpin", 0)
    # a pin and an unpin between two inferences leave the same state, but for the time stamps
    assert key([infer, pin, unpin, infer]) == key([infer, infer])
    assert key([infer]) != key([infer, Step("append", 0)])
    assert key([infer, pin]) != key([infer])


@pytest.mark.parametrize("policy", ["kvtether", "tether-lachesis", "lru"])
def test_merged_states_have_the_same_future(policy: str) -> None:
    pairs, bad = check_merges(policy, WIDER, walks=120, steps=12)
    assert pairs > 50
    assert not bad, bad[:1]


def test_the_merge_check_catches_a_policy_that_measures_time() -> None:
    _, bad = check_merges("checkers.search.mutants:IdleTimeoutReclaim", WIDER, walks=120, steps=12)
    assert bad


def test_parse_wide() -> None:
    assert Wide() == TINY
    assert parse_wide("contexts=2,forks=1,temporary=no") == Wide(2, 1, temporary=False)
    for bad in ("contexts", "slots=2", "hbm=x", "hbm=0", "forks=9", "temporary=maybe"):
        with pytest.raises(ValueError, match=r"expected|at (least|most)|must be"):
            parse_wide(bad)


def test_cli_prove_reach(capsys: pytest.CaptureFixture[str]) -> None:
    wide = "contexts=1,forks=0,hbm=2,hbf=1"
    args = ["prove", "kvtether", "--invariant", "no-zombie-kv", "--depth", "2", "--wide", wide]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    reach_out = out["reach"]
    assert reach_out["fixpoint"]
    assert reach_out["exact"]
    assert reach_out["states"] == 605
    rungs = {v["invariant"]: v["rung"] for v in reach_out["verdicts"]}
    assert rungs["prefix-closed-residency"] == "proved"
    assert out["uncovered_claims"] == []
    quick = ["--invariant", "no-zombie-kv", "--depth", "2", "--wide", wide]
    assert main(["prove", "lru", *quick]) == 0
    text = capsys.readouterr().out
    assert "no-zombie-kv" in text
    assert "violated  at depth 2" in text
    # a claimed invariant broken in the wide fragment: exit 1
    mutant = "checkers.search.mutants:RootFirstLRU"
    assert main(["prove", mutant, *quick]) == 1
    assert main(["prove", "kvtether", "--wide", "slots=3"]) == 2


#: one context and one fork on two HBM blocks: shared prefixes, several holders
FORK = Wide(contexts=1, forks=1, hbm=2, hbf=0, edits=0, temporary=False)


@pytest.mark.parametrize(
    "mutant",
    [
        "checkers.search.mutants:DropsForkPrefix",
        "checkers.search.engine_mutants:ForkWithoutPrefixTether",
        "checkers.search.mutants:EvictsInFlight",
    ],
    ids=lambda m: m.split(":")[1],
)
def test_catches_fork_and_in_flight_mutants_on_a_fork_fragment(mutant: str) -> None:
    target = MUTANTS[mutant]
    r = reach(mutant, FORK, until=[target])
    assert target in r.failing
    assert r.capped == f"stopped once {target} failed"
    assert r.verdict(target)[0] == "violated"


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["kvtether", "tether-lachesis"])
def test_reference_policies_prove_every_claim_with_a_fork(policy: str) -> None:
    r = reach(policy, FORK)
    assert r.proves
    claims = claimed_invariants(resolve_policy(policy))
    assert not set(r.failing) & (set(claims) | {"engine-contract", "policy-protocol"})


def test_an_offline_policy_is_not_searched(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="offline"):
        reach("belady", TINY)
    assert main(["prove", "belady", "--invariant", "no-zombie-kv", "--depth", "1", "--reach"]) == 0
    assert "--reach: not run" in capsys.readouterr().err


class _Counted:
    """A state that does not pickle (it holds a lambda) but deep-copies, counting its copies."""

    copies = 0

    def __init__(self) -> None:
        self.f = lambda: 0
        self.items: list[int] = []

    def __deepcopy__(self, memo: dict[int, object]) -> _Counted:
        _Counted.copies += 1
        c = _Counted()
        c.items = list(self.items)
        return c


def test_a_state_that_does_not_pickle_is_deep_copied_once_per_child() -> None:
    from checkers.symbolic.copying import UncopyableError, copier

    node = _Counted()
    thaw = copier(node)
    a, b = thaw(), thaw()
    assert _Counted.copies == 2  # the trial copy is the first child: no copy is thrown away
    a.items.append(1)
    assert (b.items, node.items) == ([], [])
    import threading

    with pytest.raises(UncopyableError, match="cannot branch from it"):
        copier(threading.Lock())
