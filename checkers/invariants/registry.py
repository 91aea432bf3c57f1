"""The invariant registry: every invariant's name and one line, in report order (formulas:
spec/invariants.md), the structural claims and the findings that are not invariants."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from kvmodel.errors import ConfigError
from kvmodel.policy import STRUCTURAL_CLAIMS

__all__ = [
    "FINDINGS",
    "INVARIANTS",
    "SITUATIONS",
    "STRUCTURAL",
    "invariant_names",
]

#: name -> one line; the order is the report order. Formulas: spec/invariants.md.
INVARIANTS: Mapping[str, str] = MappingProxyType(
    {
        "accounting": "per tier free + used = capacity; writes = alloc records",
        "chains": "every open context's chain is resident, indexed and linked",
        "legal-transitions": "every message state change follows the transition table",
        "no-eviction-in-flight": "no block of the inference being admitted is evicted",
        "pinned-never-evicted": "no Pinned block is evicted or reclaimed",
        "no-stale-hit": "kept and hit blocks match the prompt's own hash chain",
        "prefix-closed-residency": "every resident block's parent is resident",
        "no-zombie-kv": "no dead block is resident at a quiescent point",
        "no-live-eviction-before-dead-reclaim": "no live eviction while dead/expired KV remains",
        "state-priority-eviction": "evict Dead < Expired < Temporary < Suspended < Active",
        "suspended-mru": "within Suspended, the most recently suspended goes first",
        "reclaim-dead-only": "a policy's reclaim frees only dead blocks",
        "temporary-bypass": "Temporary KV is bypassed, never indexed, never hit",
        "free-at-boundary": "KV a closing op kills is freed by that op",
        "deterministic-placement": "segment classes pick the first tier (Lachesis)",
        "endurance-budget": "projected device-years of every worn tier >= the bound",
    }
)

#: Claimed by every policy: a violation here is a bug in the engine (or a refused decision).
STRUCTURAL = STRUCTURAL_CLAIMS

#: invariant -> (the coverage counter that counts the situations it constrains, what one is):
#: without one, the invariant was never put to the test, and a search or proof that it holds
#: says nothing (an eviction-order invariant needs an eviction it constrained -- evicting among
#: blocks of one class and one suspension time tests no order; no-zombie-kv needs a block that
#: died). The counters are :func:`checkers.search.coverage.run_coverage`'s; the search's
#: coverage warnings, ``kvmodel prove``'s rungs and ``--reach`` read this one table.
SITUATIONS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "no-eviction-in-flight": ("evictions", "an eviction"),
        "no-live-eviction-before-dead-reclaim": (
            "contested:no-live-eviction-before-dead-reclaim",
            "an eviction choosing between dead or expired KV and live KV",
        ),
        "state-priority-eviction": (
            "contested:state-priority-eviction",
            "an eviction choosing between blocks of two classes the priority orders",
        ),
        "suspended-mru": (
            "contested:suspended-mru",
            "an eviction choosing between Suspended blocks suspended at different times",
        ),
        "no-zombie-kv": ("died", "a block that died (became Dead)"),
        "temporary-bypass": ("temporaries", "a Temporary block written"),
        "endurance-budget": ("worn tiers", "a worn tier"),
        "reclaim-dead-only": ("reclaims", "a reclaim"),
    }
)

#: Findings about a run that are not invariants (spec/invariants.md §Pseudo-invariants): no
#: policy claims or disclaims them, every run records them, and each is always a failure.
FINDINGS: Mapping[str, str] = MappingProxyType(
    {
        "policy-protocol": "the engine refused a policy decision, or the policy's code raised",
        "engine-internal": "the engine under test crashed",
        "nondeterministic": "two replays of one trace gave different observation logs",
        "engine-contract": "on ample memory the engine disagrees with an independent computation "
        "of the contract (checkers.invariants.nversion)",
        "symbolic-model": "a state of the run leaves an axiom or inductive invariant of the "
        "parametric proofs (checkers.invariants.inductive): the symbolic model does not "
        "describe this engine",
    }
)


def invariant_names(
    names: str | Iterable[str] | None,
    *,
    among: Iterable[str] = INVARIANTS,
    default: Iterable[str] | None = None,
    scope: str | None = None,
) -> list[str]:
    """The invariants a user named -- comma-separated text (``--check``, ``--invariants``,
    ``--invariant``) or a list -- in their order, each one of ``among``; none named: ``default``
    (all of ``among`` when it is None). The one place names are validated: an unknown one is a
    :class:`~kvmodel.errors.ConfigError` (exit 2) that lists the known ones."""
    known = list(among)
    given = [n for n in names.split(",") if n] if isinstance(names, str) else list(names or ())
    if not given:
        return list(known if default is None else default)
    for n in given:
        if n not in known:
            where = f"invariant {n!r} is not in {scope}" if scope else f"unknown invariant {n!r}"
            raise ConfigError(f"{where}; known: {', '.join(known)}")
    return given
