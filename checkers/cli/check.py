"""``kvmodel check`` (search every policy x invariant for counterexamples) and ``replay
--check`` (one trace replayed under the monitor), the checkers' part of the command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from checkers.invariants.contract import ContractCoverage, contract_violation
from checkers.invariants.registry import FINDINGS, invariant_names
from checkers.invariants.replay import check_ops, nondeterminism
from checkers.invariants.structural import Violation
from checkers.search.coverage import SearchStats, count_records
from checkers.search.scope import (
    CROWD,
    CROWD_EVERY,
    MAX_CROWD,
    TIER_BLOCKS,
    WALK_OPS,
    WIDE_EVERY,
    WIDE_TIER_BLOCKS,
    WalkScope,
)
from kvmodel.cli.common import (
    Subparsers,
    atomic_writer,
    engine_config,
    int_at_least,
    output_dir,
)
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import ConfigError
from kvmodel.io.observations import Observation, observation_line
from kvmodel.io.trace import Trace
from kvmodel.policy import registered_policies, resolve_policy
from kvmodel.progress import bar, wanted
from kvmodel.studies.sweep import local_cluster

if TYPE_CHECKING:
    from checkers.search.report import PolicyReport

__all__ = ["CHECKER_ERROR", "add_check"]

#: ``kvmodel check``'s exit status when the checker itself crashed in part (its findings are
#: still reported): neither a pass (0) nor a policy's failure alone (1), nor bad input (2)
CHECKER_ERROR = 3


def _cmd_check(args: argparse.Namespace) -> int:
    """Search for counterexamples; print the policy x invariant table; write bundles."""
    from checkers.search.report import check_policies, render_table  # Hypothesis: lazily

    names = invariant_names(args.invariants)
    policies = [args.policy] if args.policy else list(registered_policies())
    for p in policies:
        resolve_policy(p)  # fail fast on a bad name (exit 2)
    profile = args.profile or ("ci" if args.policy else "dev")
    shrinker = args.shrink or ("hypothesis" if args.policy else "dd")
    out = output_dir(args.out) if args.out else None
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1 (got {args.jobs})")
    if args.workers and args.scheduler:
        raise ConfigError("give --workers (a local Dask cluster) or --scheduler, not both")
    if args.tier_blocks is not None and args.config:
        raise ConfigError(
            "give --tier-blocks (the walks draw their engines' tiers up to it) or --config "
            "(one engine for every example and walk), not both"
        )
    scope = WalkScope(args.walk_ops, args.tier_blocks or WIDE_TIER_BLOCKS, args.crowd)
    with (
        local_cluster(args.workers) as address,
        bar(len(policies), "check", on=wanted(args.quiet)) as done,
    ):
        reports = check_policies(
            policies,
            names,
            profile=profile,
            max_examples=args.max_examples,
            steps=args.steps,
            seed=args.seed,
            out=out,
            config=engine_config(args.config) if args.config else None,
            hypothesis_shrink=shrinker == "hypothesis",
            walks=args.walks,
            budget=_seconds(args.budget) if args.budget else None,
            walk_scope=scope,
            jobs=max(args.jobs, args.workers or 1),
            scheduler=args.scheduler or address,
            done=done,
        )
    failures = {r.policy: r.failures() for r in reports if r.failures()}
    # the checker's own crashes: its findings above still stand, but no verdict is a pass
    crashed = {r.policy: list(r.checker_errors()) for r in reports if r.checker_errors()}
    status = CHECKER_ERROR if crashed else 1 if failures else 0
    if args.json:
        print(
            json.dumps(
                {
                    "profile": profile,
                    "seed": args.seed,
                    "walk_ops": scope.ops,
                    # the walks' tiers: up to narrow_tier_blocks, and up to tier_blocks in
                    # one walk in wide_every (None with --config: one engine for all)
                    "tier_blocks": None if args.config else scope.tier_blocks,
                    "narrow_tier_blocks": None if args.config else scope.tier_cap(0),
                    "wide_every": None if args.config else WIDE_EVERY,
                    # background agents in flight in one walk in crowd_every (0: none)
                    "crowd": scope.crowd,
                    "crowd_every": CROWD_EVERY,
                    "shrink": shrinker,
                    "reports": [r.to_json() for r in reports],
                    "failures": failures,
                    "checker_errors": crashed,
                },
                indent=2,
            )
        )
        return status
    print(render_table(reports))
    print()
    for r in reports:
        if args.verbose:
            _policy_details(r, scope.describe(tiers=not args.config))
        else:
            print(_policy_line(r))
    if not args.verbose and reports:
        print(
            "\n(-v for each policy's search: examples, rules fired, ops applied, coverage and "
            "warnings, each counterexample's length and bundle; --json for all of it)"
        )
    if failures:
        print(f"\nFAILED: claimed invariants violated or findings: {failures}")
    if crashed:
        print(f"\nCHECKER ERROR: the search crashed in part, so no verdict is a pass: {crashed}")
    return status


def _policy_line(r: PolicyReport) -> str:
    """One line per policy: what was violated, how many coverage warnings, where the bundles
    are. A checker crash is never folded away."""
    found = r.result.found
    claimed = sorted(set(found) & r.claims)
    fails = sorted(set(found) & set(FINDINGS))
    other = sorted(set(found) - r.claims - set(FINDINGS))
    warnings = len(r.result.stats.unexercised(r.result.invariants))
    parts = [
        f"{len(claimed)} claim{'s' if len(claimed) != 1 else ''} violated"
        + (f" ({', '.join(claimed)})" if claimed else ""),
        f"{len(fails)} finding{'s' if len(fails) != 1 else ''}"
        + (f" ({', '.join(fails)})" if fails else ""),
        f"{len(other)} unclaimed invariant{'s' if len(other) != 1 else ''} violated",
        f"{warnings} coverage warning{'s' if warnings != 1 else ''}",
    ]
    line = f"{r.policy}: {'; '.join(parts)}"
    if r.bundles:
        line += f"; bundles in {Path(next(iter(r.bundles.values()))).parent}"
    for err in r.checker_errors():
        line += f"\n  CHECKER ERROR (a bug in kvmodel; the findings here still stand): {err}"
    return line


def _policy_details(r: PolicyReport, scope: str) -> None:
    """``-v``: a policy's whole search, counterexample by counterexample."""
    st = r.result.stats
    never = ", ".join(st.never_fired()) or "none"
    print(
        f"{r.policy}: {st.examples} examples, {st.steps} steps, {st.walks} random walks "
        f"({scope}), {st.contract_traces} contract traces; never fired: {never}"
    )
    fired = ", ".join(f"{k} {n}" for k, n in sorted(st.rules.items()) if n)
    print(f"  rules fired: {fired}")
    print(f"  ops applied: {', '.join(f'{k} {n}' for k, n in sorted(st.ops.items()) if n)}")
    print(f"  {st.coverage_line()}")
    for warning in st.unexercised(r.result.invariants):
        print(f"  warning: {warning}")
    for err in r.checker_errors():
        print(f"  CHECKER ERROR (a bug in kvmodel; the findings here still stand): {err}")
    for inv, c in sorted(r.result.found.items()):
        where = f" -> {r.bundles[inv]}" if inv in r.bundles else ""
        tag = (
            "CLAIM VIOLATED"
            if inv in r.claims
            else "FAILED"
            if inv in r.failures()
            else "violated, not claimed"
        )
        shrunk = {"machine": f"Hypothesis {c.hypothesis_ops}", "walk": "random walk"}.get(
            c.found_by, f"engine self-check, from {c.hypothesis_ops}"
        )
        print(
            f"  {tag}: {inv}: {len(c.ops)} ops ({shrunk}, "
            f"{'1-minimal' if c.one_minimal else 'not proven 1-minimal'}"
            f"{', value-minimal' if c.value_minimal else ''}; "
            f"{_engine_brief(c.config)}){where}"
        )


def _seconds(text: str) -> float:
    """``60``, ``60s``, ``2m`` or ``1h`` as seconds."""
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}
    t = text.strip().lower()
    unit = scale.get(t[-1:])
    try:
        value = float(t[:-1] if unit is not None else t) * (unit or 1.0)
    except ValueError:
        raise ConfigError(f"--budget: expected seconds like 60s, 2m or 1h, got {text!r}") from None
    if value <= 0:
        raise ConfigError(f"--budget: must be positive, got {text!r}")
    return value


def _engine_brief(cfg: EngineConfig) -> str:
    tiers = " + ".join(f"{t.name} {t.blocks}" for t in cfg.tiers)
    return f"engine: {tiers} blocks of {cfg.block_size} tokens"


def _replay_checked(args: argparse.Namespace, trace: Trace, config: EngineConfig) -> int:
    """``replay --check``: replay with the invariant monitor, then twice more to compare the
    logs (a ``nondeterministic`` finding when they differ), and the policy's engine against the
    contract on ample memory (``engine-contract``); exit 1 on any violation or finding."""
    names = invariant_names(args.check)
    ops = trace.ops
    skip = set(args.skip)
    # progress (a terminal only): every op of the monitored replay, of the nondeterministic
    # check's replays and of the two self-checks on ample memory (those not skipped)
    runs = 3
    passes = 1 + (runs if "nondeterminism" not in skip else 0)
    passes += 2 if "ample-contract" not in skip else 0
    cpu: dict[str, float | None] = dict.fromkeys(("monitor", *OPTIONAL_PASSES))
    counted: Counter[str] = Counter()
    with contextlib.ExitStack() as stack:
        # the monitored run's records, op by op: counted for the coverage line and written to
        # --observations as they come, then forgotten (a long trace's log is not held)
        out = (
            stack.enter_context(atomic_writer(Path(args.observations)))
            if args.observations
            else None
        )
        done = stack.enter_context(bar(len(ops) * passes, "replay --check", on=wanted(args.quiet)))
        first_tier = config.tiers[0].name

        def records(recs: Sequence[Observation]) -> None:
            count_records(counted, first_tier, recs)
            if out is not None:
                out.write("".join(observation_line(o) for o in recs))

        start = time.process_time()
        run = check_ops(
            ops, args.policy, config, names, tick=lambda: done("monitor"), stream=records
        )
        cpu["monitor"] = time.process_time() - start
        if run.trace_error is not None:
            line = trace.line_of(run.applied)
            raise run.trace_error.located(file=trace.source, line=line, op=None)
        found = list(run.violations)
        if "nondeterminism" not in skip:
            start = time.process_time()
            odd = nondeterminism(
                ops, args.policy, config, runs=runs, tick=lambda: done("nondeterministic")
            )
            cpu["nondeterminism"] = time.process_time() - start
            if odd is not None:
                found.append(odd)
        engine_class = getattr(resolve_policy(args.policy), "engine_class", Engine)
        ample: dict[str, ContractCoverage] = {}
        if "ample-contract" not in skip:
            start = time.process_time()
            off = contract_violation(
                ops,
                engine_class,
                block_size=config.block_size,
                coverage=ample,
                tick=lambda name: done(f"engine-contract under {name} on ample memory"),
            )
            cpu["ample-contract"] = time.process_time() - start
            if off is not None:
                found.append(off)
    first: dict[str, Violation] = {}
    for v in found:
        first.setdefault(v.invariant, v)
    held = [n for n in names if n not in first]
    # what the monitored replay exercised, as a search reports it: a quiet check is not a clean
    # one, and an invariant whose trigger never happened held vacuously
    seen = SearchStats()
    seen.count_ops(ops[: run.applied])
    seen.observe(run.engine, ops[: run.applied], records=counted)
    idle = seen.unexercised(held)
    if args.json:
        print(
            json.dumps(
                {
                    "policy": args.policy,
                    "checked": names,
                    "ops": run.applied,
                    "violations": [attrs.asdict(v) for v in first.values()],
                    "never_exercised": idle,
                    "engine_contract": {
                        "followed": {"ops": run.applied, "whole_state": run.compared_whole},
                        "ample": {
                            n: {"ops": c.ops, "whole_state": c.whole, "widest": c.widest}
                            for n, c in ample.items()
                        },
                    },
                    "passes": {
                        n: {"skipped": True, "would_find": OPTIONAL_PASSES[n]}
                        if t is None
                        else {"cpu_seconds": round(t, 3)}
                        for n, t in cpu.items()
                    },
                },
                indent=2,
            )
        )
    else:
        for v in found:
            if first.get(v.invariant) is v:
                print(f"VIOLATED {v.invariant} at op {v.op}: {v.message}")
        print(
            f"{len(first)} violated, {len(held)} held over {run.applied} ops: "
            f"{', '.join(held) or '-'}"
        )
        print(seen.coverage_line())
        for warning in idle:
            print(f"warning: {warning}")
        # what the self-checks compared (every op's inference figures and message states; the
        # whole state on contract.whole_state_due's schedule): a quiet check is not a clean one
        print("engine-contract compared every op's figures and message states; the whole state:")
        print(f"  following the engine: after {run.compared_whole} of {run.applied} ops")
        for n, c in ample.items():
            print(f"  on ample memory under {n}: {c}")
        if "ample-contract" in skip:
            print("  on ample memory: skipped (--skip ample-contract)")
        for n in OPTIONAL_PASSES:
            if cpu[n] is None:
                print(f"warning: pass {n} skipped (--skip): not looked for: {OPTIONAL_PASSES[n]}")
        spent = ", ".join(f"{n} {t:.1f}" for n, t in cpu.items() if t is not None)
        print(f"passes (CPU s): {spent}")
    return 1 if first else 0


def add_check(sub: Subparsers) -> None:
    ck = sub.add_parser("check", help="search for counterexamples to the invariants")
    ck.add_argument("policy", nargs="?", help="policy name or path (default: every built-in)")
    ck.add_argument("--invariants", help="comma-separated invariant names (default: all)")
    ck.add_argument(
        "--profile",
        choices=["dev", "ci", "thorough"],
        help="search size (default: ci for one policy, dev for the table)",
    )
    ck.add_argument(
        "--max-examples", type=int_at_least(1), help="Hypothesis examples (overrides profile)"
    )
    ck.add_argument("--steps", type=int_at_least(1), help="steps per example (overrides profile)")
    ck.add_argument(
        "--seed",
        type=int_at_least(0),
        default=0,
        help="the search's seed (default 0; a search is a function of its arguments)",
    )
    ck.add_argument(
        "--shrink",
        choices=["hypothesis", "dd"],
        help="hypothesis: Hypothesis shrinking then delta debugging (default for one "
        "policy); dd: delta debugging only (default for the table)",
    )
    ck.add_argument(
        "--walks",
        type=int_at_least(0),
        help="random walks after the machine (default: the profile's: dev 50, ci 200, "
        "thorough 2000)",
    )
    ck.add_argument(
        "--walk-ops",
        type=int_at_least(1),
        default=WALK_OPS,
        help=f"the longest a random walk may be, in ops (default {WALK_OPS}): longer walks "
        "reach later clocks and fill larger engines (spec/invariants.md, the search's scope)",
    )
    ck.add_argument(
        "--tier-blocks",
        type=int_at_least(2, 4096),
        help=f"the largest tier a wide random walk's engine may draw, in blocks (default "
        f"{WIDE_TIER_BLOCKS}; one walk in {WIDE_EVERY} is wide, the others draw tiers of up to "
        f"{TIER_BLOCKS} blocks): larger tiers reach bugs that need more blocks than the default "
        f"engines hold; {TIER_BLOCKS} makes every walk narrow (not with --config; the stateful "
        "machine keeps its small engines)",
    )
    ck.add_argument(
        "--crowd",
        type=int_at_least(0, MAX_CROWD),
        default=CROWD,
        help=f"background agents in flight in one random walk in {CROWD_EVERY} (default "
        f"{CROWD}; 0: none): each opens before the walk's first op and stays suspended to "
        "the end, so a walk has that many agents in flight beside its own few; a larger crowd "
        "reaches per-agent tables sized for hundreds (~1 ms an op with 256 under the Monitor)",
    )
    ck.add_argument(
        "--budget",
        help="time per policy (e.g. 60s, 5m): random walks go on until it is spent "
        "(shrinking comes after)",
    )
    ck.add_argument(
        "-j",
        "--jobs",
        type=int_at_least(1),
        default=1,
        help="processes (default 1): several policies are searched one per process, "
        "one policy's random walks -j chunks at a time; the report is the serial one",
    )
    ck.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on this Dask scheduler (the policies' searches, or one policy's random "
        "walks -j chunks at a time)",
    )
    ck.add_argument(
        "--workers",
        type=int_at_least(1, 256),
        help="run on a local Dask cluster of N processes (the policies' searches, or one "
        "policy's random walks)",
    )
    ck.add_argument(
        "--config",
        help="engine config TOML: search on this one engine (default: a swarm, each example "
        "draws its own)",
    )
    ck.add_argument("--out", help="directory for counterexample bundles")
    ck.add_argument("--json", action="store_true", help="print every policy's report as JSON")
    ck.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="each policy's whole search after the table (default: one line per policy)",
    )
    ck.add_argument("--quiet", action="store_true", help="no progress bar (drawn only on a TTY)")
    ck.set_defaults(func=_cmd_check)
    _add_replay_check(sub)


def _add_replay_check(sub: Subparsers) -> None:
    """``replay --check``: the model's ``replay`` command, monitored (the model registers its
    commands before any other package's, so ``replay`` is there to extend)."""
    r = sub.choices["replay"]
    r.add_argument(
        "--check",
        nargs="?",
        const="",
        metavar="INV,...",
        help="check invariants while replaying (default: all); exit 1 if violated",
    )
    r.add_argument(
        "--quiet", action="store_true", help="with --check: no progress bar (drawn only on a TTY)"
    )
    r.add_argument(
        "--skip",
        type=_passes,
        default=(),
        metavar="PASS,...",
        help=f"with --check: skip optional passes ({', '.join(OPTIONAL_PASSES)}); the report "
        "says what each skipped pass would have found",
    )
    r.set_defaults(checked=_replay_checked)


#: ``replay --check``'s passes after the monitored replay, each with what it finds: a long
#: trace may skip them (``--skip``), and the report says so
OPTIONAL_PASSES: dict[str, str] = {
    "nondeterminism": "a policy or engine whose replays of one trace differ (finding "
    "nondeterministic)",
    "ample-contract": "an engine that breaks the contract where memory never fills, under lru "
    "and kvtether (finding engine-contract)",
}


def _passes(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in OPTIONAL_PASSES]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown pass {bad[0]!r}; expected any of {', '.join(OPTIONAL_PASSES)}"
        )
    return names
