"""The checkers: expected verdicts as data, the mutant zoo, bundles that replay, the shrinker,
the stateful machine as a test, and the trace strategies (STYLE §10-11)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from scenario import simpler_by_one

import checkers.search.claim_mutants
import checkers.search.engine_mutants
import checkers.search.movement_mutants
import checkers.search.mutants
import checkers.search.outside_mutants
from checkers.invariants import FINDINGS, INVARIANTS, STRUCTURAL
from checkers.invariants.replay import check_ops
from checkers.search.controls import CONTROLS
from checkers.search.driver import search
from checkers.search.mutants import MUTANTS
from checkers.search.report import check_policies, expected_verdicts
from checkers.search.scope import TIER_BLOCKS, WALK_OPS, WIDE_EVERY, WIDE_TIER_BLOCKS
from checkers.search.shrink import numbered, op_groups, shrink, shrink_engine, shrink_values
from checkers.search.stateful import check_config, make_machine
from checkers.search.strategies import agent_traces
from kvmodel.cli import main
from kvmodel.config import EngineConfig
from kvmodel.ids import TierName
from kvmodel.io.trace import Append, Infer, Op, Pin
from kvmodel.memory import TierConfig
from kvmodel.policy import BasePolicy, claimed_invariants, registered_policies, resolve_policy
from kvmodel.replay import replay

EXPECTED = expected_verdicts()
BUILTIN = sorted(registered_policies())


def test_expected_verdicts_cover_every_policy_and_mutant() -> None:
    assert set(BUILTIN) <= set(EXPECTED)
    zoo = (
        checkers.search.mutants,
        checkers.search.claim_mutants,
        checkers.search.engine_mutants,
        checkers.search.outside_mutants,
        checkers.search.movement_mutants,
    )
    mutants = {p for p in EXPECTED if p.split(":")[0] in {m.__name__ for m in zoo}}
    defined = {
        f"{module.__name__}:{name}"
        for module in zoo
        for name, obj in vars(module).items()
        if isinstance(obj, type)
        and issubclass(obj, BasePolicy)
        # (a zoo that is a package defines its mutants in its submodules and re-exports them)
        and (obj.__module__ == module.__name__ or obj.__module__.startswith(f"{module.__name__}."))
        and not name.startswith("_")  # the bugs, as mixins
    }
    # every mutant class is in the zoo, and the zoo is the manifest: none can be left out
    assert set(MUTANTS) == mutants == defined
    # every claim of every built-in policy has a mutant of that policy caught breaking it
    # (the structural claims are the engine's: one engine-planted mutant each suffices)
    parents: dict[str, set[str]] = {}
    for m, inv in MUTANTS.items():
        for base in type(resolve_policy(m)).__mro__[1:]:
            if base.__module__.startswith("policies."):
                parents.setdefault(base.name, set()).add(inv)  # type: ignore[attr-defined]
                break
    for p in BUILTIN:
        own = set(claimed_invariants(resolve_policy(p))) - STRUCTURAL
        assert own <= parents.get(p, set()), f"{p}: no mutant for {own - parents.get(p, set())}"
    assert set(MUTANTS.values()) >= STRUCTURAL
    for p in BUILTIN:
        assert set(EXPECTED[p]) == set(INVARIANTS), p
        claims = set(claimed_invariants(resolve_policy(p))) | STRUCTURAL
        held = {i for i, v in EXPECTED[p].items() if v == "holds"}
        assert claims <= held, f"{p} claims what the data says is violated: {claims - held}"


#: the built-in policies whose whole row the default run searches (about 11 s each); the rest
#: run under ``-m slow``. Together these violate every invariant any built-in violates (mori
#: alone does: every unclaimed one) and claim every lifecycle, placement and movement claim: the
#: kvtether family's five (tether-lachesis), Lachesis's deterministic placement (lachesis-det),
#: a copy tier's rules (vllm-offload-arc), and plain recency's (lru).
TABLE_SLICE = ("lachesis-det", "lru", "mori", "tether-lachesis", "vllm-offload-arc")


def test_the_table_slice_covers_every_verdict_kind() -> None:
    violated = {i for p in BUILTIN for i, v in EXPECTED[p].items() if v == "violated"}
    assert violated <= {i for p in TABLE_SLICE for i, v in EXPECTED[p].items() if v == "violated"}
    claimed = {i for p in BUILTIN for i in claimed_invariants(resolve_policy(p))}
    assert claimed <= {i for p in TABLE_SLICE for i in claimed_invariants(resolve_policy(p))}


@pytest.mark.parametrize(
    "policy", [p if p in TABLE_SLICE else pytest.param(p, marks=pytest.mark.slow) for p in BUILTIN]
)
def test_checker_reaches_every_expected_verdict(policy: str) -> None:
    # one policy per search: a search is a function of its arguments, so its row is the row a
    # check of every policy at once prints
    [report] = check_policies([policy], profile="ci", hypothesis_shrink=False)
    row = {i: report.verdict(i) for i in (*INVARIANTS, *FINDINGS)}
    assert {i: row[i] for i in INVARIANTS} == EXPECTED[policy]
    # no built-in policy has a refused decision, an exception, a crash or nondeterminism
    assert {i: row[i] for i in FINDINGS} == dict.fromkeys(FINDINGS, "holds")


def test_policies_searched_in_parallel_report_what_a_serial_check_reports(tmp_path: Path) -> None:
    # several policies with -j 2: one search per process, each serial within, the bundles
    # written by the parent; every verdict, counterexample, bundle and count is the serial run's
    policies = ["lru", "kvtether", "checkers.search.mutants:MRUInverted"]
    names = ["no-zombie-kv", "suspended-mru"]
    serial = check_policies(
        policies, names, profile="dev", hypothesis_shrink=False, walks=8, out=tmp_path / "1"
    )
    done: list[str] = []
    parallel = check_policies(
        policies,
        names,
        profile="dev",
        hypothesis_shrink=False,
        walks=8,
        out=tmp_path / "2",
        jobs=2,
        done=done.append,
    )
    assert sorted(done) == sorted(policies)
    assert [r.policy for r in parallel] == policies
    for a, b in zip(serial, parallel, strict=True):
        assert a.result.found == b.result.found
        assert json.dumps(a.to_json()).replace("/1/", "/2/") == json.dumps(b.to_json())
        for inv, bundle in a.bundles.items():
            for f in sorted(bundle.iterdir()):
                assert f.read_bytes() == (b.bundles[inv] / f.name).read_bytes(), f
    # the comparison covered finds: LRU's zombie KV (a finding) and the mutant's broken claim
    assert "no-zombie-kv" in serial[0].result.found
    assert serial[2].failures() == ["suspended-mru"]
    # one policy with -j 2: its walks, then its finds' shrinking (Hypothesis's targeted run and
    # delta debugging), one invariant per process
    runs = [search("lru", names, max_examples=10, steps=20, walks=10, jobs=jobs) for jobs in (1, 2)]
    assert sorted(runs[0].found) == names  # two shrunk at once
    assert {c.found_by for c in runs[0].found.values()} == {"machine"}  # (targeted runs too)
    assert runs[0].found == runs[1].found


def test_bundles_replay_through_the_cli_and_the_repro_test_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cex"
    assert main(["check", "lru", "--invariants", "no-zombie-kv", "--out", str(out)]) == 0
    bundle = out / "lru" / "no-zombie-kv"
    capsys.readouterr()
    code = main(
        [
            "replay",
            str(bundle / "trace.jsonl"),
            "--policy",
            "lru",
            "--config",
            str(bundle / "config.toml"),
            "--check",
            "no-zombie-kv",
        ]
    )
    assert code == 1
    assert "VIOLATED no-zombie-kv" in capsys.readouterr().out
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(bundle / "test_repro.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 1, r.stdout  # the reproducer fails while the counterexample stands


def test_check_cli_exit_codes_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a claimed invariant violated (a mutant) -> 1; a finding on an unclaimed one -> 0
    mutant = "checkers.search.mutants:MRUInverted"
    assert main(["check", mutant, "--invariants", "suspended-mru", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["failures"] == {"checkers.search.mutants:MRUInverted": ["suspended-mru"]}
    # the search's scope
    assert (d["profile"], d["seed"], d["walk_ops"]) == ("ci", 0, WALK_OPS)
    assert (d["tier_blocks"], d["narrow_tier_blocks"], d["wide_every"]) == (
        WIDE_TIER_BLOCKS,
        TIER_BLOCKS,
        WIDE_EVERY,
    )
    inv = d["reports"][0]["invariants"]["suspended-mru"]
    assert inv["verdict"] == "violated"
    assert inv["claimed"]
    assert inv["one_minimal"]
    assert inv["value_minimal"]
    # quiet by default: the table, one line per policy, where the details are. (-v only prints
    # more of the same search, which is deterministic: it is searched once for both runs)
    import checkers.search.report as report

    searched: dict[str, list[report.PolicyReport]] = {}
    real = report.check_policies

    def once(policies: list[str], names: list[str], **kw: Any) -> list[report.PolicyReport]:
        key = repr((policies, names, sorted((k, v) for k, v in kw.items() if k != "done")))
        if key not in searched:
            searched[key] = real(policies, names, **kw)
        return searched[key]

    monkeypatch.setattr(report, "check_policies", once)
    assert main(["check", "lru", "--invariants", "no-zombie-kv,accounting"]) == 0
    out = capsys.readouterr().out
    line = ("lru: 0 claims violated; 0 findings; 1 unclaimed invariant violated; "
            "0 coverage warnings")  # fmt: skip
    assert line in out.splitlines()
    assert "never fired" not in out
    assert "(-v for each policy's search" in out
    assert len(out.splitlines()) < 20
    assert main(["check", "lru", "--invariants", "no-zombie-kv,accounting", "-v"]) == 0
    out = capsys.readouterr().out
    assert "violated, not claimed: no-zombie-kv" in out  # not "finding", the F columns' word
    assert "examples" in out
    assert "never fired" in out
    assert len(searched) == 1
    assert main(["check", "lru", "--invariants", "bogus"]) == 2
    assert main(["check", "nope"]) == 2
    # two policies of one name would share a row (as a discover --out module and the built-in
    # `discovered` could): refused before any search
    from kvmodel.errors import ConfigError

    with pytest.raises(ConfigError, match="both named 'lru'"):
        real(["lru", "policies.lru:LRU"])


def test_an_engine_refusing_valid_input_is_a_finding_and_bad_input_stays_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What bad input is, the reference's logical semantics decide: an engine that refuses a pin
    over an empty range (which the format allows) has an engine-internal finding, on replay and
    in the search alike; a trace that is bad input stays a usage error (exit 2), whichever
    engine reads it first."""
    from kvmodel import EngineConfig, TierConfig
    from kvmodel.ids import ContextId, MessageId, SessionId, TierName
    from kvmodel.io.trace import Append, Open, Pin, Trace, TraceHeader, dump_trace
    from kvmodel.messages import AgentKind, Message, MessageKind, Role

    strict = "checkers.search.outside_mutants:RefusesEmptyPinTether"
    c = ContextId("c")
    msg = Message(MessageId("m"), Role.USER, MessageKind.USER, 8)
    ops: list[Op] = [
        Open(0.0, c, SessionId("s"), AgentKind.MAIN),
        Append(0.0, c, (msg,)),
        Pin(1.0, c, 1, 1),
    ]
    cfg = EngineConfig(4, (TierConfig(TierName("hbm"), 8),))
    run = check_ops(ops, strict, cfg, INVARIANTS)
    assert run.trace_error is None
    [v] = [v for v in run.violations if v.invariant == "engine-internal"]
    assert v.op == 2
    assert "refused valid input: TraceError" in v.message
    assert "covers no message" in v.message
    assert check_ops(ops, "kvtether", cfg, INVARIANTS).violations == ()
    # bad input (a range past the context's end) is bad for the reference too: it propagates
    bad: list[Op] = [*ops[:2], Pin(1.0, c, 0, 5)]
    assert check_ops(bad, strict, cfg, INVARIANTS).trace_error is not None
    path = tmp_path / "bad.jsonl"
    dump_trace(Trace(TraceHeader(), tuple(bad)), path)
    config = tmp_path / "engine.toml"
    config.write_text('block_size = 4\n[[tiers]]\nname = "hbm"\nblocks = 8\n')
    argv = ["replay", str(path), "--policy", strict, "--config", str(config), "--check"]
    assert main(argv) == 2
    assert "bad.jsonl" in capsys.readouterr().err
    dump_trace(Trace(TraceHeader(), tuple(ops)), path)
    assert main(argv) == 1
    assert "engine-internal" in capsys.readouterr().out


def test_shrink_reaches_one_minimal() -> None:
    ops = list(range(40))

    def fails(xs) -> bool:  # type: ignore[no-untyped-def]
        return 7 in xs and 23 in xs and 31 in xs

    small, minimal = shrink(ops, fails)
    assert small == [7, 23, 31]
    assert minimal


def test_shrink_deletes_a_context_whole_first() -> None:
    # three agents' ops interleaved; the failure needs agent b's inference alone. Chunks of the
    # trace cut a's and c's ops off their opening (an invalid trace: no failure), so plain ddmin
    # spends tries on them; deleting each context whole goes straight to b
    from kvmodel.ids import ContextId, MessageId, SessionId
    from kvmodel.io.trace import Append, EndSession, Fork, Infer, Open
    from kvmodel.messages import AgentKind, Message, MessageKind, Role

    def msg(i: int) -> Message:
        return Message(MessageId(f"m{i}"), Role.USER, MessageKind.INSTRUCTION, 4)

    a, b, c, d = (ContextId(x) for x in "abcd")
    ops: list[Op] = [Open(0.0, x, SessionId(f"s{x}"), AgentKind.MAIN) for x in (a, b, c)]
    for i in range(6):
        ops += [Append(float(i), x, (msg(10 * i + j),)) for j, x in enumerate((a, b, c))]
    ops += [Fork(7.0, d, a), Infer(7.0, d), Infer(8.0, b), Infer(8.0, a)]

    tries = [0]

    def fails(xs: Sequence[Op]) -> bool:
        tries[0] += 1
        opened: set[str] = set()
        for op in xs:  # (an op on a context not opened before it: an invalid trace)
            if isinstance(op, Fork) and op.src not in opened:
                return False
            if isinstance(op, Open | Fork):
                opened.add(op.ctx)
            elif not isinstance(op, EndSession) and op.ctx not in opened:
                return False
        return any(isinstance(op, Infer) and op.ctx == b for op in xs)

    groups = op_groups(ops)
    # a context with its children (a's has d); each session here is one context's tree, so it
    # has no group of its own (two contexts in one session do: their group, then the session's);
    # then each context's ops but its opening
    assert len(groups) == 4 + 4
    assert sum(groups[0](op) for op in ops) == 6 + 1 + 2 + 1  # a's: open, appends, infer; d's
    assert [op for op in ops if groups[4](op)] == [o for o in ops[3:] if o.ctx == a]  # type: ignore[union-attr]
    assert [op for op in ops if groups[7](op)] == [ops[-3]]  # d's inference, not its fork
    two = [Open(0.0, x, SessionId("s"), AgentKind.MAIN) for x in (a, b)]
    assert [[g(op) for op in two] for g in op_groups(two)] == [
        [True, False],
        [False, True],
        [True, True],
        [False, False],
        [False, False],
    ]
    small, minimal = shrink(ops, fails, groups=op_groups)
    assert (small, minimal) == ([ops[1], ops[-2]], True)
    grouped, tries[0] = tries[0], 0
    assert shrink(ops, fails) == (small, True)
    assert grouped < tries[0]  # (17 tries against 32; 19 and 45 when ddmin started over)


def _engine(*blocks: int) -> EngineConfig:
    names = ("hbm", "hbf", "ssd")
    return EngineConfig(4, tuple(TierConfig(TierName(names[i]), n) for i, n in enumerate(blocks)))


def test_shrink_engine_drops_last_tiers_and_blocks_to_one_minimal() -> None:
    # fails while the engine holds 10 blocks or more in the first two tiers
    def fails(c: EngineConfig) -> bool:
        return sum(t.blocks for t in c.tiers[:2]) >= 10

    small, minimal = shrink_engine(_engine(9, 16, 16), fails)
    assert [t.blocks for t in small.tiers] == [1, 9]  # the third tier dropped, then blocks
    assert minimal
    assert [t.name for t in small.tiers] == ["hbm", "hbf"]  # the tiers left keep their names
    # failure need not be monotone in a tier's size: the binary search's find is walked down
    # one block at a time, and what is returned fails
    odd = {3, 7, 8}
    small, minimal = shrink_engine(_engine(8), lambda c: c.tiers[0].blocks in odd)
    assert (small.tiers[0].blocks, minimal) == (7, True)
    # out of budget: what shrank so far, not called 1-minimal
    small, minimal = shrink_engine(_engine(9, 16, 16), fails, budget=3)
    assert fails(small)
    assert not minimal


def _value_ops() -> list[Op]:
    from kvmodel.ids import ContextId, MessageId, SessionId
    from kvmodel.io.trace import Open
    from kvmodel.messages import AgentKind, Message, MessageKind, Role

    def msg(i: int, tokens: int) -> Message:
        return Message(MessageId(f"m{i}"), Role.USER, MessageKind.USER, tokens)

    c, s = ContextId("c"), SessionId("s")
    return [
        Open(0.081, c, s, AgentKind.MAIN),
        Append(0.113, c, (msg(1, 7), msg(2, 24))),
        Pin(0.2, c, ttl=2.37),
        Infer(0.35, c, (msg(3, 14),), duration=0.454),
        Append(1.583, c, (msg(4, 9),)),
    ]


def _tokens(ops: Sequence[Op]) -> list[int]:
    return [m.tokens for op in ops for m in getattr(op, "messages", getattr(op, "output", ()))]


def test_shrink_values_makes_sizes_smaller_and_times_rounder() -> None:
    ops = _value_ops()

    # fails while the context holds 10 tokens or more before its inference (its output, 14
    # tokens, does not count), the pin's TTL is at least 1.5 and the last append comes at
    # least one second after the inference starts
    def fails(xs: Sequence[Op]) -> bool:
        append, pin = xs[1], xs[2]
        assert isinstance(append, Append)
        assert isinstance(pin, Pin)
        assert pin.ttl is not None
        appended = sum(m.tokens for m in append.messages)
        return appended >= 10 and pin.ttl >= 1.5 and xs[4].t - xs[3].t >= 1

    small, minimal = shrink_values(ops, fails)
    assert fails(small)
    assert minimal
    assert [type(op) for op in small] == [type(op) for op in ops]  # no op added or deleted
    # the first message as small as it goes, the second what is left; the output, which the
    # failure does not read, to one token
    assert _tokens(small) == [1, 9, 1, 1]
    # times down to the previous op's, but the last, which must stay a second after the
    # inference's: cut to a whole number; a duration to 0; a TTL cut to a whole number, never
    # to 0
    assert [op.t for op in small] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert small[3].duration == 0.0  # type: ignore[union-attr]
    assert small[2].ttl == 2.0  # type: ignore[union-attr]
    # value-minimal means what it says: no message can lose one token, no op move to the
    # previous op's time, no inference lose its duration, and still fail
    simpler = simpler_by_one(small)
    assert len(simpler) == 1 + 1  # the second message (9 tokens), the last op's time
    assert not any(fails(x) for x in simpler)
    # failing need not be monotone in a size: the binary search's find is walked down one
    # token at a time, and what is returned fails
    odd = {3, 7, 8}
    only, _ = shrink_values(ops, lambda xs: _tokens(xs)[0] in odd)
    assert _tokens(only)[0] == 7
    # a whole time, duration or TTL the fault needs goes down to the threshold: an inference a
    # day after the pin (a walk's clock had it at 129,126 s) at a day and a second, its
    # duration over an hour at 3,601 s, the TTL over a minute at 61 s
    infer, pin = ops[3], ops[2]
    assert isinstance(infer, Infer)
    assert isinstance(pin, Pin)
    late = [*ops[:2], attrs.evolve(pin, ttl=100.0), attrs.evolve(infer, t=129_126.0,
            duration=5_000.0), attrs.evolve(ops[4], t=129_126.0)]  # fmt: skip

    def needs_a_day(xs: Sequence[Op]) -> bool:
        infer, pin = xs[3], xs[2]
        assert isinstance(infer, Infer)
        assert isinstance(pin, Pin)
        assert pin.ttl is not None
        return infer.t - pin.t > 86_400 and infer.duration > 3_600 and pin.ttl > 60

    day, minimal = shrink_values(late, needs_a_day)
    assert minimal
    assert [op.t for op in day] == [0.0, 0.0, 0.0, 86_401.0, 86_401.0]
    assert (day[3].duration, day[2].ttl) == (3_601.0, 61.0)  # type: ignore[union-attr]
    assert not any(needs_a_day(x) for x in simpler_by_one(day))
    # out of budget: what shrank so far, not called value-minimal
    some, minimal = shrink_values(ops, fails, budget=3)
    assert fails(some)
    assert not minimal


def test_numbered_names_contexts_sessions_and_messages_in_order_of_appearance() -> None:
    from kvmodel.ids import ContextId, MessageId, SessionId
    from kvmodel.io.trace import Fork, Open, Return
    from kvmodel.messages import AgentKind, Message, MessageKind, Role

    def msg(i: str, h: str | None = None) -> Message:
        return Message(MessageId(i), Role.USER, MessageKind.USER, 3, h)

    a, b, s = ContextId("s1.worker18"), ContextId("c9"), SessionId("s7")
    ops: list[Op] = [
        Open(0.0, a, s, AgentKind.MAIN),
        Append(0.0, a, (msg("m58", "system-2"), msg("m12"))),
        Fork(0.0, b, a),
        Return(0.0, b, a, msg("m3", "h4")),
    ]
    named = numbered(ops)
    assert named == [
        Open(0.0, ContextId("c1"), SessionId("s1"), AgentKind.MAIN),
        Append(0.0, ContextId("c1"), (msg("m1", "system-2"), msg("m2"))),
        Fork(0.0, ContextId("c2"), ContextId("c1")),
        Return(0.0, ContextId("c2"), ContextId("c1"), msg("m3", "h4")),
    ]  # (content hashes kept: they say what is shared)
    # the engine decides the same on the numbered trace (B1, B3), and numbering is idempotent
    cfg = EngineConfig(2, (TierConfig(TierName("hbm"), 4),))
    assert [type(r) for r in check_ops(named, "lru", cfg, ()).engine.log] == [
        type(r) for r in check_ops(ops, "lru", cfg, ()).engine.log
    ]
    assert numbered(named) == named
    # a new name that is a content hash would make two messages share KV: no numbering
    clash = [*ops[:3], Return(0.0, b, a, msg("m3", "m2"))]
    assert numbered(clash) == clash


def test_endurance_budget_and_zombies_are_checked_on_replay() -> None:
    from kvmodel import EngineConfig, TierConfig
    from kvmodel.ids import TierName
    from kvmodel.workloads import AgenticParams, generate_agentic

    tr = generate_agentic(AgenticParams(seed=1, sessions=1, turns=1))
    cfg = EngineConfig(
        16,
        (
            TierConfig(TierName("hbm"), 64),
            TierConfig(TierName("hbf"), 512, bytes_per_block=2**21, pe_cycles=100),
        ),
    )
    run = check_ops(tr.ops, "lru", cfg, ["endurance-budget", "no-zombie-kv"])
    worn = run.first("endurance-budget")
    assert worn is not None  # 100 P/E cycles on 1 GiB of flash: worn out in days
    assert "device-years < 5" in worn.message
    assert run.first("no-zombie-kv") is not None
    ok = check_ops(tr.ops, "kvtether", cfg, ["no-zombie-kv", "endurance-budget"], endurance_years=0)
    assert ok.violations == ()


def test_claimed_invariants_hold_in_the_stateful_machine() -> None:
    """The machine as an ordinary test: KVTether against every invariant it claims."""
    from hypothesis.stateful import run_state_machine_as_test

    claims = sorted(claimed_invariants(resolve_policy("kvtether")))
    machine = make_machine("kvtether", claims, config=check_config(), fail_on=frozenset(claims))
    run_state_machine_as_test(
        machine, settings=settings(max_examples=40, deadline=None, stateful_step_count=25)
    )


@given(agent_traces(max_actions=25))
def test_agent_traces_are_always_valid(trace) -> None:  # type: ignore[no-untyped-def]
    r = replay(trace, "kvtether", check_config())
    assert r.summary.ops == len(trace.ops)


def test_the_determinism_sample_is_the_run_with_most_evictions() -> None:
    from checkers.search.coverage import SearchStats
    from kvmodel.ids import ContextId, SessionId
    from kvmodel.io.trace import Open
    from kvmodel.messages import AgentKind

    short = [Open(0.0, ContextId("a"), SessionId("s"), AgentKind.MAIN)]
    st = SearchStats()
    st.keep_sample(short * 9, check_config(), evictions=0)
    st.keep_sample(short * 2, check_config(), evictions=3)
    st.keep_sample(short * 5, check_config(), evictions=1)
    assert (len(st.sample), st.sample_evictions) == (2, 3)
    st.keep_sample(short * 4, check_config(), evictions=3)  # as many, and longer
    other = SearchStats()
    other.merge(st)
    assert (len(other.sample), other.sample_evictions) == (4, 3)


def test_a_wait_can_land_the_next_op_on_a_pin_deadline() -> None:
    """The machine's ``wait`` (and ``agent_traces``' ``advance``) with no duration runs the
    clock exactly to the next TTL pin deadline (spec P6's boundary), and does nothing when no
    deadline lies ahead."""
    from checkers.search.builder import HarnessBuilder

    b = HarnessBuilder()
    b.advance(None)
    assert b.t == 0.0
    b.start_session(0, True, 2.0)
    b.advance(0.5)
    b.pin(0, 0, 1, 10.0)
    b.advance(None)
    assert b.t == 2.0  # the first deadline, not the second
    [op] = b.user(0, 3, False)
    assert op.t == 2.0
    b.advance(None)
    assert b.t == 10.5
    b.advance(None)
    assert b.t == 10.5


@pytest.mark.slow
@pytest.mark.parametrize("policy", BUILTIN)
def test_claims_hold_under_the_thorough_profile(policy: str) -> None:
    [report] = check_policies([policy], profile="thorough", hypothesis_shrink=False)
    assert report.failures() == []


@pytest.mark.parametrize("control", CONTROLS)
def test_no_check_fires_on_a_correct_policy(control: str) -> None:
    # the negative controls (checkers/search/controls.py): correct policies doing legal but
    # unusual things -- placements that list one tier or reverse them, bypassing everything,
    # protecting blocks from the order. No claimed invariant is violated and there is no
    # finding; the run still rejects and evicts (it is not quiet by accident)
    [report] = check_policies([control], profile="dev", hypothesis_shrink=False)
    assert report.failures() == []
    cov = report.result.stats.coverage
    assert report.result.stats.examples > 0
    assert cov["rejections"] > 0
    # (bypassing everything, BypassAllLRU keeps nothing resident after an inference to evict)
    assert cov["evictions"] > 0 or control.endswith(":BypassAllLRU")
