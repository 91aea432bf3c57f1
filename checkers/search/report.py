"""``kvmodel check``: search every (policy, invariant), write counterexample bundles, report.

The verdict of a (policy, invariant) pair is ``holds`` (no counterexample within the search
budget -- a search result, not a proof), or ``violated`` with the length of the shortest trace
found. ``claimed`` says whether the policy claims the invariant: a violated claim is a failure, a
violated non-claim is a *finding* (LRU leaves zombie KV: that is the point of the table).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import attrs

from checkers.invariants import FINDINGS, INVARIANTS, STRUCTURAL
from checkers.search.bundle import write_bundle
from checkers.search.driver import CONTRACT_TRACES, PROFILES, WALKS, SearchResult, search
from checkers.search.scope import DEFAULT_SCOPE, WalkScope
from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError
from kvmodel.policy import claimed_invariants, resolve_policy
from kvmodel.studies.sweep import executor

__all__ = [
    "EXPECTED_VERDICTS",
    "PolicyReport",
    "check_policies",
    "expected_verdicts",
    "render_table",
]

EXPECTED_VERDICTS = Path(__file__).with_name("expected_verdicts.toml")


@attrs.frozen
class PolicyReport:
    """One policy's row of ``kvmodel check``: its claims, the search's result (what was
    violated, by how long a trace, what the runs covered) and the bundle written for each
    counterexample."""

    policy: str
    claims: frozenset[str]
    result: SearchResult
    bundles: Mapping[str, Path]

    def verdict(self, invariant: str) -> str:
        """``violated`` (the search found a counterexample: see ``result.found``) or
        ``holds`` (none was found in what the search covered)."""
        return "violated" if invariant in self.result.found else "holds"

    def failures(self) -> list[str]:
        """Claimed invariants that were violated, and findings (a refused decision, an
        exception, a crash, nondeterminism: always failures)."""
        return sorted(set(self.result.found) & (self.claims | set(FINDINGS)))

    def checker_errors(self) -> tuple[str, ...]:
        """The checker's own crashes during this policy's search (its findings still stand)."""
        return self.result.checker_errors

    def to_json(self) -> dict[str, Any]:
        inv: dict[str, Any] = {}
        for name in self.result.invariants:
            c = self.result.found.get(name)
            inv[name] = {
                "verdict": "violated" if c else "holds",
                "claimed": name in self.claims,
                "length": len(c.ops) if c else None,
                "hypothesis_length": c.hypothesis_ops if c else None,
                "one_minimal": c.one_minimal if c else None,
                "value_minimal": c.value_minimal if c else None,
                "violation": c.violation.message if c else None,
                "bundle": str(self.bundles[name]) if name in self.bundles else None,
            }
        findings: dict[str, Any] = {}
        for name in FINDINGS:
            c = self.result.found.get(name)
            findings[name] = {
                "verdict": "found" if c else "none",
                "length": len(c.ops) if c else None,
                "violation": c.violation.message if c else None,
                "bundle": str(self.bundles[name]) if name in self.bundles else None,
            }
        st = self.result.stats
        return {
            "policy": self.policy,
            "invariants": inv,
            "findings": findings,
            "checker_errors": list(self.result.checker_errors),
            "stats": {
                "examples": st.examples,
                "steps": st.steps,
                "walks": st.walks,
                "contract_traces": st.contract_traces,
                "rules": dict(sorted(st.rules.items())),
                "never_fired": st.never_fired(),
                "coverage": dict(sorted(st.coverage.items())),
                "unexercised": st.unexercised(self.result.invariants),
            },
        }


def check_policies(
    policies: Sequence[str],
    invariants: Iterable[str] | None = None,
    *,
    profile: str = "ci",
    max_examples: int | None = None,
    steps: int | None = None,
    seed: int = 0,
    out: Path | None = None,
    config: EngineConfig | None = None,
    hypothesis_shrink: bool = True,
    walks: int | None = None,
    budget: float | None = None,
    jobs: int = 1,
    scheduler: str | None = None,
    done: Callable[[str], None] | None = None,
    walk_scope: WalkScope = DEFAULT_SCOPE,
) -> list[PolicyReport]:
    """Search each policy (see :func:`checkers.search.driver.search`). ``config=None`` is a swarm
    search; ``walks`` defaults to the profile's; ``budget`` (seconds per policy, counted from
    its search's start, shrinking not included) lets the random walks go on until it is spent;
    ``walk_scope`` bounds each random walk (its length, its engine's tiers).
    Several policies with ``jobs`` > 1 or a ``scheduler``: one search per task, on ``jobs`` local
    processes or the Dask scheduler's workers; one policy: its random walks, ``jobs`` chunks at a
    time. Either way every report is the serial run's (a search is a deterministic function of
    its arguments; only ``found_after``, a time, differs). ``done(policy)`` is called as each
    policy's search finishes (progress)."""
    examples, n_steps = PROFILES[profile]
    names = tuple(invariants) if invariants is not None else tuple(INVARIANTS)
    seen: dict[str, str] = {}
    for p in policies:  # rows, bundles and the exit status are keyed by the policy's name
        name = resolve_policy(p).name
        if name in seen and seen[name] != p:
            raise ConfigError(
                f"policies {seen[name]!r} and {p!r} are both named {name!r}: their verdicts "
                "would share one row; rename one (its class's `name`)"
            )
        seen[name] = p
    settings = _Settings(
        names,
        config,
        max_examples or examples,
        steps or n_steps,
        seed,
        hypothesis_shrink,
        WALKS[profile] if walks is None else walks,
        budget,
        CONTRACT_TRACES[profile],
        walk_scope,
    )
    results: Iterable[tuple[frozenset[str], SearchResult]]
    if len(policies) > 1 and (jobs > 1 or scheduler is not None):
        # one search per task, each serial within (its walks too): a search is a deterministic
        # function of its arguments, so every result is the one a serial run gives, whatever
        # ran where; results are taken in policy order, bundles written here
        with executor(jobs, scheduler) as pool:
            futures = [pool.submit(_search_one, p, settings, 1, None) for p in policies]
            if done is not None:
                for fut in as_completed(futures):
                    done(policies[futures.index(fut)])
            results = [fut.result() for fut in futures]
        notify = None
    else:
        results = (_search_one(p, settings, jobs, scheduler) for p in policies)
        notify = done
    reports = []
    for p, (claims, r) in zip(policies, results, strict=True):
        bundles: dict[str, Path] = {}
        if out is not None:
            for inv, c in r.found.items():
                d = out / p.replace(":", "_").replace("/", "_") / inv
                bundles[inv] = write_bundle(
                    d,
                    c.ops,
                    p,
                    c.config,
                    inv,
                    c.violation,
                    one_minimal=c.one_minimal,
                    value_minimal=c.value_minimal,
                )
        reports.append(PolicyReport(p, claims, r, bundles))
        if notify is not None:
            notify(p)
    return reports


@attrs.frozen
class _Settings:
    """What every policy's search in one check shares."""

    invariants: tuple[str, ...]
    config: EngineConfig | None
    max_examples: int
    steps: int
    seed: int
    hypothesis_shrink: bool
    walks: int
    budget: float | None
    contract_traces: int
    walk_scope: WalkScope


def _search_one(
    policy: str, s: _Settings, jobs: int, scheduler: str | None
) -> tuple[frozenset[str], SearchResult]:
    """One policy's claims and search (a task of its own when policies run in parallel)."""
    # structural invariants are claimed by every policy: they are the engine's own
    claims = claimed_invariants(resolve_policy(policy)) | STRUCTURAL
    r = search(
        policy,
        s.invariants,
        config=s.config,
        max_examples=s.max_examples,
        steps=s.steps,
        seed=s.seed,
        # Hypothesis's targeted shrinking for what fails the check (claims, findings);
        # delta debugging alone for the rest (they are 1-minimal all the same)
        hypothesis_shrink=(claims | set(FINDINGS)) if s.hypothesis_shrink else False,
        walks=s.walks,
        walk_seconds=s.budget,
        jobs=jobs,
        contract_traces=s.contract_traces,
        scheduler=scheduler,
        walk_scope=s.walk_scope,
    )
    return claims, r


def render_table(reports: Sequence[PolicyReport]) -> str:
    """policy x invariant: ``ok`` holds (claimed), ``·`` holds (not claimed), ``Vn`` violated
    with an n-op counterexample (``!`` marks a violated claim)."""
    names = [*(reports[0].result.invariants if reports else ()), *FINDINGS]
    short = {n: f"I{i + 1}" for i, n in enumerate(names) if n not in FINDINGS}
    short |= {n: f"F{i + 1}" for i, n in enumerate(FINDINGS)}
    w = max([len(r.policy) for r in reports] + [6]) + 1
    lines = ["".join([f"{'policy':<{w}}", *(f"{short[n]:>6}" for n in names)])]
    for r in reports:
        cells = []
        for n in names:
            c = r.result.found.get(n)
            claimed = n in r.claims or n in FINDINGS
            if c is None:
                cells.append("ok" if claimed else "·")
            else:
                cells.append(f"{'!' if claimed else ''}V{len(c.ops)}")
        lines.append("".join([f"{r.policy:<{w}}", *(f"{c:>6}" for c in cells)]))
    lines.append("")
    lines += [f"  {short[n]:>4}  {n}" for n in names]
    lines.append(
        "  ok = holds (claimed), · = holds (not claimed), Vn = violated by an n-op "
        "trace, !Vn = a claimed invariant violated; F columns are findings that every "
        "policy must avoid"
    )
    return "\n".join(lines)


def expected_verdicts(path: Path = EXPECTED_VERDICTS) -> dict[str, dict[str, str]]:
    """policy (name or import path) -> invariant -> "holds" | "violated" (the data the tests
    drive the checker to): the built-in policies from ``path``, every mutant from
    :data:`checkers.search.mutants.MUTANTS` (violated: the invariant it breaks)."""
    from checkers.search.mutants import MUTANTS

    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out: dict[str, dict[str, str]] = {}
    for name, v in data.get("policies", {}).items():
        table = out.setdefault(name, {})
        for inv in v.get("holds", []):
            table[inv] = "holds"
        for inv in v.get("violated", []):
            table[inv] = "violated"
    for mutant, inv in MUTANTS.items():
        out.setdefault(mutant, {})[inv] = "violated"
    return out
