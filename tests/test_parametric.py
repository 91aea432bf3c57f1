"""Parametric proofs (spec/invariants.md §Parametric proofs): what is proved for all sizes, that
nothing kvmodel check breaks is, that a proof that fails prints a counterexample to induction,
and that a run whose engine leaves the model's axioms says so (finding symbolic-model)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from checkers.invariants import Monitor
from checkers.invariants.inductive import INDUCTIVE, inductive_applies
from checkers.search.mutants import MUTANTS
from checkers.symbolic import parametric
from checkers.symbolic.parametric import PARAMETRIC_CLAIMS, SCOPE, prove_parametric
from kvmodel.cli import main
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, TierName
from kvmodel.io.trace import Op
from kvmodel.lifecycle import BlockClass
from kvmodel.memory import TierConfig
from kvmodel.policy import (
    RankTerm,
    Reclaim,
    claimed_invariants,
    registered_policies,
    resolve_policy,
)
from kvmodel.workloads.agentic import AgenticParams, generate_agentic
from policies.kvtether import KVTether
from policies.lru import LRU

ROOT = Path(__file__).parent.parent
D, E, T, S, A = (
    BlockClass.DEAD,
    BlockClass.EXPIRED,
    BlockClass.TEMPORARY,
    BlockClass.SUSPENDED,
    BlockClass.ACTIVE,
)

#: what each goal policy of issue 62 has proved for all sizes (every claim the model expresses)
GOAL: dict[str, set[str]] = {
    "kvtether": {
        "free-at-boundary",
        "no-eviction-in-flight",
        "no-live-eviction-before-dead-reclaim",
        "no-zombie-kv",
        "pinned-never-evicted",
        "reclaim-dead-only",
        "state-priority-eviction",
        "suspended-mru",
        "temporary-bypass",
    },
    "lru": {"no-eviction-in-flight", "pinned-never-evicted", "prefix-closed-residency"},
    "vllm-prefix": {"no-eviction-in-flight", "pinned-never-evicted", "prefix-closed-residency"},
}
GOAL["tether-lachesis"] = GOAL["kvtether"]
# (lachesis-det claims no class priority, no MRU and no bypass)
GOAL["lachesis-det"] = GOAL["kvtether"] - {
    "state-priority-eviction",
    "suspended-mru",
    "temporary-bypass",
}


@pytest.mark.parametrize("policy", sorted(GOAL))
def test_every_expressed_claim_of_the_goal_policies_is_proved_for_all_sizes(policy: str) -> None:
    answers = {a.invariant: a for a in prove_parametric(policy)}
    proved = {n for n, a in answers.items() if a.rung == "proved"}
    assert proved == GOAL[policy]
    # every claim the model expresses is proved, but prefix closure under a place that is code
    code_place = {"prefix-closed-residency"} if policy not in ("lru", "vllm-prefix") else set()
    expressed = claimed_invariants(resolve_policy(policy)) & set(PARAMETRIC_CLAIMS)
    assert proved == expressed - code_place
    for n, a in answers.items():
        if a.rung == "proved":
            assert a.scope == SCOPE
            assert a.situation
            assert a.queries >= 3
        elif n in code_place:
            assert a.rung == "unknown"
            # kvtether's place is BasePolicy's (its bypass declared, spec PP2): what stops the
            # proof is the bypass; the others' place is code
            why = "it bypasses blocks" if policy == "kvtether" else "its place is code"
            assert a.reason.startswith(why), a
        else:  # the rest are claims the model does not express, and say so
            assert a.rung == "unknown", (n, a)
            assert a.reason.startswith("not expressed"), (n, a)
            assert a.scope == "none"


def _violated_by_check() -> list[tuple[str, str]]:
    """(policy, invariant) pairs kvmodel check violates: its expected table (claimed or not)
    and the zoo (each mutant's planted bug)."""
    table = tomllib.loads((ROOT / "checkers/search/expected_verdicts.toml").read_text())
    out = [(p, inv) for p, v in table["policies"].items() for inv in v.get("violated", [])]
    return out + list(MUTANTS.items())


def test_nothing_kvmodel_check_violates_is_proved_for_all_sizes() -> None:
    """Every pair the search violates -- unclaimed ones too (lru's zombies), and every mutant's
    bug -- is never proved: 'not inductive' with a counterexample, or unknown."""
    pairs = [(p, inv) for p, inv in _violated_by_check() if inv in PARAMETRIC_CLAIMS]
    assert len(pairs) > 60  # the table and the zoo were read
    by_policy: dict[str, list[str]] = {}
    for p, inv in pairs:
        by_policy.setdefault(p, []).append(inv)
    rungs: dict[str, int] = {}
    for p, invs in by_policy.items():
        for a in prove_parametric(p, sorted(set(invs))):
            assert a.rung != "proved", (p, a.invariant)
            rungs[a.rung] = rungs.get(a.rung, 0) + 1
            if a.rung == "not inductive":
                assert a.cti is not None
    # the declarative ones are refuted, not only left unknown
    assert rungs.get("not inductive", 0) >= 20


_MRU = "suspended-mru"  # (a term before the suspension time breaks MRU order too)


class _Outside(KVTether):
    """A declarative KVTether variant as an outside author might write one (held-out style:
    each bug shows only with chains of several blocks, two tiers, shared blocks or many ops)."""

    name = "outside"
    claims: ClassVar[frozenset[str]] = KVTether.claims


class DeepestFirst(_Outside):
    """Evicts the deepest block first, then by class: wrong only with chains of 2+ blocks."""

    rank = (RankTerm("depth", descending=True), *KVTether.rank)


class LowTierFirst(_Outside):
    """Evicts from the lower tier first: wrong only with two tiers."""

    rank = (RankTerm("tier", descending=True), *KVTether.rank)


class SharedLast(_Outside):
    """Keeps blocks many contexts share: wrong only with forks or shared prefixes."""

    rank = (RankTerm("holders"), *KVTether.rank)


class OldestOpFirst(_Outside):
    """Within Suspended, the block touched by the oldest op goes first (not the latest
    suspension): wrong only when ops and suspensions interleave, over many ops."""

    rank = (
        RankTerm("state", order=(D, E, T, S, A)),
        RankTerm("last_op", only=frozenset({S})),
        RankTerm("last_access"),
    )


class ForgotReclaim(_Outside):
    """Claims no-zombie-kv and free-at-boundary but never set the reclaim rule."""

    reclaim = Reclaim.NONE


class ForgotBypass(_Outside):
    """Claims temporary-bypass but bypasses nothing."""

    bypasses: ClassVar[frozenset[BlockClass]] = frozenset()


@pytest.mark.parametrize(
    ("policy", "broken"),
    [
        (DeepestFirst, {"no-live-eviction-before-dead-reclaim", "state-priority-eviction", _MRU}),
        (LowTierFirst, {"no-live-eviction-before-dead-reclaim", "state-priority-eviction", _MRU}),
        (SharedLast, {"no-live-eviction-before-dead-reclaim", "state-priority-eviction", _MRU}),
        (OldestOpFirst, {"suspended-mru"}),
        (ForgotReclaim, {"no-zombie-kv", "free-at-boundary"}),
        (ForgotBypass, {"temporary-bypass"}),
    ],
)
def test_outside_authors_declarative_mistakes_are_never_proved(
    policy: type[_Outside], broken: set[str]
) -> None:
    answers = {a.invariant: a for a in prove_parametric(policy())}
    for inv in broken:
        a = answers[inv]
        assert a.rung == "not inductive", (inv, a)
        assert a.cti is not None
        assert a.cti["before"]["blocks"], a
    # what the mistake leaves alone is still proved (and a KVTether that bypasses nothing, its
    # place BasePolicy's, keeps its prefixes too: prefix closure is proved of it)
    untouched = GOAL["kvtether"] - broken
    if policy is ForgotBypass:
        untouched |= {"prefix-closed-residency"}
    assert {n for n, a in answers.items() if a.rung == "proved"} == untouched


def test_a_counterexample_to_induction_is_a_concrete_state_pair() -> None:
    """LRU keeps Dead KV: no-zombie-kv is not inductive, and the pair shows the end of an op
    leaving a Dead block resident in a quiescent state."""
    [a] = prove_parametric("lru", ["no-zombie-kv"])
    assert a.rung == "not inductive"
    assert a.cti is not None
    cti = a.cti
    assert cti["step"] == "end"
    assert cti["after"]["quiescent"] is True
    row = cti["after"]["blocks"][cti["at"]]
    assert row["resident"]
    assert row["class"] == "dead"
    assert "counterexample to induction: end(" in a.render()
    json.dumps(cti)  # data a user can keep


def test_a_situation_the_model_cannot_make_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """LRU never reclaims, so its reclaim-dead-only holds vacuously under its own declarations;
    it is proved only because a witness policy's declarations (KVTether's) make a reclaim in the
    model. Without witnesses it is unknown, never proved."""
    [a] = prove_parametric("lru", ["reclaim-dead-only"])
    assert a.rung == "proved"
    monkeypatch.setattr(parametric, "_WITNESS", ())
    [b] = prove_parametric("lru", ["reclaim-dead-only"])
    assert b.rung == "unknown"
    assert "cannot make a reclaim" in b.reason


def test_inductive_applies_exactly_where_the_proof_goes_through() -> None:
    """The Monitor checks an inductive invariant at run time where inductive_applies says so;
    that must be exactly where it is inductive, or the runtime check would cry wolf (or miss)."""
    names = [*registered_policies(), *(m for m, inv in MUTANTS.items() if inv in INDUCTIVE)]
    seen = 0
    for p in names:
        for a in prove_parametric(p, list(INDUCTIVE)):
            if a.reason.startswith("outside the model"):
                assert not inductive_applies(p, a.invariant)
                continue
            seen += 1
            assert inductive_applies(p, a.invariant) == (a.rung == "proved"), (p, a.invariant)
    assert seen >= 15


def test_unreadable_policies_are_unknown_with_the_reason() -> None:
    for p, why in [
        ("belady", "no declarative rank"),
        ("kvtether-offload", "moves KV"),
        ("checkers.search.mutants:IdleTimeoutReclaim", "reclaim rule is code"),
        ("checkers.search.outside_mutants:WriterMRU", "eviction order is code"),
    ]:
        for a in prove_parametric(p, ["no-zombie-kv", "suspended-mru"]):
            assert a.rung == "unknown", (p, a)
            assert why in a.reason, (p, a)


# ----------------------------------------------------------------------------- run time


def _config(blocks: int = 600) -> EngineConfig:
    """Under pressure: the traces below evict hundreds of blocks on it."""
    return EngineConfig(16, (TierConfig(TierName("hbm"), blocks),))


def _run(engine: Engine, ops: Sequence[Op]) -> Monitor:
    mon = Monitor(engine, ["no-zombie-kv", "temporary-bypass"])
    for op in ops:
        if not mon.apply(op):
            break
    return mon


def _ops(seed: int) -> list[Op]:
    return list(generate_agentic(AgenticParams(seed=seed, sessions=2)).ops)


class SkipsAReclaim(Engine):
    """Frees all but the first of the Dead blocks the declared rule names: the declared-reclaim
    axiom broken, so the no-zombie-kv inductive invariant fails at a quiescent state."""

    def _reclaims(self, op: Op) -> list[BlockId]:
        return super()._reclaims(op)[1:]


class DeadAsExpired(Engine):
    """Reports a block no context holds as Expired (L5.2 aggregation without its Dead case):
    the well-formedness axiom broken wherever such a block stays resident."""

    def __init__(self, config: EngineConfig, policy: object) -> None:
        super().__init__(config, policy)  # type: ignore[arg-type]
        residency = self.residency
        original = residency.block_class

        def block_class(b: object) -> BlockClass:
            cls = original(b)  # type: ignore[arg-type]
            return BlockClass.EXPIRED if cls is BlockClass.DEAD else cls

        residency.block_class = block_class  # type: ignore[method-assign]


def test_the_reference_engine_never_leaves_the_model() -> None:
    for seed in range(3):
        for pol in (KVTether(), LRU()):
            mon = _run(Engine(_config(), pol), _ops(seed))
            assert not [v for v in mon.violations if v.invariant == "symbolic-model"], seed


def test_an_engine_that_leaves_the_model_is_reported_loudly() -> None:
    found = []
    for seed in range(3):
        mon = _run(SkipsAReclaim(_config(), KVTether()), _ops(seed))
        found += [v for v in mon.violations if v.invariant == "symbolic-model"]
    assert found
    assert "no-zombie-kv inductive invariant" in found[0].message
    found = []
    for seed in range(3):  # (under LRU, which keeps the blocks no context holds)
        mon = _run(DeadAsExpired(_config(), LRU()), _ops(seed))
        found += [v for v in mon.violations if v.invariant == "symbolic-model"]
    assert found
    assert "well-formedness axiom" in found[0].message
    # a policy the model does not read is not judged by it: its proofs are all unknown
    mon = _run(Engine(_config(), resolve_policy("checkers.search.mutants:IdleTimeoutReclaim")), [])
    assert not mon._parametric


def test_structural_proofs_say_so() -> None:
    """A claim every readable policy has by the engine's rules is marked, as the fragment's are."""
    answers = {a.invariant: a for a in prove_parametric("lru")}
    assert answers["pinned-never-evicted"].structural is not None
    assert answers["no-eviction-in-flight"].structural is not None
    assert "structural:" in answers["pinned-never-evicted"].render()
    k = {a.invariant: a for a in prove_parametric("kvtether")}
    assert k["no-zombie-kv"].structural is None
    assert k["suspended-mru"].structural is None


def test_prove_cli_reports_every_size(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["prove", "kvtether", "--depth", "2", "--invariant", "no-zombie-kv", "--quiet"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [a] = out["parametric"]
    assert (a["invariant"], a["rung"], a["scope"]) == ("no-zombie-kv", "proved", SCOPE)
    assert "1-induction" in a["method"]
    assert a["rlimit_units"] > 0
    assert "well-formed" in out["axioms"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "for all sizes (the parametric model" in text
    assert "no-zombie-kv                           proved for all sizes" in text
    # a claim that is not inductive prints its counterexample to induction, and exits as the
    # fragment decides (not inductive is no violation)
    assert main(["prove", "lru", "--depth", "2", "--invariant", "no-zombie-kv", "--quiet"]) == 0
    assert "counterexample to induction: end(" in capsys.readouterr().out


def test_the_docs_table_is_what_prove_says() -> None:
    """docs/checking-a-policy.md's table of what each built-in has proved for all sizes."""
    text = (ROOT / "docs/checking-a-policy.md").read_text()
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `") and line.count("|") == 5:
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1:]
    assert set(rows) == set(registered_policies())
    for p, (proved, structural, why) in rows.items():
        ans = prove_parametric(p)
        want_proved = [a.invariant for a in ans if a.rung == "proved" and not a.structural]
        want_structural = [a.invariant for a in ans if a.rung == "proved" and a.structural]
        assert proved == (", ".join(want_proved) or "—"), p
        assert structural == (", ".join(want_structural) or "—"), p
        if why != "—":
            outside = [a for a in ans if a.reason.startswith("outside the model")]
            assert all(why in a.reason for a in outside), p


def test_a_proof_the_engine_does_not_bear_out_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every proof is checked against the executable model (issue 62 item 3): on an engine
    that skips a reclaim, kvtether's proofs are unknown, saying which rule the run left."""
    import kvmodel.engine

    [a] = prove_parametric("kvtether", ["no-zombie-kv"])
    assert a.rung == "proved"
    assert a.cross_checked > 500
    monkeypatch.setattr(parametric, "_CROSS_CHECKED", {})
    monkeypatch.setattr(kvmodel.engine, "Engine", SkipsAReclaim)
    [b] = prove_parametric("kvtether", ["no-zombie-kv"])
    assert b.rung == "unknown"
    assert "leaves the parametric model's rules" in b.reason
    assert "no-zombie-kv inductive invariant" in b.reason


def test_prove_cli_lists_what_the_model_does_not_express_on_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["prove", "lru", "--depth", "1", "--invariant", "accounting", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "not expressed by the parametric model (--json says why" in text
    assert "accounting" in text.split("not expressed by the parametric model")[1]
    assert "free and used counts" not in text  # the reason is in --json, not on every line


class DepthAscLRU(LRU):
    """LRU with its depth term turned around (the shallowest block of a tie first): an outside
    author's slip that orphans a child whenever a chain's blocks were used together."""

    name = "depth-asc-lru"
    rank = (RankTerm("last_access"), RankTerm("depth"))


def test_prefix_closure_is_proved_only_where_the_rank_and_the_place_keep_it() -> None:
    [a] = prove_parametric(LRU(), ["prefix-closed-residency"])
    assert a.rung == "proved"
    assert a.cross_checked > 500
    [b] = prove_parametric(DepthAscLRU(), ["prefix-closed-residency"])
    assert b.rung == "not inductive"
    assert b.cti is not None
    assert b.cti["step"] == "evict"
    [c] = prove_parametric("kvtether", ["prefix-closed-residency"])
    assert c.rung == "unknown"
    assert "bypasses blocks" in c.reason  # (its place is BasePolicy's: spec PP2)
    [d] = prove_parametric("tether-lachesis", ["prefix-closed-residency"])
    assert d.rung == "unknown"
    assert "place is code" in d.reason
