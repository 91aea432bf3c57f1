"""Bounded model checking and k-induction (checkers.symbolic.bmc) against the executable model.

Every Z3 counterexample is decoded into a trace that replays to the same violation; the
exhaustive breadth-first search of the executable model and the BMC agree on which invariants
fail and at what shortest depth; the expected rungs of every built-in policy and mutant are data
(checkers/symbolic/expected_proofs.toml)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

import checkers.search.mutants
from checkers.invariants.replay import check_ops
from checkers.search.mutants import MUTANTS
from checkers.symbolic import bmc
from checkers.symbolic.bmc import prove
from checkers.symbolic.fragment import (
    FRAGMENT_INVARIANTS,
    Action,
    Fragment,
    Shortest,
    explore,
)
from kvmodel.cli import main
from kvmodel.ids import BlockId
from kvmodel.io.trace import Op
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Placement, Policy, Reclaim, registered_policies
from kvmodel.view import ModelView, NewBlock
from policies.kvtether import KVTether

MANIFEST = tomllib.loads(
    (Path(__file__).parent.parent / "checkers" / "symbolic" / "expected_proofs.toml").read_text()
)
F = Fragment()
#: the default run's slice; `-m slow` runs every policy and mutant
SLICE = [
    "lru",
    "kvtether",
    "checkers.search.mutants:MRUInverted",
    "checkers.search.mutants:LateDeadReclaim",
]
ALL = [*registered_policies(), *MUTANTS]


_EXPLORED: dict[tuple[str, int, frozenset[str]], Shortest] = {}


def _explore(
    policy: str | Policy,
    fragment: Fragment,
    depth: int,
    invariants: Iterable[str] = FRAGMENT_INVARIANTS,
) -> Shortest:
    """``explore``, once per (policy name, depth, invariants) in this module: ``prove``
    corroborates with the same exhaustive search to depth 5 that the agreement test reads
    (deterministic: a breadth-first search over every enabled action)."""
    names = frozenset(invariants)
    if not isinstance(policy, str) or fragment != F:
        return explore(policy, fragment, depth, names)
    key = (policy, depth, names)
    if key not in _EXPLORED:
        _EXPLORED[key] = explore(policy, fragment, depth, names)
    return _EXPLORED[key]


@pytest.fixture(autouse=True)
def _one_exploration_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bmc, "explore", _explore)


@functools.cache
def _proved(policy: str, depth: int = 6) -> tuple[bmc.Answer, ...]:
    """``prove(policy, depth=depth)``, once per module: the rungs, the agreement with the
    exhaustive search and the counterexample replays read one run (prove is deterministic: Z3
    resource limits, not wall time)."""
    return tuple(prove(policy, depth=depth))


def _rungs(policy: str, depth: int = 6) -> dict[str, str]:
    return {
        a.invariant: a.rung if a.rung == "unknown" else f"{a.rung}:{a.depth}"
        for a in _proved(policy, depth)
    }


@pytest.mark.parametrize("policy", SLICE)
def test_rungs_match_the_manifest(policy: str) -> None:
    assert _rungs(policy) == MANIFEST[policy]


@pytest.mark.slow
@pytest.mark.parametrize("policy", ALL)
def test_every_policy_and_mutant_matches_the_manifest(policy: str) -> None:
    assert _rungs(policy) == MANIFEST[policy]


def test_the_manifest_covers_every_policy_and_mutant() -> None:
    assert set(MANIFEST) == set(ALL)
    assert all(set(v) == set(FRAGMENT_INVARIANTS) for v in MANIFEST.values())


@pytest.mark.parametrize("policy", [p for p in SLICE if p != "kvtether"])
def test_counterexamples_replay_to_the_same_violation(policy: str) -> None:
    violated = [a for a in _proved(policy) if a.rung == "violated"]
    assert violated
    for a in violated:
        run = check_ops(F.ops(a.trace), policy, F.config, [a.invariant])
        v = run.first(a.invariant)
        assert v is not None, a.render()
        assert v.op is not None
        assert F.depth_of(v.op) == a.depth == len(a.trace)


def _agree(policy: str, depth: int) -> None:
    # BMC deepens one step at a time and stops at the first violation, so a run to depth 6
    # reports the same shortest depths as a run to ``depth``: those up to it are compared
    answers = {a.invariant: a for a in _proved(policy, max(depth, 6))}
    if any(a.rung == "unknown" for a in answers.values()):
        pytest.skip(f"{policy} is outside the fragment")
    found = _explore(policy, F, depth)
    bfs = {name: d for name, (d, _) in found.failing.items()}
    smt = {
        name: a.depth for name, a in answers.items() if a.rung == "violated" and a.depth <= depth
    }
    assert bfs == smt


@pytest.mark.parametrize("policy", SLICE)
def test_bfs_and_bmc_agree_on_failures_and_shortest_depths(policy: str) -> None:
    _agree(policy, 5)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ALL)
def test_bfs_and_bmc_agree_everywhere(policy: str) -> None:
    _agree(policy, 6)


def test_policies_outside_the_fragment_are_unknown_never_proved() -> None:
    for policy in ("mori", "belady", "checkers.search.mutants:EvictsInFlight"):
        answers = _proved(policy, 3)
        # never proved or bounded; what the executable model's exhaustive search finds is
        # still reported, with a trace that replays (belady plans offline: not searched)
        assert {a.rung for a in answers} <= {"unknown", "violated"}
        for a in answers:
            if a.rung == "unknown":
                assert "outside the fragment" in a.reason
                continue
            assert "exhaustive search" in a.reason
            assert check_ops(F.ops(a.trace), policy, F.config, [a.invariant]).first(a.invariant)
    assert {a.rung for a in _proved("belady", 3)} == {"unknown"}
    assert "violated" in {a.rung for a in _proved("mori", 3)}


def test_a_timeout_is_never_reported_as_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bmc, "induction", lambda *a, **k: "unknown")
    assert {a.rung for a in prove("kvtether", depth=3)} == {"bounded"}
    real_bmc = bmc.bmc
    monkeypatch.setattr(bmc, "bmc", lambda prof, f, name, depth, **k: ("unknown", 2, (), "timeout"))
    answers = prove("kvtether", depth=3)
    assert {a.rung for a in answers} == {"unknown"}
    assert all(a.reason == "timeout at depth 2" for a in answers)
    # the budget that decides is deterministic: Z3 resource units, not wall time
    monkeypatch.setattr(bmc, "bmc", real_bmc)
    starved = prove("kvtether", ["no-zombie-kv"], depth=3, rlimit=1000, cross_depth=0)
    assert [(a.rung, a.reason) for a in starved] == [("unknown", "resource limit at depth 1")]
    again = prove("kvtether", ["no-zombie-kv"], depth=3, rlimit=1000, cross_depth=0)
    assert again[0].reason == starved[0].reason


def test_kvtether_is_proved_for_all_depths() -> None:
    assert {a.rung for a in _proved("kvtether")} == {"proved"}


def test_prove_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "lru", "--depth", "4", "--invariant", "no-zombie-kv"]) == 0
    out = capsys.readouterr().out
    assert "violated at depth 2" in out
    assert main(["prove", "checkers.search.mutants:MRUInverted", "--depth", "4", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    mru = next(a for a in data["fragment"] if a["invariant"] == "suspended-mru")
    assert (mru["rung"], mru["depth"], mru["claimed"]) == ("violated", 3, True)
    assert len(mru["trace"]) == 3
    # a rung true by the symbolic model's construction says so; uncovered claims are listed
    pinned = next(a for a in data["fragment"] if a["invariant"] == "pinned-never-evicted")
    assert pinned["rung"] == "proved"
    assert "never offers a Pinned block" in pinned["structural"]
    zombie = next(a for a in data["fragment"] if a["invariant"] == "no-zombie-kv")
    assert zombie["structural"] is None
    # (no-eviction-in-flight, reclaim-dead-only and temporary-bypass: proved for all sizes)
    every = {a["invariant"] for a in data["parametric"] if a["rung"] == "proved"}
    assert {"no-eviction-in-flight", "reclaim-dead-only", "temporary-bypass"} <= every
    assert "suspended-mru" not in every  # MRUInverted's bug: not inductive
    assert data["uncovered_claims"] == [
        "chains", "legal-transitions", "no-stale-hit", "prefix-closed-residency",
    ]  # fmt: skip
    assert main(["prove", "kvtether", "--depth", "3", "--invariant", "accounting"]) == 0
    out = capsys.readouterr().out
    assert "structural: checked as used <= slots" in out
    assert (
        "claims neither the parametric model nor the fragment covers (only kvmodel check tests"
        in out
    )
    args = ["prove", "lru", "--depth", "3", "--invariant", "accounting", "--self-check"]
    args += ["--contexts", "2"]  # (the fragment's size is not what this reads)
    assert main([*args, "--self-check-walks", "3"]) == 0
    out = capsys.readouterr().out
    assert "transitions of 3 random walks" in out
    assert "every successor admitted and unique, every verdict agrees" in out
    assert main(["prove", "lru", "--invariant", "no-such"]) == 2
    assert main(["prove", "lru", "--depth", "0"]) == 2


def test_a_violated_rank_property_becomes_a_trace_with_the_wrong_eviction() -> None:
    from checkers.symbolic.bmc import rank_counterexample
    from checkers.symbolic.z3rank import prove_policy
    from kvmodel.policy import resolve_policy

    mutant = "checkers.search.mutants:MRUInverted"
    [bad] = [p for p in prove_policy(resolve_policy(mutant)) if p.rung == "violated"]
    shown = rank_counterexample(mutant, bad.prop)
    assert shown is not None
    invariant, trace = shown
    assert invariant == "suspended-mru"
    v = check_ops(F.ops(trace), mutant, F.config, [invariant]).first(invariant)
    assert v is not None  # the executable model evicts the wrong Suspended block
    assert v.op == len(F.ops(trace)) - 1
    assert rank_counterexample("kvtether", "mru-within-suspended") is None  # proved: no trace


class _IdleFree(KVTether):
    """KVTether plus a production rule an outside author adds: free any block idle for 8 time
    units or more, pinned ones included. Idle for 8 needs more actions than the depth-5
    exhaustive search behind prove takes, so only the policy's data can keep prove honest."""

    name: ClassVar[str] = "idle-free"

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        idle = [b for b in view.resident() if view.now - view.block(b).last_access >= 8]
        return [*view.dead(), *(b for b in idle if b not in view.dead())]


def test_the_reclaim_rule_is_data_the_engine_runs() -> None:
    from kvmodel.errors import PolicyDefinitionError
    from kvmodel.policy import declared_reclaim, resolve_policy

    assert declared_reclaim(KVTether()) is Reclaim.DEAD
    assert declared_reclaim(resolve_policy("lru")) is Reclaim.NONE
    assert declared_reclaim(resolve_policy("lachesis")) is Reclaim.DEAD  # observes in observe()
    # an on_op written as code has no declared rule, on the class or on the instance
    assert declared_reclaim(resolve_policy("checkers.search.mutants:IdleTimeoutReclaim")) is None
    assert declared_reclaim(_IdleFree()) is None
    patched = KVTether()
    patched.on_op = lambda view, op: ()  # type: ignore[method-assign]
    assert declared_reclaim(patched) is None
    # a declaration beside code cannot be written: it would be a claim nothing enforces
    with pytest.raises(PolicyDefinitionError, match=r"declares reclaim = Reclaim\.DEAD"):

        class _Liar(KVTether):
            reclaim: ClassVar[Reclaim | None] = Reclaim.DEAD

            def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
                return ()

    with pytest.raises(PolicyDefinitionError, match="its on_op is code"):

        class _RedeclaresInherited(checkers.search.mutants.IdleTimeoutReclaim):
            reclaim: ClassVar[Reclaim | None] = Reclaim.DEAD

    with pytest.raises(PolicyDefinitionError, match="does not override on_op"):

        class _NoRule(KVTether):
            reclaim: ClassVar[Reclaim | None] = None

    idle = "checkers.search.mutants:IdleTimeoutReclaim"
    symbolic = prove(idle, ["pinned-never-evicted"], depth=3, cross_depth=0)
    assert [(a.rung, a.reason) for a in symbolic] == [
        ("unknown", "outside the fragment: its reclaim rule is code (on_op is overridden)")
    ]
    # and the executable model's exhaustive search still finds (and replays) the bug
    [found] = prove(idle, ["pinned-never-evicted"], depth=3)
    assert (found.rung, found.depth) == ("violated", 5)
    # a rule in code whose bug lies deeper than the exhaustive search: unknown, never proved
    # (it was `proved by 1-induction` when a declaration on the class was trusted)
    deep = prove(_IdleFree(), ["pinned-never-evicted", "no-zombie-kv"], depth=6)
    assert {a.rung for a in deep} == {"unknown"}, [(a.rung, a.reason) for a in deep]


class _LateBypass(KVTether):
    """KVTether that stops caching once the clock reaches 6 (bypasses every block): a rule
    deeper than any probe of the first actions, in a place() that is code."""

    name: ClassVar[str] = "late-bypass"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        pl = super().place(view, block)
        return Placement(pl.tiers, bypass=pl.bypass or view.now >= 6)


class _LateBypassDeclared(_LateBypass):
    """The same code, declaring (wrongly) KVTether's bypass rule."""

    name: ClassVar[str] = "late-bypass-declared"
    bypasses: ClassVar[frozenset[BlockClass] | None] = KVTether.bypasses


def test_the_bypass_rule_is_data_the_engine_enforces() -> None:
    from kvmodel.errors import PolicyError
    from kvmodel.policy import declared_bypass, resolve_policy

    assert declared_bypass(KVTether()) == frozenset({BlockClass.TEMPORARY})
    assert declared_bypass(resolve_policy("lru")) == frozenset()
    assert declared_bypass(resolve_policy("lachesis")) == frozenset()
    assert declared_bypass(resolve_policy("checkers.search.mutants:IndexesTemporary")) is None
    assert declared_bypass(_LateBypass()) is None
    assert declared_bypass(_LateBypassDeclared()) == frozenset({BlockClass.TEMPORARY})
    # code: outside the fragment, whatever the first actions show (was `proved by 1-induction`)
    late = prove(_LateBypass(), ["no-zombie-kv"], depth=4, cross_depth=0)
    assert [(a.rung, a.reason) for a in late] == [
        ("unknown", "outside the fragment: its bypass rule is code (place is overridden "
         "without bypasses)")
    ]  # fmt: skip
    # a declaration the code breaks is refused by the engine when it is broken: the run stops
    # (a policy-protocol finding) instead of leaving the model the proof was about
    from checkers.invariants.replay import engine_for

    engine = engine_for(_LateBypassDeclared(), F.config)
    ops = F.ops([Action("infer", 0), Action("edit", 0), Action("infer", 0)])
    for op in ops[:-1]:
        engine.apply(op)  # the edit at t = 2: the next inference writes a new block
    later = attrs.evolve(ops[-1], t=6.0)
    with pytest.raises(PolicyError, match=r"declares bypasses = \['temporary'\] but place"):
        engine.apply(later)
    run = check_ops([*ops[:-1], later], _LateBypassDeclared(), F.config, ())
    assert [v.invariant for v in run.violations] == ["policy-protocol"]


class _Adaptive(KVTether):
    """An "adaptive" KVTether that stops reclaiming once the run is long: it mutates its
    declared rule in observe(), deeper than the exhaustive search looks."""

    name: ClassVar[str] = "adaptive"

    def observe(self, view: ModelView, op: Op) -> None:
        if view.now_op >= 12:
            self.reclaim = Reclaim.NONE  # type: ignore[misc]


def test_a_declaration_is_read_once_and_a_run_that_changes_it_is_refused() -> None:
    from kvmodel.errors import PolicyError

    ops = F.ops([Action("infer", c % 3) for c in range(9)])
    run = check_ops(ops, _Adaptive(), F.config, ["no-zombie-kv"])
    assert [v.invariant for v in run.violations] == ["policy-protocol"]
    assert "changed a declaration during the run" in run.violations[0].message
    assert run.violations[0].op == 12  # the op whose observe() changed the rule is refused
    # the engine applied the rule it read when it was built, never the changed one
    from checkers.invariants.replay import engine_for

    engine = engine_for(_Adaptive(), F.config)
    for op in ops[:12]:
        engine.apply(op)
    with pytest.raises(PolicyError, match="read once, when the engine is built"):
        engine.apply(ops[12])


@pytest.mark.parametrize("policy", SLICE)
def test_the_symbolic_step_is_the_executable_step(policy: str) -> None:
    from checkers.symbolic.selfcheck import self_check

    r = self_check(policy, walks=6, steps=8)
    assert r.ok, r.render()
    assert r.steps >= 30


@pytest.mark.slow
@pytest.mark.parametrize("policy", ALL)
def test_the_symbolic_step_is_the_executable_step_everywhere(policy: str) -> None:
    from checkers.symbolic.selfcheck import self_check

    r = self_check(policy, walks=60, steps=12)
    assert not r.mismatches, r.render()


def test_the_self_check_catches_a_wrong_symbolic_reading() -> None:
    import attrs

    from checkers.symbolic.bmc import profile
    from checkers.symbolic.selfcheck import self_check
    from policies.lru import LRU

    right = profile("kvtether")
    # the reclaim rule forgotten: a close that frees dead KV is not a symbolic successor
    no_reclaim = self_check(
        "kvtether", walks=4, steps=8, prof=attrs.evolve(right, reclaims_dead=False)
    )
    assert no_reclaim.mismatches
    assert "the engine's successor is not admitted" in no_reclaim.mismatches[0]
    # the wrong rank: found once a walk makes the two orders disagree (walk 8 of seed 0)
    wrong_rank = self_check("kvtether", walks=9, steps=12, prof=attrs.evolve(right, rank=LRU.rank))
    assert [m.split(":")[0] for m in wrong_rank.mismatches] == ["walk 8"]
    assert self_check("mori").outside == "it has no declarative rank"


def test_prove_cli_takes_the_fragment_size(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["prove", "lru", "--contexts", "2", "--slots", "3", "--edits", "2"]
    inv = ["--invariant", "no-zombie-kv,free-at-boundary", "--depth", "3", "--json"]
    assert main([*args, *inv]) == 0  # lru claims neither: findings, not failures
    out = json.loads(capsys.readouterr().out)
    assert out["fragment_size"] == {"contexts": 2, "slots": 3, "edits": 2}
    # each verdict names its scope (issue 62 item 4): never "for all sizes"
    sizes = "the fragment of 2 contexts of one block each, 3 slots in one tier, 2 edit(s) each"
    for a in out["fragment"]:
        assert (
            a["scope"]
            == {
                "proved": f"every depth of {sizes}; not for all sizes",
                "bounded": f"up to depth {a['depth']} of {sizes}",
                "violated": f"a counterexample of depth {a['depth']} in {sizes}",
                "unknown": "none",
            }[a["rung"]]
        )
    assert {(a["invariant"], a["rung"], a["depth"]) for a in out["fragment"]} == {
        ("no-zombie-kv", "violated", 2),
        ("free-at-boundary", "violated", 2),
    }
    for bad in (["--slots", "0"], ["--contexts", "7"], ["--edits", "-1"]):
        assert main(["prove", "lru", *bad]) == 2


def test_no_vacuous_proof_on_a_fragment_that_cannot_make_the_situation() -> None:
    """issue 62: a rung is `proved` only where the fragment makes the situation the invariant
    constrains. With one context no eviction ever chooses between blocks another context
    holds, so KVTether's eviction orders are `unknown` there, saying why; what the fragment
    does put to the test (a Dead block: no-zombie-kv) stays proved."""
    answers = {a.invariant: a for a in prove("kvtether", fragment=Fragment(contexts=1), depth=6)}
    for name in (
        "no-live-eviction-before-dead-reclaim",
        "state-priority-eviction",
        "suspended-mru",
    ):
        assert answers[name].rung == "unknown", name
        assert answers[name].reason.startswith("the fragment cannot make an eviction choosing")
    assert answers["no-zombie-kv"].rung == "proved"


def test_prove_json_carries_the_method_and_the_solvers_work() -> None:
    """Issue 62 item 4: each fragment answer names how it was reached (the invariant a proof
    used) and the solver's work -- queries and Z3 resource units, the same in a fresh process
    on any machine (the time is the one figure that is not)."""
    small = ["--contexts", "1", "--slots", "2", "--edits", "0", "--depth", "2"]
    argv = ["prove", "kvtether", "--invariant", "no-zombie-kv", *small]
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-m", "kvmodel.cli", *argv, "--json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["fragment"]
        for _ in range(2)
    ]
    first, second = runs
    for a in first:
        assert a["rung"] == "proved"
        assert a["method"].startswith(f"{a['depth']}-induction of the invariant itself")
        assert a["queries"] >= 2  # BMC to depth 2, then induction
        assert a["rlimit_units"] > 0
    assert [(a["queries"], a["rlimit_units"]) for a in first] == [
        (a["queries"], a["rlimit_units"]) for a in second
    ]


@pytest.mark.parametrize("policy", ["kvtether", "checkers.search.mutants:LateDeadReclaim"])
def test_explore_leaves_the_contract_model_out_only_where_no_invariant_reads_it(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the contract model (no invariant it judges reads it) the exhaustive search finds
    the same failures at the same depths, the same states and the same witnesses; with an
    invariant that reads it, the model is there."""
    import checkers.symbolic.fragment as fragment
    from checkers.invariants import Monitor

    made: list[bool] = []

    class Recording(Monitor):
        def __init__(self, *a: Any, contract: bool = True, **k: Any) -> None:
            made.append(contract)
            super().__init__(*a, contract=contract, **k)

    class WithModel(Monitor):
        def __init__(self, *a: Any, contract: bool = True, **k: Any) -> None:
            super().__init__(*a, contract=True, **k)

    f = Fragment(contexts=2, slots=3, edits=1)
    names = ["accounting", "no-zombie-kv", "free-at-boundary", "pinned-never-evicted"]
    monkeypatch.setattr(fragment, "Monitor", Recording)
    lean = explore(policy, f, 4, names)
    explore(policy, f, 1, [*names, "suspended-mru"])
    assert made == [False, True]
    monkeypatch.setattr(fragment, "Monitor", WithModel)
    full = explore(policy, f, 4, names)
    assert (lean.failing, lean.states, lean.stopped) == (full.failing, full.states, full.stopped)
    assert lean.witnesses is not None
    assert full.witnesses is not None
    assert lean.witnesses.seen == full.witnesses.seen
    assert lean.states > 100


class _LockedTether(KVTether):
    """KVTether holding a lock, as a policy shared across threads might: no state of a run
    under it can be copied, so the exhaustive search cannot branch."""

    name: ClassVar[str] = "locked-tether"

    def __init__(self) -> None:
        super().__init__()
        import threading

        self._lock = threading.Lock()


def test_a_state_the_search_cannot_copy_makes_every_rung_unknown_never_a_crash() -> None:
    """The symbolic rungs would say proved (the policy's data is KVTether's); the executable
    model's search, which must corroborate them, cannot copy a state: it stops and says why,
    and no rung it did not corroborate is proved (it had raised out of prove)."""
    f = Fragment(contexts=2)
    found = explore(_LockedTether(), f, 3, ["no-zombie-kv"])
    assert found.capped is not None
    assert found.capped.startswith("at depth 1: the search cannot copy a state of the run")
    answers = prove(_LockedTether(), ["no-zombie-kv", "accounting"], fragment=f, depth=3)
    assert {a.rung for a in answers} == {"unknown"}
    assert all("search stopped at depth 1" in a.reason for a in answers)
    assert {a.rung for a in prove(KVTether(), ["no-zombie-kv"], fragment=f, depth=3)} == {"proved"}
