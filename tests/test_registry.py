"""Every place that names an invariant names one the registry (checkers/invariants/registry.py
INVARIANTS) defines, and the registry is the spec's list (spec/invariants.md): a renamed or
added invariant cannot drift between the spec, the monitor, the proofs, the search and the zoo."""

from __future__ import annotations

import re
from pathlib import Path

from checkers.invariants import FINDINGS, INVARIANTS, STRUCTURAL
from checkers.search.coverage import TRIGGERS
from checkers.search.mutants import MUTANTS
from checkers.symbolic.bmc import STRUCTURAL_IN_FRAGMENT
from checkers.symbolic.fragment import FRAGMENT_INVARIANTS
from checkers.symbolic.z3rank import PROPERTY_OF_CLAIM
from kvmodel.policy import claimed_invariants, registered_policies, resolve_policy

SPEC = (Path(__file__).parent.parent / "spec" / "invariants.md").read_text(encoding="utf-8")


def test_the_registry_is_the_spec_tables_in_order() -> None:
    in_tables = re.findall(r"^\| \*\*([a-z-]+)\*\* \|", SPEC, flags=re.M)
    # the spec groups them (structural, lifecycle, placement); the registry is the same set
    assert sorted(in_tables) == sorted(INVARIANTS)
    assert len(in_tables) == len(set(in_tables))


def test_findings_are_named_in_the_spec_and_are_not_invariants() -> None:
    section = SPEC.split("## Pseudo-invariants of a run (findings)")[1].split("\n## ")[0]
    for name in FINDINGS:
        assert f"**{name}**" in section, name
    assert not set(FINDINGS) & set(INVARIANTS)


def test_every_other_list_names_registry_invariants() -> None:
    names = set(INVARIANTS)
    assert set(FRAGMENT_INVARIANTS) <= names
    assert set(STRUCTURAL_IN_FRAGMENT) <= set(FRAGMENT_INVARIANTS)
    assert set(PROPERTY_OF_CLAIM) <= names
    assert set(TRIGGERS) <= names
    assert set(STRUCTURAL) <= names
    assert set(MUTANTS.values()) <= names | set(FINDINGS)
    for p in registered_policies():
        assert set(claimed_invariants(resolve_policy(p))) <= names, p


def test_every_fragment_invariant_has_one_definition_or_is_printed_structural() -> None:
    # the BMC step reads the eviction-order invariants from ORDER and the per-block ones from
    # BLOCK, the same predicates the Monitor evaluates; what is in neither is structural there
    from checkers.invariants import BLOCK, ORDER
    from checkers.symbolic.reach import REACH_INVARIANTS

    assert set(ORDER) | set(BLOCK) <= set(INVARIANTS)
    assert not set(ORDER) & set(BLOCK)
    for name in FRAGMENT_INVARIANTS:
        assert name in ORDER or name in BLOCK or name in STRUCTURAL_IN_FRAGMENT, name
    assert set(REACH_INVARIANTS) == set(INVARIANTS) - {"endurance-budget"}
