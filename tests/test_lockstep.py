"""Lockstep differential testing (checkers.conformance.lockstep) and its pytest plugin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from checkers.conformance.lockstep import EngineImplementation, differential, run_lockstep
from checkers.conformance.pytest_plugin import TIERED_CONFIG as CFG
from kvmodel.io.trace import Infer
from kvmodel.logical import Sequences
from kvmodel.workloads import RandomParams, random_trace

RANKED = ["lru", "vllm-prefix", "kvtether", "hbm-first", "lachesis-det", "tether-lachesis"]


@pytest.mark.parametrize("policy", RANKED)
def test_the_reference_agrees_with_itself(policy: str) -> None:
    res = differential(lambda c: EngineImplementation(policy, c), policy, CFG, max_examples=60)
    assert res.ok, res.render()
    assert res.examples == 60
    # the default traces put the small engine under pressure: an OK that never evicted or
    # rejected would say nothing about eviction order (the render warns when that happens)
    assert min(res.coverage["evict"], res.coverage["reject"]) > 0, res.coverage
    assert res.render().splitlines()[-1].startswith("coverage: ")
    assert "warning" not in res.render()


def test_the_default_traces_are_half_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walks for half the examples, agent traces for the other half: one ``one_of`` of the two
    gave 17 walks in 100 examples, and walks are what fills a small engine."""
    import checkers.conformance.lockstep as lockstep

    drawn: list[str] = []

    def counting(trace, *args, **kwargs):  # type: ignore[no-untyped-def]
        drawn.append(str(trace.header.meta.get("generator", "agent")))
        return run_lockstep(trace, *args, **kwargs)

    monkeypatch.setattr(lockstep, "run_lockstep", counting)
    res = differential(lambda c: EngineImplementation("lru", c), "lru", CFG, max_examples=40)
    assert res.ok
    assert drawn[:20] == ["random"] * 20
    assert "random" not in drawn[20:]
    assert len(drawn) == 40


@pytest.mark.parametrize(
    ("mutant", "policy"),
    [
        ("checkers.search.mutants:LateDeadReclaim", "kvtether"),
        ("checkers.search.mutants:LeadInHBM", "lachesis-det"),
        ("checkers.search.mutants:IndexesTemporary", "kvtether"),
    ],
)
def test_mutants_diverge_on_a_small_shrunk_trace(mutant: str, policy: str) -> None:
    res = differential(lambda c: EngineImplementation(mutant, c), policy, CFG, max_examples=200)
    assert not res.ok
    assert res.trace is not None
    # found on an agent trace (shrunk by Hypothesis) or a random walk (delta debugging)
    assert len(res.trace.ops) <= 20
    assert res.one_minimal
    assert res.coverage["ops"] >= len(res.trace.ops)
    # the shrunk trace replays to the same divergence
    again = run_lockstep(res.trace, lambda c: EngineImplementation(mutant, c), policy, CFG)
    assert again == res.verdict


def test_a_generated_trace_that_is_not_valid_input_fails_the_search() -> None:
    """A trace the strategy draws is valid input by construction; one that is not (the random
    walks' clock once ran back) is the generator's bug, not a divergence of the implementation,
    which would otherwise be blamed for refusing it ("the implementation crashed")."""
    from hypothesis import strategies as st

    from checkers.invariants.replay import RefusedTraceError
    from kvmodel.io.trace import Trace

    good = random_trace(RandomParams(seed=1, ops=12))
    bad = Trace(good.header, (*good.ops[:5], attrs.evolve(good.ops[5], t=-1.0), *good.ops[6:]))
    with pytest.raises(RefusedTraceError, match=r"not valid input: op 5 .*time went back"):
        differential(lambda c: EngineImplementation("lru", c), "lru", CFG, traces=st.just(bad))


def test_a_crashing_or_confused_implementation_is_a_divergence() -> None:
    class Crashes:
        def apply(self, index: int, op: object) -> list[dict[str, object]]:
            if isinstance(op, Infer):
                raise RuntimeError("boom")
            return []

    class WrongOp:
        def apply(self, index: int, op: object) -> list[dict[str, object]]:
            return [{"op": index + 1, "kind": "reject"}]

    tr = random_trace(RandomParams(seed=2, ops=40))
    v = run_lockstep(tr, lambda _c: Crashes(), "lru", CFG)
    assert v.verdict == "ILLEGAL"
    assert "crashed" in v.reason
    v = run_lockstep(tr, lambda _c: WrongOp(), "lru", CFG)
    assert v.verdict == "ILLEGAL"
    assert v.op == 0


def test_sequences_track_the_logical_state_like_the_engine() -> None:
    tr = random_trace(RandomParams(seed=3, ops=200))
    seq, ref = Sequences(4), EngineImplementation("lru", CFG)
    for i, op in enumerate(tr.ops):
        if isinstance(op, Infer):
            blocks = seq.blocks(op.ctx, op.output)
            chain = [ref.engine.view.block(b).key for b in ref.engine.view.chain(op.ctx)]
            valid = ref.engine.contexts[op.ctx].valid
            assert [b.key for b in blocks[:valid]] == chain[:valid]
        seq.apply(op)
        ref.apply(i, op)
        for c, ctx in ref.engine.contexts.items():
            assert seq.messages(c) == tuple(m for m, _ in ctx.entries)


def test_pytest_plugin_fixture(tmp_path: Path) -> None:
    (tmp_path / "test_impl.py").write_text(
        "from checkers.conformance.lockstep import EngineImplementation\n"
        "from checkers.conformance.pytest_plugin import TIERED_CONFIG\n"
        "def test_good(kvmodel_lockstep):\n"
        "    kvmodel_lockstep(lambda c: EngineImplementation('kvtether', c), 'kvtether')\n"
        "def test_bad(kvmodel_lockstep):\n"
        "    kvmodel_lockstep(\n"
        "        lambda c: EngineImplementation('checkers.search.mutants:LeadInHBM', c),\n"
        "        'lachesis-det',\n"
        "        TIERED_CONFIG,\n"
        "    )\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--kvmodel-examples",
         "80", str(tmp_path / "test_impl.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert "diverged on a trace of" in done.stdout


def test_an_implementation_that_cannot_be_built_gets_a_verdict_not_a_crash() -> None:
    # issue 14 item 7: a one-tier engine given a two-tier config
    def one_tier_only(config: object) -> EngineImplementation:
        raise ValueError("this engine has one tier")

    tr = random_trace(RandomParams(seed=2, ops=10))
    v = run_lockstep(tr, one_tier_only, "lru", CFG)
    assert (v.verdict, v.op) == ("UNKNOWN", None)
    assert "could not be built" in v.reason
    res = differential(one_tier_only, "lru", CFG, max_examples=5)
    assert not res.ok
    assert res.examples == 0
    assert "one tier" in res.render()


def test_the_fixture_default_is_one_tier_under_pressure() -> None:
    from checkers.conformance.pytest_plugin import DEFAULT_CONFIG

    assert len(DEFAULT_CONFIG.tiers) == 1
    res = differential(
        lambda c: EngineImplementation("vllm-prefix", c), "vllm-prefix", DEFAULT_CONFIG,
        max_examples=40,
    )  # fmt: skip
    assert res.ok, res.render()
    assert res.coverage["evict"] > 0
