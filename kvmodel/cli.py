"""The ``kvmodel`` command line; the composition root (the only place that wires things together).

Exit codes: 0 success, 2 bad input (trace, config, policy name, usage), 1 a failure inside a
policy or kvmodel itself. Output files are written to a temporary name and renamed into place
only on success, so a failed run leaves no partial file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kvmodel._cli_common import (
    agentic_from,
    atomic_write,
    engine_config,
    int_at_least,
    invariant_names,
    number_in,
)
from kvmodel._cli_discover import add_discover
from kvmodel._cli_study import (
    cmd_compare,
    cmd_import,
    cmd_kv_events,
    cmd_lachesis_cv,
    cmd_lachesis_fit,
    cmd_oracle,
    cmd_prove,
    cmd_simulate,
    wide_spec,
)
from kvmodel._cli_views import cmd_export_itf, cmd_sweep, cmd_view
from kvmodel.config import EngineConfig, default_config
from kvmodel.engine import Engine
from kvmodel.errors import (
    ConfigError,
    KVModelError,
    PolicyDefinitionError,
    PolicyNotFoundError,
    TraceError,
)
from kvmodel.policy import registered_policies, resolve_policy
from kvmodel.progress import bar, wanted
from kvmodel.replay import Summary, replay
from kvmodel.sweep import local_cluster
from kvmodel.trace import Trace, iter_trace_lines, load_trace
from kvmodel.workloads import PRESETS

if TYPE_CHECKING:
    pass

__all__ = ["main"]


def _cmd_replay(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    config = engine_config(args.config)
    if args.check is not None:
        return _replay_checked(args, trace, config)
    # the records are built only when they are written out: the summary needs none
    result = replay(trace, args.policy, config, observe=bool(args.observations))
    if args.observations:
        atomic_write(Path(args.observations), result.engine.log.to_jsonl())
    _print_summary(result.summary, as_json=args.json)
    return 0


def _replay_checked(args: argparse.Namespace, trace: Trace, config: EngineConfig) -> int:
    """``replay --check``: replay with the invariant monitor, then twice more to compare the
    logs (a ``nondeterministic`` finding when they differ), and the policy's engine against the
    contract on ample memory (``engine-contract``); exit 1 on any violation or finding."""
    from checkers.invariants.nversion import contract_violation
    from checkers.invariants.replay import check_ops, nondeterminism
    from checkers.invariants.structural import Violation

    names = invariant_names(args.check)
    run = check_ops(trace.ops, args.policy, config, names)
    if run.trace_error is not None:
        raise run.trace_error.located(file=trace.source, line=trace.line_of(run.applied), op=None)
    if args.observations:
        atomic_write(Path(args.observations), run.engine.log.to_jsonl())
    first: dict[str, Violation] = {}
    found = list(run.violations)
    odd = nondeterminism(trace.ops, args.policy, config)
    if odd is not None:
        found.append(odd)
    engine_class = getattr(resolve_policy(args.policy), "engine_class", Engine)
    off = contract_violation(trace.ops, engine_class, block_size=config.block_size)
    if off is not None:
        found.append(off)
    for v in found:
        first.setdefault(v.invariant, v)
    if args.json:
        print(
            json.dumps(
                {
                    "policy": args.policy,
                    "checked": names,
                    "violations": [attrs.asdict(v) for v in first.values()],
                },
                indent=2,
            )
        )
    else:
        for v in found:
            if first.get(v.invariant) is v:
                print(f"VIOLATED {v.invariant} at op {v.op}: {v.message}")
        held = [n for n in names if n not in first]
        print(f"{len(first)} violated, {len(held)} held: {', '.join(held) or '-'}")
    return 1 if first else 0


def _print_summary(s: Summary, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(s.to_json(), indent=2))
        return
    print(f"policy {s.policy}: {s.ops} ops, {s.infers} inferences, {s.rejected} rejected")
    print(
        f"  tokens: prompt {s.prompt_tokens}, hit {s.hit_tokens} "
        f"({s.token_hit_rate:.1%}), recomputed {s.miss_tokens}, output {s.output_tokens}"
    )
    for tier, w in s.writes.items():
        years = s.device_years.get(tier)
        wear = f", {years:.3g} device-years" if years is not None else ""
        print(
            f"  tier {tier}: {w} block writes, {s.evictions[tier]} evictions, "
            f"{s.frees[tier]} frees{wear}"
        )
    print(
        f"  dead resident: final {s.dead_resident_final}, max {s.dead_resident_max}; "
        f"zombie block-seconds {s.zombie_block_seconds:.1f}"
    )


def _cmd_policies(args: argparse.Namespace) -> int:
    rows = []
    for name, path in registered_policies().items():
        try:
            p = resolve_policy(name)
            claims = sorted(getattr(p, "claims", ()))
        except PolicyNotFoundError as e:
            claims = [f"(unavailable: {e})"]
        rows.append({"name": name, "path": path, "claims": claims})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['name']:<12} {r['path']}")
            print(f"{'':<12} claims: {', '.join(r['claims']) or '-'}")
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    if args.random_ops is not None:
        from kvmodel.workloads import RandomParams, random_trace

        if args.random_ops < 1:
            raise ConfigError(f"--random-ops must be >= 1 (got {args.random_ops})")
        # every op kind (replace, unpin, partial forks, temporaries, ...), not agent-shaped
        trace = random_trace(RandomParams(seed=args.seed, ops=args.random_ops))
    else:
        trace = agentic_from(args)
    text = "".join(line + "\n" for line in iter_trace_lines(trace))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        atomic_write(Path(args.output), text)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    """The built-in default job: one generated agent workload, every built-in policy."""
    trace = agentic_from(args)
    config = (
        engine_config(args.config)
        if args.config
        else default_config(hbm_blocks=256, hbf_blocks=1024)
    )
    names = args.policies.split(",") if args.policies else list(registered_policies())
    rows = [replay(trace, n, config).summary for n in names]
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
        return 0
    print(
        f"workload: {args.preset_workload or 'agentic'} seed={args.seed} "
        f"sessions={args.sessions or 4} turns={args.turns} "
        f"({len(trace.ops)} ops); tiers: "
        + ", ".join(f"{t.name}={t.blocks} blocks" for t in config.tiers)
    )
    w = max(len(r.policy) for r in rows) + 2
    head = (
        f"{'policy':<{w}}{'hit rate':>9}{'recomputed':>12}{'rejected':>9}"
        f"{'zombie blk-s':>14}{'dead max':>9}"
        + "".join(f"{'writes ' + n:>13}" for n in rows[0].writes)
    )
    print(head)
    for r in rows:
        print(
            f"{r.policy:<{w}}{r.token_hit_rate:>9.1%}{r.miss_tokens:>12}{r.rejected:>9}"
            f"{r.zombie_block_seconds:>14.0f}{r.dead_resident_max:>9}"
            + "".join(f"{x:>13}" for x in r.writes.values())
        )
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    """Search for counterexamples; print the policy x invariant table; write bundles."""
    from checkers.invariants import INVARIANTS
    from checkers.search.report import check_policies, render_table

    names = [n for n in args.invariants.split(",") if n] if args.invariants else list(INVARIANTS)
    unknown = [n for n in names if n not in INVARIANTS]
    if unknown:
        raise ConfigError(f"unknown invariant {unknown[0]!r}; known: {', '.join(INVARIANTS)}")
    policies = [args.policy] if args.policy else list(registered_policies())
    for p in policies:
        resolve_policy(p)  # fail fast on a bad name (exit 2)
    profile = args.profile or ("ci" if args.policy else "dev")
    shrinker = args.shrink or ("hypothesis" if args.policy else "dd")
    out = Path(args.out) if args.out else None
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1 (got {args.jobs})")
    if args.workers and args.scheduler:
        raise ConfigError("give --workers (a local Dask cluster) or --scheduler, not both")
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
            jobs=max(args.jobs, args.workers or 1),
            scheduler=args.scheduler or address,
            done=done,
        )
    failures = {r.policy: r.failures() for r in reports if r.failures()}
    if args.json:
        print(
            json.dumps(
                {
                    "profile": profile,
                    "seed": args.seed,
                    "shrink": shrinker,
                    "reports": [r.to_json() for r in reports],
                    "failures": failures,
                },
                indent=2,
            )
        )
        return 1 if failures else 0
    print(render_table(reports))
    print()
    for r in reports:
        st = r.result.stats
        never = ", ".join(st.never_fired()) or "none"
        print(
            f"{r.policy}: {st.examples} examples, {st.steps} steps, {st.walks} random walks, "
            f"{st.contract_traces} contract traces; never fired: {never}"
        )
        fired = ", ".join(f"{k} {n}" for k, n in sorted(st.rules.items()) if n)
        print(f"  rules fired: {fired}")
        print(f"  ops applied: {', '.join(f'{k} {n}' for k, n in sorted(st.ops.items()) if n)}")
        print(f"  {st.coverage_line()}")
        for warning in st.unexercised(r.result.invariants):
            print(f"  warning: {warning}")
        for inv, c in sorted(r.result.found.items()):
            where = f" -> {r.bundles[inv]}" if inv in r.bundles else ""
            tag = (
                "CLAIM VIOLATED"
                if inv in r.claims
                else "FAILED"
                if inv in r.failures()
                else "finding"
            )
            shrunk = {"machine": f"Hypothesis {c.hypothesis_ops}", "walk": "random walk"}.get(
                c.found_by, f"engine self-check, from {c.hypothesis_ops}"
            )
            print(
                f"  {tag}: {inv}: {len(c.ops)} ops ({shrunk}, "
                f"{'1-minimal' if c.one_minimal else 'not proven 1-minimal'}; "
                f"{_engine_brief(c.config)}){where}"
            )
    if failures:
        print(f"\nFAILED: claimed invariants violated or findings: {failures}")
        return 1
    return 0


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


def _workload_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--seed", type=int_at_least(0), default=0)
    sp.add_argument(
        "--sessions",
        type=int_at_least(1, 100_000),
        help="sessions (default: 4, or the preset's; at most 100,000)",
    )
    sp.add_argument("--turns", type=int_at_least(1, 10_000), default=3, help="at most 10,000")
    sp.add_argument(
        "--workload-preset",
        dest="preset_workload",
        choices=sorted(PRESETS),
        help="a calibrated generator preset (see kvmodel.workloads.PRESETS)",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvmodel", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("replay", help="replay a trace under a policy")
    r.add_argument("trace", help="trace file (JSONL, spec/trace-format.md)")
    r.add_argument("--policy", default="lru", help="policy name or package.module:Name")
    r.add_argument("--config", help="engine config TOML (default: hbm 512 + hbf 4096 blocks)")
    r.add_argument("--observations", metavar="OUT.jsonl", help="write the observation log")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.add_argument(
        "--check",
        nargs="?",
        const="",
        metavar="INV,...",
        help="check invariants while replaying (default: all); exit 1 if violated",
    )
    r.set_defaults(func=_cmd_replay)

    ex = sub.add_parser(
        "export-itf", help="a trace's states under a policy as ITF JSON (Apalache ADR-015)"
    )
    ex.add_argument("trace", help="trace file (JSONL, spec/trace-format.md)")
    ex.add_argument("--policy", default="lru", help="policy name or package.module:Name")
    ex.add_argument("--config", help="engine config TOML (default: hbm 512 + hbf 4096 blocks)")
    ex.add_argument("-o", "--output", required=True, metavar="OUT.itf.json")
    ex.set_defaults(func=cmd_export_itf)

    vw = sub.add_parser("view", help="a trace op by op as one self-contained HTML page")
    vw.add_argument("trace", help="trace file (JSONL, spec/trace-format.md)")
    vw.add_argument("--policy", default="lru", help="policy name or package.module:Name")
    vw.add_argument("--config", help="engine config TOML (default: hbm 512 + hbf 4096 blocks)")
    vw.add_argument(
        "--check",
        nargs="?",
        const="",
        metavar="INV,...",
        help="monitor invariants (default: all) and highlight the first violation",
    )
    vw.add_argument(
        "--observations",
        metavar="LOG",
        help="an implementation's observation log (T4): its counts beside the model's; with a "
        "rank --policy, the oracle's first divergence is highlighted",
    )
    vw.add_argument("-o", "--output", required=True, metavar="OUT.html")
    vw.set_defaults(func=cmd_view)

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
    ck.add_argument("--seed", type=int_at_least(0), default=0)
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
        "--budget",
        help="time per policy (e.g. 60s, 5m): random walks go on until it is spent "
        "(shrinking comes after)",
    )
    ck.add_argument(
        "-j",
        "--jobs",
        type=int_at_least(1),
        default=1,
        help="processes for the random walks (default 1)",
    )
    ck.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run the random walks, -j chunks at a time, on this Dask scheduler",
    )
    ck.add_argument(
        "--workers",
        type=int_at_least(1, 256),
        help="run the random walks on a local Dask cluster of N processes",
    )
    ck.add_argument(
        "--config",
        help="engine config TOML: search on this one engine (default: a swarm, each example "
        "draws its own)",
    )
    ck.add_argument("--out", help="directory for counterexample bundles")
    ck.add_argument("--json", action="store_true")
    ck.add_argument("--quiet", action="store_true", help="no progress bar (drawn only on a TTY)")
    ck.set_defaults(func=_cmd_check)

    sm = sub.add_parser("simulate", help="metrics of one workload under one policy")
    sm.add_argument(
        "--workload",
        default="agentic",
        help="'agentic', a preset (single-agent, multi-agent) or a trace file",
    )
    sm.add_argument("--policy", default="kvtether")
    sm.add_argument("--config", help="engine config TOML")
    sm.add_argument(
        "--preset",
        metavar="SPLIT[:MODEL]",
        help="hardware preset, e.g. 2/6:llama-4-maverick (see kvmodel.presets)",
    )
    sm.add_argument(
        "--scale",
        type=number_in(0.0, low_open=True),
        default=0.005,
        help="shrink preset capacities (default 0.005, for seconds-long runs)",
    )
    _workload_args(sm)
    sm.add_argument("--json", action="store_true")
    sm.set_defaults(func=cmd_simulate)

    sw = sub.add_parser(
        "sweep", help="metrics over policy x workload x capacity x seed, serially or on Dask"
    )
    sw.add_argument("--policies", default="lru,kvtether", help="comma-separated policy names")
    sw.add_argument(
        "--workloads", default="single-agent,multi-agent", help="comma-separated presets"
    )
    sw.add_argument(
        "--capacities", default="256,1024", help="comma-separated HBM sizes in 16-token blocks"
    )
    sw.add_argument("--seeds", default="0,1,2", help="comma-separated workload seeds")
    sw.add_argument("--sessions", type=int_at_least(1, 100_000), help="sessions per workload")
    sw.add_argument("--workers", type=int_at_least(1, 256), help="a local Dask cluster of N")
    sw.add_argument("--scheduler", metavar="ADDRESS", help="run the cells on this Dask scheduler")
    sw.add_argument("--quiet", action="store_true", help="no progress bar (drawn only on a TTY)")
    sw.add_argument("--json", action="store_true", help="every cell's metrics as JSON")
    sw.set_defaults(func=cmd_sweep)

    cp = sub.add_parser("compare", help="paper-style comparison of cache and placement policies")
    cp.add_argument(
        "--workload",
        default="agentic",
        help="'agentic', a preset (single-agent, multi-agent) or a trace file",
    )
    cp.add_argument("--policies", help="comma-separated subset (default: both families)")
    cp.add_argument("--splits", default="1/7,2/6,3/5,4/4,8/8*")
    cp.add_argument("--model", default="llama-4-maverick")
    cp.add_argument("--scale", type=number_in(0.0, low_open=True), default=0.005)
    cp.add_argument("--config", help="engine config TOML for the cache comparison")
    cp.add_argument("--out", help="directory for plots (PNG)")
    cp.add_argument(
        "--workers",
        type=int_at_least(1, 256),
        help="run the cells on a local Dask cluster of N processes (pip install 'kvmodel[dist]')",
    )
    cp.add_argument("--scheduler", metavar="ADDRESS", help="run the cells on this Dask scheduler")
    cp.add_argument("--quiet", action="store_true", help="no progress bar (drawn only on a TTY)")
    cp.add_argument("--json", action="store_true")
    _workload_args(cp)
    cp.set_defaults(func=cmd_compare)

    im = sub.add_parser("import", help="import real agent logs as a trace")
    im.add_argument("format", choices=["openai", "claude-code"], help="log format")
    im.add_argument(
        "paths",
        nargs="+",
        help="openai: tau-bench, mini-swe-agent, SWE-agent or request-list JSON files; "
        "claude-code: session .jsonl transcripts (sub-agents read from <session>/subagents/)",
    )
    im.add_argument("-o", "--output", required=True, help="trace file to write")
    im.set_defaults(func=cmd_import)

    orc = sub.add_parser("oracle", help="check an implementation's log against the reference")
    orc.add_argument("trace")
    orc.add_argument("log", help="the implementation's observation log (JSONL, spec T4)")
    mode = orc.add_mutually_exclusive_group(required=True)
    mode.add_argument("--policy", help="the reference policy (a rank policy)")
    mode.add_argument(
        "--invariants-only",
        action="store_true",
        help="assume no policy: the log must only never break the invariants",
    )
    orc.add_argument(
        "--invariant",
        help="comma-separated invariants for --invariants-only (default: the structural ones)",
    )
    orc.add_argument("--config", help="engine config TOML the implementation ran with")
    orc.add_argument(
        "--complete",
        action="store_true",
        help="the log covers every op of the trace (as an 'end' record says): judge the last too",
    )
    orc.add_argument(
        "--keep-going",
        action="store_true",
        help="policy mode: after a divergence adopt the implementation's decisions and go on; "
        "report every divergence, counted by class",
    )
    orc.add_argument(
        "--allow",
        metavar="VARIANT[,...]",
        help="policy mode: opt-in admissible variants (extra-victims: an inference that must "
        "evict may evict more than it needs, each extra admissible in turn)",
    )
    orc.add_argument("--json", action="store_true")
    orc.set_defaults(func=cmd_oracle)

    ke = sub.add_parser("kv-events", help="check a vLLM KV-event log (a partial log)")
    ke.add_argument("log", help="JSONL of BlockStored/BlockRemoved/AllBlocksCleared events")
    ke.add_argument("--json", action="store_true")
    ke.set_defaults(func=cmd_kv_events)

    pv = sub.add_parser(
        "prove", help="Z3: rank-order proofs, bounded model checking and k-induction"
    )
    pv.add_argument("policy")
    pv.add_argument("--prop", help="comma-separated rank properties (default: those it claims)")
    pv.add_argument("--invariant", help="comma-separated fragment invariants (default: all)")
    pv.add_argument("--depth", type=int_at_least(1), default=8, help="BMC depth (default 8)")
    pv.add_argument(
        "--contexts", type=int, default=3, help="fragment: open contexts (default 3)"
    )
    pv.add_argument("--slots", type=int, default=2, help="fragment: HBM slots (default 2)")
    pv.add_argument(
        "--edits", type=int, default=1, help="fragment: edits per context (default 1)"
    )
    pv.add_argument(
        "--self-check",
        action="store_true",
        help="also check the symbolic transition relation against the executable model, step "
        "by step, on seeded random walks (exit 1 on a mismatch)",
    )
    pv.add_argument(
        "--self-check-walks",
        type=int_at_least(0),
        default=60,
        help="random walks of 12 steps (default 60)",
    )
    pv.add_argument(
        "--rlimit",
        type=int_at_least(1),
        default=None,
        help="Z3 resource units per query (default 50,000,000): the deterministic budget",
    )
    pv.add_argument(
        "--timeout",
        type=number_in(0.0, low_open=True),
        default=600.0,
        help="wall-clock seconds per query, a safety net above --rlimit (default 600)",
    )
    pv.add_argument(
        "--reach",
        action="store_true",
        help="also search the executable model exhaustively over the wide fragment (2-block "
        "chains, a temporary append, forks, two tiers) to a fixpoint: every invariant proved, "
        "violated with a shortest trace, or bounded",
    )
    pv.add_argument(
        "--wide",
        type=wide_spec,
        default=None,
        metavar="K=V,...",
        help="the wide fragment: contexts, forks, hbm, hbf, edits, temporary (default "
        "contexts=1,forks=0,hbm=2,hbf=1,edits=1,temporary=yes); implies --reach",
    )
    pv.add_argument(
        "--max-states",
        type=int_at_least(1),
        default=200_000,
        help="--reach: stop (bounded, not proved) after this many states (default 200,000)",
    )
    pv.add_argument(
        "--reach-seconds",
        type=number_in(0.0, low_open=True),
        default=900.0,
        help="--reach: stop (bounded, not proved) after this many seconds (default 900)",
    )
    pv.add_argument("--json", action="store_true")
    pv.add_argument("--quiet", action="store_true", help="no progress bar (drawn only on a TTY)")
    pv.set_defaults(func=cmd_prove)

    add_discover(sub)

    pol = sub.add_parser("policies", help="list registered policies and their claims")
    pol.add_argument("--json", action="store_true")
    pol.set_defaults(func=_cmd_policies)

    g = sub.add_parser("generate", help="write a generated agent workload trace")
    _workload_args(g)
    g.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    g.add_argument(
        "--random-ops",
        type=int_at_least(1),
        metavar="N",
        help="instead of an agent workload, N random valid ops over every op kind "
        "(replace, unpin, partial forks, temporaries, ...): the fuzzing and checking generator",
    )
    g.set_defaults(func=_cmd_generate)

    d = sub.add_parser("demo", help="compare built-in policies on a generated agent workload")
    _workload_args(d)
    d.add_argument("--policies", help="comma-separated policy names (default: all registered)")
    d.add_argument("--config", help="engine config TOML (default: hbm 256 + hbf 1024 blocks)")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_cmd_demo)

    la = sub.add_parser("lachesis", help="Lachesis's spawn-signal predictor: fit, cross-validate")
    lsub = la.add_subparsers(dest="lachesis_command", required=True)
    lf = lsub.add_parser("fit", help="fit ridge weights (default: the documented training set)")
    lf.add_argument("traces", nargs="*", help="trace files (default: built-in training traces)")
    lf.add_argument("--out", required=True, help="weights JSON to write")
    lf.add_argument("--ridge", type=number_in(0.0), help="ridge penalty (default 1.0)")
    lf.set_defaults(func=cmd_lachesis_fit)
    lc = lsub.add_parser("cv", help="grouped k-fold CV: Kendall tau and 10%% selection shares")
    lc.add_argument("traces", nargs="*", help="trace files (default: built-in training traces)")
    lc.add_argument("--folds", type=int_at_least(2), default=5)
    lc.add_argument("--select", type=number_in(0.0, 1.0, low_open=True), default=0.1)
    lc.add_argument("--json", action="store_true")
    lc.set_defaults(func=cmd_lachesis_cv)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (a usage error, printed by argparse, is 2)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2): a status, like any other
        return e.code if isinstance(e.code, int) else 2
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (TraceError, ConfigError, PolicyNotFoundError, PolicyDefinitionError) as e:
        print(f"kvmodel: error: {e}", file=sys.stderr)
        return 2
    except KVModelError as e:
        print(f"kvmodel: failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
