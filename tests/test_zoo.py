"""The mutant zoo: every mutant in the manifest (checkers.search.mutants.MUTANTS) caught by the
smallest profile, with a replayable, 1-minimal (and value-minimal) bundle. Apart from
tests/test_checkers.py so that the two long runs -- the expected-verdict table of every built-in
policy there, the zoo here -- go to different workers (--dist loadfile)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario import simpler_by_one

from checkers.invariants import INVARIANTS
from checkers.invariants.contract import contract_violation
from checkers.invariants.replay import check_ops, nondeterminism
from checkers.search.mutants import MUTANTS
from checkers.search.outside_mutants import SCOPE_NEEDED
from checkers.search.report import check_policies, expected_verdicts
from checkers.search.scope import WalkScope
from checkers.search.shrink import numbered
from kvmodel.config import load_config
from kvmodel.io.trace import load_trace
from kvmodel.policy import resolve_policy

EXPECTED = expected_verdicts()


#: mutants the dev profile's 50 walks miss, and the walks that catch them
WALKS = {
    "checkers.search.mutants:StaleGroupIndex": 100,
    "checkers.search.outside_mutants:LatestHolderMRU": 200,
    "checkers.search.outside_mutants:WriterMRU": 200,
    "checkers.search.outside_mutants:LastPinWinsTether": 200,
}
#: mutants that need more machine examples than the dev profile's (none now: a pin ended one
#: op late, which shows only on the ops at a TTL deadline, needed the ci profile until the
#: walks aimed ops at deadlines -- seed 0's 30 machine examples miss it, its walks 6 and 7 find it)
PROFILE: dict[str, str] = {}


#: the zoo, each mutant with its expected invariant; those outside the default search's scope
#: are searched within the scope they need (SCOPE_NEEDED) in the slow suite (13-17 s each: long
#: walks, or wide engines of hundreds of blocks), while the default run checks that the default
#: walks miss them and the wider walks find them (tests/test_search.py)
def _zoo_slice() -> frozenset[str]:
    """The default run's slice of the zoo: the first mutant (by name) of each (zoo module,
    invariant) pair, so every kind of bug each zoo plants -- the outside authors' among them --
    and every invariant it breaks is searched for in every run; the rest (about two thirds of
    the zoo's time) run under ``-m slow``."""
    first: dict[tuple[str, str], str] = {}
    for m, inv in sorted(MUTANTS.items()):
        if m not in SCOPE_NEEDED:
            first.setdefault((m.split(":")[0], inv), m)
    return frozenset(first.values())


SLICE = _zoo_slice()
ZOO = [
    (m, inv) if m in SLICE else pytest.param(m, inv, marks=pytest.mark.slow)
    for m, inv in sorted(MUTANTS.items())
]


def test_the_slice_plants_every_bug_kind_and_breaks_every_invariant_the_zoo_breaks() -> None:
    searched = {m: inv for m, inv in MUTANTS.items() if m not in SCOPE_NEEDED}
    kinds = {(m.split(":")[0], inv) for m, inv in searched.items()}
    assert {(m.split(":")[0], searched[m]) for m in SLICE} == kinds
    assert {searched[m] for m in SLICE} == set(searched.values())
    assert len(SLICE) < len(searched) / 2


@pytest.mark.parametrize(("mutant", "invariant"), ZOO)
def test_every_mutant_is_caught_with_a_replayable_bundle(
    mutant: str, invariant: str, tmp_path: Path
) -> None:
    # the smallest profile (30 examples, 50 walks) and delta debugging alone (the CLI tests
    # cover Hypothesis's shrinking): the zoo is caught without the default budget -- but for
    # the stale group index, which needs 100 walks (its traces fill a context's group, cut the
    # context mid-way, then evict from the group: 1 walk in 33), and the outside authors'
    # suspension rules and last-pin-wins, which get the ci profile's 200 (about 1 walk in 100
    # each; last-pin-wins needs a second, shorter pin over a pinned message); PROFILE names any
    # that needs more machine examples
    [report] = check_policies(
        [mutant],
        [invariant],
        profile=PROFILE.get(mutant, "dev"),
        out=tmp_path,
        hypothesis_shrink=False,
        walks=WALKS.get(mutant),
        walk_scope=SCOPE_NEEDED.get(mutant, WalkScope()),
    )
    assert report.verdict(invariant) == EXPECTED[mutant][invariant] == "violated"
    # and a deterministic policy is never called nondeterministic: a find made after the run
    # had stopped mid-op, on a state no trace reaches, does not replay, and had been reported so
    # (AgentWeightTable, whose order raises while an inference's blocks are being written)
    assert invariant == "nondeterministic" or "nondeterministic" not in report.result.found
    c = report.result.found[invariant]
    # (a long walk's too: HourClockLRU's 1,024-op find had stopped at the shrink budget at 488
    # ops, before delta debugging deleted whole contexts first)
    assert c.one_minimal
    bundle = report.bundles[invariant]
    trace = load_trace(bundle / "trace.jsonl")
    config = load_config(bundle / "config.toml")
    assert trace.ops == c.ops
    if invariant == "nondeterministic":
        again_nd = nondeterminism(trace.ops, mutant, config)
        assert again_nd is not None
        assert again_nd.op == c.violation.op
        return
    if invariant == "engine-contract":
        # the reference engine agrees with the contract on the same trace, both ways
        assert contract_violation(trace.ops, block_size=config.block_size) is None
        assert check_ops(trace.ops, "kvtether", config, ()).first(invariant) is None
    if c.found_by == "self-check":  # the predicting comparison, after the search found nothing
        engine = resolve_policy(mutant).engine_class  # type: ignore[attr-defined]
        assert contract_violation(trace.ops, engine, block_size=config.block_size) == c.violation
        return
    again = check_ops(trace.ops, mutant, config, [invariant], stop_at=invariant).first(invariant)
    assert again == c.violation  # bit for bit: same op, same message
    if invariant in INVARIANTS:  # its ids numbered from 1, unless the numbered trace passes
        named = numbered(trace.ops)
        assert named == list(trace.ops) or (
            check_ops(named, mutant, config, [invariant], stop_at=invariant).first(invariant)
            is None
        )
    # the header says whether the numbers were shrunk to the end (a finding keeps its values)
    assert trace.header.meta["value_minimal"] is c.value_minimal is (invariant in INVARIANTS)
    if invariant in INVARIANTS:  # and value-minimal means what it says
        for simpler in simpler_by_one(trace.ops):
            run = check_ops(simpler, mutant, config, [invariant], stop_at=invariant)
            assert run.trace_error is not None or run.first(invariant) is None
    assert (bundle / "steps.txt").read_text().startswith(f"counterexample: {mutant} violates")
    assert ">>" in (bundle / "steps.txt").read_text()
    logged = (bundle / "observations.jsonl").read_text()
    assert logged == check_ops(trace.ops, mutant, config, ()).engine.log.to_jsonl()
