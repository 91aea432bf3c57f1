"""The policy space and `kvmodel discover` (issue 17): candidates are data the engine runs,
the space holds the policies it is measured against, the search is deterministic, and the
safety gate drops what the checkers catch."""

from __future__ import annotations

import importlib
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

from checkers.discover import (
    SMALL_TEST,
    SMALL_TRAIN,
    Score,
    discover,
    gate,
    label,
    peak_resident,
)
from kvmodel.cli import main
from kvmodel.config import default_config
from kvmodel.io.observations import observation_to_json
from kvmodel.policy import (
    Reclaim,
    declared_bypass,
    declared_rank,
    declared_reclaim,
    resolve_policy,
)
from kvmodel.replay import replay
from kvmodel.workloads import AgenticParams, generate_agentic
from policies.space import GATE_CLAIMS, Candidate, candidates, neighbours

TRACE = generate_agentic(AgenticParams(seed=3, sessions=4, turns=2, p_spawn=0.3))
CONFIG = default_config(hbm_blocks=48, hbf_blocks=96)


def _log(policy: object) -> list[dict[str, object]]:
    return [observation_to_json(o) for o in replay(TRACE, policy, CONFIG).engine.log]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("point", "policy"),
    [(Candidate(), "kvtether"), (Candidate(placement="segments"), "tether-lachesis")],
)
def test_the_space_holds_the_policies_it_is_measured_against(point: Candidate, policy: str) -> None:
    log = _log(point.policy())
    assert sum(o["kind"] == "evict" for o in log) > 50  # under pressure, so the order matters
    assert log == _log(policy)


def test_every_candidate_is_data_and_resolves_by_path() -> None:
    every = list(candidates())
    assert len(every) == len({c.name for c in every}) == 864
    assert every[0] == Candidate()  # the smallest departure from KVTether first: none
    for c in every[::37]:
        p = resolve_policy(c.path)
        assert p.name == f"discovered:{c.name}"
        assert declared_rank(p) == c.rank()
        assert declared_reclaim(p) is c.reclaim
        assert declared_bypass(p) == c.bypasses()
        assert p.claims >= GATE_CLAIMS  # type: ignore[attr-defined]
        assert Candidate.parse(c.name) == c
        assert label(c.path) == c.name
        assert type(pickle.loads(pickle.dumps(p))) is type(p)
    assert {c.reclaim for c in every} == {Reclaim.DEAD, Reclaim.NONE}
    ring = neighbours(Candidate())
    assert Candidate() not in ring
    assert len(ring) == 5 + 2 + 1 + 1 + 1 + 1 + 2  # live orders, within, 4 flags, placements
    with pytest.raises(ValueError, match="not a candidate"):
        Candidate.parse("d-xyz")


def test_a_printed_candidate_is_the_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    for i, c in enumerate([Candidate(suspended="none", placement="segments"),
                           Candidate(recency="mru", bypass_temporary=False),
                           Candidate(placement="predictive", tier_first=True)]):  # fmt: skip
        (tmp_path / f"printed{i}.py").write_text(c.source(f"Printed candidate {i}."))
        mod = importlib.import_module(f"printed{i}")
        try:
            assert (mod.__doc__ or "").startswith(f"Printed candidate {i}.")
            assert _log(mod.Discovered()) == _log(c.policy())
            assert mod.Discovered.claims == c.claims()
        finally:
            sys.modules.pop(f"printed{i}", None)


def test_scores_and_the_frontier() -> None:
    a, b, c = Score(0.9, 1.1), Score(0.95, 1.2), Score(1.1, 0.8)
    assert a.dominates(b)
    assert not b.dominates(a)
    assert not a.dominates(c)
    assert not c.dominates(a)
    assert not a.dominates(a)
    assert (a.objective, c.objective) == (1.1, 1.1)


def test_cells_are_fractions_of_the_workload() -> None:
    [cell] = SMALL_TRAIN
    trace = cell.trace()
    peak = peak_resident(trace)
    cfg = cell.config(trace)
    assert peak > 100
    assert [t.blocks for t in cfg.tiers] == [round(0.15 * peak), round(0.3 * peak)]


def test_the_gate_drops_what_the_checkers_catch() -> None:
    # no eager reclaim: zombie KV, found by kvmodel check, with its counterexample
    lazy = gate(Candidate(reclaim=Reclaim.NONE), profile="dev")
    assert not lazy.passed
    assert lazy.reason.startswith("kvmodel check:")
    assert lazy.check["no-zombie-kv"].startswith("violated: ")
    assert "op counterexample" in lazy.check["no-zombie-kv"]
    # KVTether's own point: checked and proved
    ok = gate(Candidate(), profile="dev")
    assert ok.passed, ok.reason
    assert set(ok.check.values()) == {"holds"}
    assert ok.prove
    assert set(ok.prove.values()) == {"proved"}


def test_the_search_is_deterministic_and_never_reads_the_test_cells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import checkers.discover as disc

    calls: list[set[str]] = []
    real = disc.score_cells

    def recording(policies: Any, cells: Any, **kw: Any) -> Any:
        calls.append({c.name for c in cells})
        return real(policies, cells, **kw)

    monkeypatch.setattr(disc, "score_cells", recording)
    runs = [
        discover(seed=0, budget=3, gated=0, train=SMALL_TRAIN, test=SMALL_TEST).to_json()
        for _ in range(2)
    ]
    # every scoring but each run's last reads the training cells only; the last, the test cells
    test_names = {c.name for c in SMALL_TEST}
    train_names = {c.name for c in SMALL_TRAIN}
    ends = [i for i, c in enumerate(calls) if c == test_names]
    assert len(ends) == 2
    assert ends[-1] == len(calls) - 1
    assert all(c == train_names for i, c in enumerate(calls) if i not in ends)
    assert runs[0] == runs[1]
    d = runs[0]
    assert len(d["scores"]) == 3
    # one candidate per behaviour (spec L5.4): Temporary's place in the rank is not searched;
    # the candidates reached that differ only there are reported, merged with one scored
    assert all(Candidate.parse(n).behaviour.name == n for n in d["scores"])
    assert d["merged"]
    assert all(Candidate.parse(n).behaviour.name in d["scores"] for n in d["merged"])
    assert d["frontier"]
    assert set(d["frontier"]) <= set(d["scores"])
    assert d["best"] is None
    assert d["goal"] == {"met": False, "why": "no candidate passed the gate"}
    assert d["test"] == [c.name for c in SMALL_TEST]


def test_cli_discover_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--budget", "0"]) == 2
    assert main(["discover", "--budget", "865"]) == 2
    assert main(["discover", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "exclude each other" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_discover_writes_a_policy_that_check_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "d"
    assert main(["discover", "--cells", "small", "--budget", "4", "--gated", "1",
                 "--out", str(out), "--quiet"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "safety gate" in text
    assert "held-out test" in text
    report = json.loads((out / "discovery.json").read_text())
    assert report["best"] is not None
    monkeypatch.syspath_prepend(str(out))
    try:
        assert main(["check", "discovered:Discovered", "--profile", "dev", "--quiet"]) == 0
    finally:
        sys.modules.pop("discovered", None)


def test_the_shipped_discovered_policy_is_its_candidate_and_passes_the_gate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from policies.discovered import Discovered

    assert Discovered.name == "discovered"  # registered by that name
    c = Candidate.parse(Discovered.point)
    p = Discovered()
    assert (declared_rank(p), declared_reclaim(p), declared_bypass(p)) == (
        c.rank(), c.reclaim, c.bypasses()
    )  # fmt: skip
    assert Discovered.claims == c.claims()
    # the file is the generator's output for its own provenance text, not a hand edit
    mod = sys.modules[Discovered.__module__]
    assert mod.__file__ is not None
    assert Path(mod.__file__).read_text() == c.source(mod.__doc__ or "")
    assert "Provenance: search seed" in (sys.modules[Discovered.__module__].__doc__ or "")
    assert _log(p) == _log(c.policy())
    path = "policies.discovered:Discovered"
    assert main(["check", path, "--profile", "dev", "--quiet"]) == 0
    assert main(["prove", path, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "violated" not in out.split("invariants over the fragment")[1]


SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


@pytest.mark.skipif(
    not list(SHARED.glob("mini_swe_agent_gemini3pro/*.traj.json")),
    reason=f"no shared traces under {SHARED}",
)
def test_real_logs_are_cells_too() -> None:
    from checkers.discover import _measure, real_cells

    train, test = real_cells(SHARED)
    assert train
    assert test
    assert not {c.path for c in train} & {c.path for c in test}  # held out
    m = _measure("kvtether", train[0])
    assert 0 < m["token_hit_rate"] < 1
    assert m["cost_usd"] > 0


def test_cli_discover_needs_real_logs_where_it_is_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["discover", "--traces", str(tmp_path)]) == 2
    assert "expected mini_swe_agent_gemini3pro" in capsys.readouterr().err


def test_a_candidate_whose_check_crashed_in_part_does_not_pass_the_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 57: a search that crashed in part (a checker error) reports what it found, but its
    quiet table is no evidence: the safety gate drops the candidate and says why."""
    from checkers.search import driver

    def broken(*args: object, **kw: object) -> None:
        raise RuntimeError("a planted checker bug")

    monkeypatch.setattr(driver, "nondeterminism", broken)
    g = gate(Candidate(), profile="dev")
    assert not g.passed
    assert g.reason.startswith("kvmodel check crashed in part: the determinism check")
