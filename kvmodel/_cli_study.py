"""The study commands of the CLI: import, simulate, compare, oracle, kv-events, prove, lachesis.

Split from :mod:`kvmodel.cli` (the composition root) to keep each module to one concern; the
argument parser and ``main`` stay there.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kvmodel._cli_common import atomic_write, engine_config, workload
from kvmodel.config import default_config
from kvmodel.errors import ConfigError, KVModelError, TraceError
from kvmodel.logical import Sequences
from kvmodel.policy import STRUCTURAL_CLAIMS, resolve_policy
from kvmodel.presets import hardware_config
from kvmodel.progress import bar, wanted
from kvmodel.replay import replay
from kvmodel.trace import iter_trace_lines, load_trace, parse_trace_lines

if TYPE_CHECKING:
    from policies.spawn_predictor import WorkerSample

__all__ = [
    "cmd_compare",
    "cmd_import",
    "cmd_kv_events",
    "cmd_lachesis_cv",
    "cmd_lachesis_fit",
    "cmd_oracle",
    "cmd_prove",
    "cmd_simulate",
    "wide_spec",
]


def cmd_import(args: argparse.Namespace) -> int:
    """Turn logs of real LLM requests into a trace (``kvmodel import openai LOG... -o T``)."""
    from kvmodel.importers import import_claude_code, import_openai

    importer = import_openai if args.format == "openai" else import_claude_code
    where = args.paths[0] if len(args.paths) == 1 else None
    try:
        trace, report = importer(args.paths)
    except KVModelError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError, RecursionError, UnicodeError) as e:
        # a record shaped other than the importer expects: a located error, nothing written
        raise TraceError(
            f"cannot import: a record is not shaped as expected ({type(e).__name__}: {e})",
            file=where,
        ) from None
    text = "".join(line + "\n" for line in iter_trace_lines(trace))
    # what is written must be a trace the model accepts: read it back and apply it
    try:
        check = Sequences(16)
        for op in parse_trace_lines(text.splitlines(), source=args.output).ops:
            check.apply(op)
    except TraceError as e:
        raise TraceError(
            f"the import would write a trace the model rejects ({e}); nothing was written",
            file=where,
        ) from None
    atomic_write(Path(args.output), text)
    print(
        f"{report.conversations} conversations, {report.requests} requests -> "
        f"{report.ops} ops in {args.output}; {report.skipped} records skipped",
        file=sys.stderr,
    )
    for w in report.warnings:
        print(f"  skipped: {w}", file=sys.stderr)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """One workload (built-in generator or a trace file) under one policy: the metrics."""
    from kvmodel.metrics import compute_metrics

    trace = workload(args)
    if args.preset:
        split, _, model = args.preset.partition(":")
        config = hardware_config(split, model or "llama-4-maverick", scale=args.scale)
    else:
        config = engine_config(args.config)
    m = compute_metrics(replay(trace, args.policy, config))
    if args.json:
        print(json.dumps(m.to_json(), indent=2))
        return 0
    print(
        f"policy {m.policy} on {args.preset_workload or args.workload}: "
        f"hit rate {m.token_hit_rate:.1%}, "
        f"recomputed {m.recomputed_tokens} tokens, est. cost ${m.cost_usd:.2f}"
    )
    print(
        f"  TTFT mean {m.ttft_s_mean * 1000:.0f} ms, modelled latency {m.latency_s_total:.0f} s;"
        f" zombie block-s {m.zombie_block_seconds:.0f}; evictions {m.evictions} "
        f"({m.regretted_evictions} regretted)"
    )
    for tier, w in m.writes.items():
        y = m.device_years.get(tier)
        print(f"  {tier}: {w} block writes" + (f", {y:.3g} device-years" if y else ""))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """The paper-style comparison (see kvmodel.compare); --out writes plots and JSON."""
    from kvmodel.compare import CACHE_POLICIES, PLACEMENT_POLICIES, compare

    # Lachesis measures on a multi-agent trace: that preset by default, 8 sessions
    trace = workload(args, default_preset="multi-agent", default_sessions=8)
    pols = args.policies.split(",") if args.policies else None
    cache = [p for p in (pols or CACHE_POLICIES) if p in CACHE_POLICIES or pols]
    place = [p for p in (pols or PLACEMENT_POLICIES) if p in PLACEMENT_POLICIES]
    for p in cache + place:
        resolve_policy(p)
    cmp = compare(
        trace,
        engine_config(args.config)
        if args.config
        else default_config(hbm_blocks=256, hbf_blocks=1024),
        splits=args.splits.split(","),
        model=args.model,
        scale=args.scale,
        cache_policies=[p for p in cache if p not in PLACEMENT_POLICIES],
        placement_policies=place,
        progress=wanted(args.quiet),
        workers=args.workers,
        scheduler=args.scheduler,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "cache": {k: v.to_json() for k, v in cmp.cache.items()},
                    "placement": {
                        s: {k: v.to_json() for k, v in r.items()} for s, r in cmp.placement.items()
                    },
                    "ratios": cmp.ratios(),
                },
                indent=2,
            )
        )
    else:
        print(cmp.render())
    if args.out:
        for path in cmp.plot(Path(args.out)):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_oracle(args: argparse.Namespace) -> int:
    """Log conformance: is IMPL_LOG a behaviour the reference allows on TRACE?"""
    from checkers.conformance.oracle import check_log, check_log_invariants, load_log
    from checkers.invariants import INVARIANTS

    if args.invariant and not args.invariants_only:
        raise ConfigError("--invariant goes with --invariants-only (--policy judges by the rank)")
    if (args.keep_going or args.allow) and args.invariants_only:
        raise ConfigError(
            "--keep-going and --allow go with --policy (invariants-only mode follows every op)"
        )
    trace = load_trace(args.trace)
    log = load_log(args.log)
    config = engine_config(args.config)
    if args.invariants_only:
        names = args.invariant.split(",") if args.invariant else sorted(STRUCTURAL_CLAIMS)
        if bad := [n for n in names if n not in INVARIANTS]:
            raise ConfigError(f"unknown invariant {bad[0]!r}; known: {', '.join(INVARIANTS)}")
        verdict = check_log_invariants(trace, log, config, names, complete=args.complete)
    else:
        verdict = check_log(
            trace,
            log,
            args.policy,
            config,
            complete=args.complete,
            keep_going=args.keep_going,
            allow=args.allow.split(",") if args.allow else (),
        )
    if args.json:
        print(json.dumps(attrs.asdict(verdict), indent=2))
    else:
        print(verdict.render())
    return {"OK": 0, "ILLEGAL": 1}.get(verdict.verdict, 3)


def cmd_kv_events(args: argparse.Namespace) -> int:
    """Check a vLLM KV-event log (BlockStored/BlockRemoved/AllBlocksCleared) for what it shows."""
    from checkers.conformance.kv_events import check_kv_events, load_kv_events

    events = load_kv_events(args.log)
    try:
        found = check_kv_events(events)
    except TraceError as e:
        raise e.located(file=args.log, line=None, op=None) from None
    if args.json:
        print(json.dumps([attrs.asdict(f) for f in found], indent=2))
    else:
        for f in found:
            print(f"{args.log}:{f.line}: {f.rule}: {f.message}")
        print(f"{len(events)} events, {len(found)} findings")
    return 1 if found else 0


def wide_spec(text: str) -> object:
    """An argparse type: ``--wide K=V,...`` -> a :class:`checkers.symbolic.reach.Wide`."""
    from checkers.symbolic.reach import parse_wide

    try:
        return parse_wide(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_prove(args: argparse.Namespace) -> int:
    """Z3: the rank's eviction-order properties for all feature values, then bounded model
    checking and k-induction of the invariants over the harness fragment."""
    from checkers.symbolic.bmc import prove, rank_counterexample
    from checkers.symbolic.fragment import FRAGMENT_INVARIANTS, Fragment
    from checkers.symbolic.z3rank import PROPERTIES, prove_policy

    policy = resolve_policy(args.policy)
    props = args.prop.split(",") if args.prop else None
    if props is not None and (bad := [p for p in props if p not in PROPERTIES]):
        raise ConfigError(f"unknown property {bad[0]!r}; known: {', '.join(PROPERTIES)}")
    names = args.invariant.split(",") if args.invariant else list(FRAGMENT_INVARIANTS)
    if bad := [n for n in names if n not in FRAGMENT_INVARIANTS]:
        raise ConfigError(
            f"invariant {bad[0]!r} is not in the fragment; known: {', '.join(FRAGMENT_INVARIANTS)}"
        )
    if args.depth < 1:
        raise ConfigError(f"--depth must be >= 1 (got {args.depth})")
    for opt in ("contexts", "slots", "edits"):
        low = 0 if opt == "edits" else 1
        if getattr(args, opt) < low or getattr(args, opt) > 6:
            raise ConfigError(f"--{opt} must be in [{low}, 6] (got {getattr(args, opt)})")
    fragment = Fragment(args.contexts, args.slots, args.edits)
    from checkers.symbolic.z3util import RLIMIT

    rlimit = RLIMIT if args.rlimit is None else args.rlimit
    if rlimit < 1:
        raise ConfigError(f"--rlimit must be >= 1 (got {rlimit})")
    reaching = bool(args.reach or args.wide is not None)
    with bar(3 if reaching else 2, "prove", on=wanted(args.quiet)) as done:
        try:
            proofs = prove_policy(policy, props, timeout_ms=int(args.timeout * 1000), rlimit=rlimit)
        except ValueError:
            proofs = []  # no declarative rank: only the fragment (which will say so) applies
        done("rank")
        answers = prove(
            args.policy,
            names,
            fragment=fragment,
            depth=args.depth,
            timeout_s=args.timeout,
            rlimit=rlimit,
        )
        done("fragment")
        claims = set(getattr(policy, "claims", ()))
        bad_claim = any(a.rung == "violated" and a.invariant in claims for a in answers)
        # what a proof here does not speak for: claims outside the fragment's invariants
        uncovered = sorted(claims - set(FRAGMENT_INVARIANTS))
        found = None
        offline = callable(getattr(policy, "prepare", None))
        if (args.reach or args.wide is not None) and offline:
            # it plans from a whole trace; the step-wise search has no trace to give it
            print(
                "--reach: not run: the policy plans from the whole trace (offline)",
                file=sys.stderr,
            )
        elif args.reach or args.wide is not None:
            from checkers.invariants import FINDINGS
            from checkers.symbolic.reach import REACH_INVARIANTS, Wide, reach

            found = reach(
                args.policy,
                args.wide if args.wide is not None else Wide(),
                max_states=args.max_states,
                max_seconds=args.reach_seconds,
            )
            bad_claim = bad_claim or any(
                n in claims or n in FINDINGS for n in found.failing
            )
            uncovered = sorted(set(uncovered) - set(REACH_INVARIANTS))
            done("reach")
    if args.json:
        out = {
            "rank": [attrs.asdict(p) for p in proofs],
            "fragment": [
                {
                    **attrs.asdict(a),
                    "trace": [str(x) for x in a.trace],
                    "claimed": a.invariant in claims,
                    "structural": a.structural,
                }
                for a in answers
            ],
            "uncovered_claims": uncovered,
            "fragment_size": {
                "contexts": fragment.contexts,
                "slots": fragment.slots,
                "edits": fragment.edits,
            },
        }
        if found is not None:
            out["reach"] = {
                "fragment": attrs.asdict(found.wide),
                "states": found.states,
                "transitions": found.transitions,
                "depth": found.depth,
                "fixpoint": found.fixpoint,
                "exact": found.inexact is None,
                "inexact": found.inexact,
                "capped": found.capped,
                "seconds": round(found.seconds, 3),
                "levels": list(found.levels),
                "verdicts": [
                    {
                        "invariant": n,
                        "rung": found.verdict(n)[0],
                        "detail": found.verdict(n)[1],
                        "claimed": n in claims,
                        "trace": [str(x) for x in found.failing.get(n, (0, ()))[1]],
                    }
                    for n in (*found.invariants, *(f for f in found.failing if f in FINDINGS))
                ],
            }
        print(json.dumps(out, indent=2))
    else:
        print(f"rank-order properties of {policy.name} (all feature values):")
        if not proofs:
            print("  none claimed, or no declarative rank")
        for p in proofs:
            print(f"  {p.prop:<22} {p.rung:<9} {p.seconds * 1000:7.1f} ms")
            for blk, vals in (p.counterexample or {}).items():
                print(f"      {blk}: " + ", ".join(f"{k}={v}" for k, v in vals.items()))
            if p.rung == "violated":
                shown = rank_counterexample(args.policy, p.prop, depth=args.depth)
                if shown is not None:
                    print(f"      the wrong eviction ({shown[0]}) on a trace: "
                          + " ; ".join(str(a) for a in shown[1]))  # fmt: skip
        f = fragment
        print(
            f"invariants over the fragment ({f.contexts} contexts, {f.slots} slots, "
            f"{f.edits} edit each; BMC to depth {args.depth}, then k-induction):"
        )
        for a in answers:
            mark = "!" if a.rung == "violated" and a.invariant in claims else " "
            print(mark + " " + a.render())
        if found is not None:
            print(found.render(claims))
        if uncovered:
            print(
                f"claims the fragment{'s do' if found is not None else ' does'} not cover "
                f"(only kvmodel check tests them): {', '.join(uncovered)}"
                + ("" if found is not None else "; --reach covers all but endurance-budget")
            )
        print(
            "rungs cover every state a run reaches; a decision the engine refuses ends the run "
            "(a policy-protocol finding: kvmodel check searches for those, prove does not)"
        )
    mismatch = False
    if args.self_check:
        from checkers.symbolic.selfcheck import self_check

        sc = self_check(args.policy, fragment=fragment, walks=args.self_check_walks, steps=12)
        print(json.dumps(attrs.asdict(sc), indent=2) if args.json else sc.render())
        mismatch = bool(sc.mismatches)
    return 1 if bad_claim or mismatch or any(p.rung == "violated" for p in proofs) else 0


def _lachesis_samples(paths: Sequence[str]) -> list[WorkerSample]:
    from policies.spawn_predictor import default_training_traces, samples_from

    traces = [load_trace(p) for p in paths] if paths else default_training_traces()
    return samples_from(traces)


def cmd_lachesis_fit(args: argparse.Namespace) -> int:
    from policies.spawn_predictor import DEFAULT_TRAINING, SpawnPredictor

    samples = _lachesis_samples(args.traces)
    model = SpawnPredictor.fit(samples, ridge=args.ridge or DEFAULT_TRAINING["ridge"])
    model.save(args.out)
    print(
        f"fitted on {len(samples)} workers from "
        f"{len({s.session for s in samples})} sessions; weights written to {args.out}"
    )
    return 0


def cmd_lachesis_cv(args: argparse.Namespace) -> int:
    from policies.spawn_predictor import cross_validate

    samples = _lachesis_samples(args.traces)
    r = cross_validate(samples, folds=args.folds, select=args.select)
    if args.json:
        print(json.dumps(attrs.asdict(r), indent=2))
        return 0
    print(f"{r.workers} workers, {r.sessions} sessions, grouped {r.folds}-fold CV by session")
    print(f"  Kendall tau (predicted vs true lifetime): {r.kendall_tau:6.3f}   (paper: 0.53)")
    print(
        f"  shortest-lived tenth captured at {args.select:.0%}: "
        f"{r.shortest_tenth_captured:6.1%}   (paper: 62.8%)"
    )
    print(
        f"  longest-lived tenth selected at {args.select:.0%}:  "
        f"{r.longest_tenth_selected:6.1%}   (paper: 0%)"
    )
    return 0
