"""Never invent a divergence, never lose a finding (issue 57): what is bad input is the contract's
to say, and whatever a policy or an engine under test raises is a finding, never a checker's
silent exit."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import numpy as np
import pytest

from checkers.invariants import INVARIANTS, deadline
from checkers.invariants.deadline import HUNG
from checkers.invariants.nversion import contract_refusal
from checkers.invariants.replay import check_ops
from checkers.search.driver import search
from checkers.search.faults import ENGINE_FAULTS, POLICY_FAULTS, RAISES
from kvmodel import EngineConfig, TierConfig
from kvmodel.contexts import Context
from kvmodel.engine import Engine
from kvmodel.errors import TraceError
from kvmodel.ids import TierName
from kvmodel.io.trace import Op
from kvmodel.policy import BasePolicy
from kvmodel.workloads.random_ops import RandomParams, random_trace

CFG = EngineConfig(4, (TierConfig(TierName("hbm"), 8), TierConfig(TierName("hbf"), 8)))


def _engine_refusal(ops: Sequence[Op], block_size: int) -> int | None:
    """The first op the reference engine refuses as bad input; None if it takes them all (one
    slot: every inference is rejected, which by P7.7 still advances the logical state)."""
    e = Engine(EngineConfig(block_size, (TierConfig(TierName("hbm"), 1),)), BasePolicy())
    for i, op in enumerate(ops):
        try:
            e.apply(op)
        except TraceError:
            return i
    return None


def _mutants(ops: Sequence[Op], rng: np.random.Generator) -> Iterator[list[Op]]:
    """Traces that are often bad input: an op moved, dropped or doubled, or a field changed (times
    renumbered so that only a deliberate step back in time is one)."""
    n = len(ops)
    for _ in range(12):
        out = list(ops)
        i, j = int(rng.integers(0, n)), int(rng.integers(0, n))
        kind = int(rng.integers(0, 5))
        if kind == 0:
            out.insert(j, out.pop(i))
        elif kind == 1:
            del out[i]
        elif kind == 2:
            out.insert(j, out[i])
        elif kind == 3:  # a field of op i changed to a value in or just out of range
            op = out[i]
            fields = [f for f in ("index", "count", "start", "stop", "upto") if hasattr(op, f)]
            if fields:
                f = fields[int(rng.integers(0, len(fields)))]
                out[i] = attrs.evolve(op, **{f: int(rng.integers(0, 6))})  # type: ignore[arg-type]
            elif hasattr(op, "ctx") and hasattr(ops[j], "ctx"):
                out[i] = attrs.evolve(op, ctx=getattr(ops[j], "ctx"))  # noqa: B009
        out = [attrs.evolve(op, t=float(k)) for k, op in enumerate(out)]
        if kind == 4 and len(out) > 2:
            out[i % len(out)] = attrs.evolve(out[i % len(out)], t=-1.0 + i % len(out))
        yield out


def test_the_contract_and_the_engine_agree_on_what_bad_input_is() -> None:
    """N-version: on 1,200 traces near valid ones, the contract model (written from the format's
    spec) refuses exactly the op the reference engine refuses, or neither refuses any."""
    rng = np.random.default_rng(57)
    refused = agreed = 0
    for seed in range(100):
        ops = random_trace(RandomParams(seed=seed, ops=40, p_ttl=0.5)).ops
        assert contract_refusal(ops) is None
        assert _engine_refusal(ops, 4) is None
        for bad in _mutants(ops, rng):
            mine = contract_refusal(bad)
            assert (mine[0] if mine else None) == _engine_refusal(bad, 4), (mine, bad)
            refused += mine is not None
            agreed += 1
    assert agreed == 1200
    assert refused > 400


def _mis_indexed_remove(self: Context, index: int, count: int) -> None:
    """An outside contributor's ``remove``: it refuses the last message (an off-by-one in its
    range check), a valid op."""
    if index + count >= len(self.entries):
        raise TraceError(f"expected index + count < {len(self.entries)}", field="count")
    _REAL_REMOVE(self, index, count)


_REAL_REMOVE = Context.remove


def test_a_patched_reference_that_refuses_a_valid_op_is_an_engine_internal_finding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine is the reference class itself, patched: it must not be trusted to say what
    bad input is (the Monitor once asked whether the engine's type was ``Engine``)."""
    from kvmodel.io.trace import Remove

    monkeypatch.setattr(Context, "remove", _mis_indexed_remove)
    ops = None
    for seed in range(200):
        tr = random_trace(RandomParams(seed=seed, ops=60)).ops
        run = check_ops(tr, "kvtether", CFG, INVARIANTS)
        if any(v.invariant == "engine-internal" for v in run.violations):
            ops = tr
            break
    assert ops is not None, "no random trace removes a context's last message"
    [v] = [v for v in run.violations if v.invariant == "engine-internal"]
    assert v.op is not None
    assert isinstance(ops[v.op], Remove)
    assert "refused valid input" in v.message
    assert run.trace_error is None


# ---------------------------------------------------------------- the fault sweep (item 2)

FAULTS = [*POLICY_FAULTS, *ENGINE_FAULTS]
#: a random walk that calls every hook at least three times on CFG (27 evictions under lru)
SWEEP = random_trace(RandomParams(seed=0, ops=60, max_tokens=12)).ops


def _expected(name: str) -> str:
    return "engine-internal" if name in ENGINE_FAULTS else "policy-protocol"


def _kind(name: str) -> str:
    """The exception kind a subject raises, as its finding names it."""
    if name == "EngineRefuses":
        return "TraceError"
    if "Hangs" in name:
        return HUNG
    return next(k for k in RAISES if k in name)


@pytest.fixture(autouse=True)
def _short_deadline(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hang subjects sleep an hour: the op deadline ends them in a fifth of a second. Only
    theirs: a short deadline on every test once fired on a loaded CI machine inside a slow
    gen-2 garbage collection of a subject that does not hang (for a hang subject, an op of its
    that the deadline cut short is a hang finding either way)."""
    if "Hang" in request.node.name:
        monkeypatch.setattr(deadline, "OP_SECONDS", 0.2)


@pytest.mark.parametrize("name", FAULTS)
def test_every_fault_is_a_finding_of_a_checked_replay_and_of_the_search(name: str) -> None:
    """Every exception kind at every hook (and an engine that refuses or crashes mid-run): a
    finding naming what was raised, with what the run saw before it -- never a lost run, never
    a silent exit (``SystemExit`` once ended ``kvmodel check`` with status 0 and no output)."""
    path = f"checkers.search.faults:{name}"
    run = check_ops(SWEEP, path, CFG, INVARIANTS)
    [v] = [v for v in run.violations if v.invariant == _expected(name)]
    assert _kind(name) in v.message
    assert run.trace_error is None
    # (a hang waits out the deadline in every run that reaches it: fewer runs)
    n, walks = (3, 2) if "Hangs" in name else (5, 20)
    found = search(path, INVARIANTS, max_examples=n, steps=20, walks=walks, hypothesis_shrink=False)
    assert _expected(name) in found.found
    assert found.checker_errors == ()


@pytest.mark.parametrize(
    "name",
    ["RaisesSystemExitInPlace", "RaisesEscapeInObserve", "EngineRaisesSystemExit", "EngineHangs"],
)
def test_replay_check_and_check_report_a_fault_and_exit_1(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvmodel.cli import main
    from kvmodel.io.trace import Trace, TraceHeader, dump_trace

    path = f"checkers.search.faults:{name}"
    trace = tmp_path / "t.jsonl"
    dump_trace(Trace(TraceHeader(), tuple(SWEEP)), trace)
    config = tmp_path / "engine.toml"
    config.write_text(
        'block_size = 4\n[[tiers]]\nname = "hbm"\nblocks = 8\n[[tiers]]\nname = "hbf"\nblocks = 8\n'
    )
    argv = ["replay", str(trace), "--policy", path, "--config", str(config), "--check", "--quiet"]
    assert main(argv) == 1
    assert _expected(name) in capsys.readouterr().out
    argv = ["check", path, "--max-examples", "3", "--steps", "10", "--walks", "2", "--quiet"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out
    assert _expected(name) in out


@pytest.mark.parametrize(
    "name",
    [
        "RaisesSystemExitInPlace",
        "EngineRaisesEscape",
        "EngineRefuses",
        "HangsInPlace",
        "EngineHangs",
    ],
)
def test_lockstep_and_the_oracle_report_a_fault_as_a_verdict(name: str) -> None:
    """The implementation raising is its divergence (ILLEGAL, crashed); the reference's policy
    raising is the oracle's UNKNOWN at that op, never a crash of the judge."""
    from checkers.conformance.lockstep import EngineImplementation, run_lockstep
    from checkers.conformance.oracle import check_log
    from kvmodel.io.observations import observation_to_json
    from kvmodel.io.trace import Trace, TraceHeader
    from kvmodel.replay import replay

    path = f"checkers.search.faults:{name}"
    tr = Trace(TraceHeader(), tuple(SWEEP))
    v = run_lockstep(tr, lambda c: EngineImplementation(path, c), "lru", CFG)
    assert v.verdict == "ILLEGAL"
    assert (HUNG if "Hangs" in name else "crashed") in v.reason
    if name in POLICY_FAULTS:
        log = [observation_to_json(o) for o in replay(tr, "lru", CFG).engine.log]
        v = check_log(tr, log, path, CFG)
        assert v.verdict == "UNKNOWN"
        assert _kind(name) in v.reason


@pytest.mark.parametrize(
    "name",
    ["RaisesSystemExitInPlace", "RaisesEscapeInObserve", "EngineRaisesSystemExit", "HangsInPlace"],
)
def test_prove_reach_reports_a_fault_as_a_finding(name: str) -> None:
    """The exhaustive search too: a fault is a finding at the depth it first occurs, never a
    crash of the prover. (An engine class made at run time does not pickle, which crashed the
    search with a PicklingError traceback: the search now copies such a state another way.)"""
    from checkers.symbolic.reach import reach

    found = reach(f"checkers.search.faults:{name}", max_states=2000, until=[_expected(name)])
    depth, _, message = found.failing[_expected(name)]
    assert depth >= 1
    assert _kind(name) in message


class _Unpicklable(BasePolicy):
    """An outside author's policy whose state neither pickles nor deep-copies (it holds a
    lock): the search cannot branch from its states."""

    name = "holds-a-lock"

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()


def test_prove_reach_on_a_state_it_cannot_copy_is_bounded_and_says_why() -> None:
    from checkers.symbolic.reach import reach

    found = reach(_Unpicklable(), max_states=60)
    assert not found.proves
    rung, detail = found.verdict("no-zombie-kv")
    assert rung == "bounded"
    assert "cannot copy a state of the run" in detail
    assert "lock" in detail


def test_a_crash_inside_the_checker_keeps_what_the_search_had_found(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug in a later phase of the search (here the determinism check) is reported as the
    checker's error, exit 3, beside the findings already seen -- which are not lost."""
    from checkers.search import driver
    from kvmodel.cli import main

    def broken(*args: object, **kw: object) -> None:
        raise RuntimeError("a planted checker bug")

    monkeypatch.setattr(driver, "nondeterminism", broken)
    r = search("lru", INVARIANTS, max_examples=3, steps=10, walks=2)
    assert "no-zombie-kv" in r.found
    # (shrinking replays through it too: each find is then reported as it was found)
    assert r.checker_errors[0] == "the determinism check: RuntimeError: a planted checker bug"
    assert all("a planted checker bug" in e for e in r.checker_errors)
    assert main(["check", "lru", "--max-examples", "3", "--steps", "10", "--walks", "2"]) == 3
    out = capsys.readouterr().out
    assert "CHECKER ERROR" in out
    assert "no-zombie-kv" in out


def test_a_log_time_finding_names_the_block_by_the_key_in_the_log() -> None:
    """Issue 57: a message named an internal slot ("e.g. 0"), not the key a user finds in
    their own log; the log-time checks and the zombie checks now say both."""
    from checkers.conformance.pytest_plugin import TIERED_CONFIG
    from kvmodel.io.observations import observation_to_json

    tr = random_trace(RandomParams(seed=0, ops=80)).ops
    bad = "checkers.search.mutants:EvictsPinnedWhenFull"
    run = check_ops(tr, bad, TIERED_CONFIG, ["pinned-never-evicted", "no-zombie-kv"])
    keys = {r.get("key") for r in map(observation_to_json, run.engine.log)}
    for name in ("pinned-never-evicted", "no-zombie-kv"):
        v = run.first(name)
        assert v is not None, name
        assert v.message.split("(key ")[1].split(")")[0] in keys, v.message


@pytest.mark.parametrize(
    ("mutant", "invariant"),
    [("MRUInverted", "suspended-mru"), ("LateDeadReclaim", "no-live-eviction-before-dead-reclaim")],
)
def test_an_eviction_order_finding_names_both_blocks_by_their_keys(
    mutant: str, invariant: str
) -> None:
    """The eviction-order messages named slots alone ("evicted block 0 ... before block 1"),
    which no log a user holds carries; both blocks now carry the key the log gives them."""
    from kvmodel.io.observations import observation_to_json

    r = search(f"checkers.search.mutants:{mutant}", [invariant], max_examples=20, steps=15,
               walks=4, hypothesis_shrink=False)  # fmt: skip
    cex = r.found[invariant]
    run = check_ops(cex.ops, f"checkers.search.mutants:{mutant}", cex.config, [invariant])
    keys = {r.get("key") for r in map(observation_to_json, run.engine.log)}
    v = run.first(invariant)
    assert v is not None
    named = [part.split(")")[0] for part in v.message.split("(key ")[1:]]
    assert len(named) == 2, v.message
    assert set(named) <= keys, v.message
