"""What a fragment proof may promise (spec invariants.md §Proofs): an eviction order the fragment
cannot show is unknown, never proved, and the proof manifest never contradicts kvmodel check's
verdicts. (A file of its own, so that pytest-xdist's --dist loadfile can put it beside
test_bmc.py, the suite's longest file, rather than in it.)"""

from __future__ import annotations

import tomllib
from pathlib import Path

from checkers.search.mutants import MUTANTS
from checkers.symbolic import bmc
from checkers.symbolic.bmc import prove
from checkers.symbolic.fragment import FRAGMENT_INVARIANTS, Fragment
from kvmodel.lifecycle import BlockClass

ROOT = Path(__file__).parent.parent
MANIFEST = tomllib.loads((ROOT / "checkers/symbolic/expected_proofs.toml").read_text())
F = Fragment()


def test_an_order_the_fragment_cannot_show_is_unknown_never_proved() -> None:
    """lachesis-det ranks Suspended blocks after Active ones. The fragment never makes an Active
    block evictable (its one edit replaces the only message), so state-priority-eviction holds
    there by construction: the symbolic rungs alone say proved, and kvmodel check violates it."""
    from checkers.symbolic.z3rank import order_breaks
    from checkers.symbolic.z3util import RLIMIT
    from kvmodel.policy import declared_rank, resolve_policy

    inv = ["state-priority-eviction"]
    [raw] = bmc._prove_symbolic("lachesis-det", F, inv, 4, 3, 600.0, RLIMIT)
    assert raw.rung == "proved"
    # (the executable corroboration to depth 3 only: the scope, not the search, is under test)
    [a] = prove("lachesis-det", inv, depth=4, cross_depth=3)
    assert a.rung == "unknown"
    assert "evicting active before suspended" in a.reason
    rank = declared_rank(resolve_policy("lachesis-det"))
    assert rank is not None
    assert order_breaks(rank, "class-priority") == [(BlockClass.ACTIVE, BlockClass.SUSPENDED)]
    # a rank that keeps the order for all feature values keeps its proof, where the fragment
    # is seen to contest the order (its executable search to depth 5; to depth 3 it is not,
    # and the proof would be vacuous: unknown, spec invariants.md "No vacuous proofs")
    [k] = prove("kvtether", inv, depth=4, cross_depth=5)
    assert (k.rung, k.depth) == ("proved", 1)
    [shallow] = prove("kvtether", inv, depth=4, cross_depth=3)
    assert shallow.rung == "unknown"
    assert shallow.reason.startswith("the fragment cannot make an eviction choosing")


def test_no_rung_above_violated_contradicts_what_kvmodel_check_found() -> None:
    """The two manifests agree: no policy or mutant is proved (or bounded) in the fragment for an
    invariant kvmodel check violates. If this fails, prove prints a promise the policy breaks:
    grow the fragment to reach the bug, or make prove say unknown with the reason."""
    verdicts = tomllib.loads((ROOT / "checkers/search/expected_verdicts.toml").read_text())[
        "policies"
    ]
    violated = [(p, inv) for p, v in verdicts.items() for inv in v.get("violated", [])]
    violated += list(MUTANTS.items())
    bad = [
        (p, inv, MANIFEST[p][inv])
        for p, inv in violated
        if inv in FRAGMENT_INVARIANTS and MANIFEST[p][inv].split(":")[0] in ("proved", "bounded")
    ]
    assert bad == []
    assert len(violated) > 50  # the table and the zoo were read
