"""The study commands: simulate, sweep, compare, import, lachesis (fit, cv)."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import attrs

from kvmodel.cli.common import (
    Subparsers,
    atomic_write,
    engine_config,
    int_at_least,
    number_in,
    output_dir,
    workload,
    workload_args,
    workload_params,
)
from kvmodel.config import default_config
from kvmodel.errors import ConfigError, KVModelError, TraceError
from kvmodel.io.trace import Trace, iter_trace_lines, load_trace, parse_trace_lines
from kvmodel.logical import Sequences
from kvmodel.policy import resolve_policy
from kvmodel.progress import bar, wanted
from kvmodel.replay import replay
from kvmodel.studies.metrics import Timing
from kvmodel.studies.presets import decode_node, hardware_config
from kvmodel.workloads import PRESETS

__all__ = [
    "add_compare",
    "add_import",
    "add_simulate",
    "add_stats",
    "add_sweep",
]


def _cmd_simulate(args: argparse.Namespace) -> int:
    """One workload (built-in generator or a trace file) under one policy: the metrics."""
    from kvmodel.studies.metrics import compute_metrics

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
        f"recomputed {m.recomputed_tokens} tokens, est. cost ${m.cost_usd:.2f} "
        f"(input ${m.input_cost_usd:.2f}, output ${m.output_cost_usd:.2f})"
    )
    if m.rejected:
        print(
            f"  {m.rejected} inferences rejected, costed as full recomputes "
            f"({m.rejected_prompt_tokens} prompt tokens; spec E3)"
        )
    print(
        f"  TTFT mean {m.ttft_s_mean * 1000:.0f} ms (queued for prefill: mean "
        f"{m.queued_ttft_s_mean * 1000:.0f} ms, p99 {m.queued_ttft_s_p99 * 1000:.0f} ms), "
        f"modelled latency {m.latency_s_total:.0f} s;"
        f" zombie block-s {m.zombie_block_seconds:.0f}; evictions {m.evictions} "
        f"({m.regretted_evictions} regretted)"
    )
    for tier, w in m.writes.items():
        y = m.device_years.get(tier)
        print(f"  {tier}: {w} block writes" + (f", {y:.3g} device-years" if y else ""))
    return 0


def _scale_arg(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--scale",
        type=number_in(0.0, low_open=True),
        default=0.005,
        help="shrink the presets' capacities (default 0.005, for seconds-long runs)",
    )


def add_simulate(sub: Subparsers) -> None:
    sm = sub.add_parser("simulate", help="metrics of one workload under one policy")
    sm.add_argument(
        "--workload",
        default="agentic",
        help="'agentic', a preset (single-agent, multi-agent) or a trace file",
    )
    sm.add_argument(
        "--policy", default="kvtether", help="policy name or package.module:Name (default kvtether)"
    )
    sm.add_argument("--config", help="engine config TOML")
    sm.add_argument(
        "--preset",
        metavar="SPLIT[:MODEL]",
        help="hardware preset, e.g. 2/6:llama-4-maverick (see kvmodel.studies.presets)",
    )
    _scale_arg(sm)
    workload_args(sm)
    sm.add_argument("--json", action="store_true", help="print the metrics as JSON")
    sm.set_defaults(func=_cmd_simulate)


def _cmd_sweep(args: argparse.Namespace) -> int:
    """``kvmodel sweep``: every (policy, workload, capacity, seed) cell an independent task
    (kvmodel.studies.sweep); a table of the main metrics, or every metric as JSON."""
    from kvmodel.studies.sweep import run_tasks, sweep_cell

    def items(text: str, what: str) -> list[str]:
        out = [x for x in text.split(",") if x]
        if not out:
            raise ConfigError(f"--{what}: expected a comma-separated list")
        return out

    policies = items(args.policies, "policies")
    for p in policies:
        resolve_policy(p)
    workloads = items(args.workloads, "workloads")
    if bad := [w for w in workloads if w not in PRESETS]:
        raise ConfigError(f"unknown workload {bad[0]!r}; presets: {', '.join(PRESETS)}")
    try:
        capacities = [int(x) for x in items(args.capacities, "capacities")]
        seeds = [int(x) for x in items(args.seeds, "seeds")]
    except ValueError as e:
        raise ConfigError(f"--capacities and --seeds take integers ({e})") from None
    if any(not 1 <= c <= 10_000_000 for c in capacities) or any(s < 0 for s in seeds):
        raise ConfigError("capacities must be in [1, 10,000,000] blocks and seeds >= 0")
    tasks = [
        (p, w, c, s, args.sessions)
        for w in workloads
        for c in capacities
        for s in seeds
        for p in policies
    ]
    with bar(len(tasks), "sweep", on=wanted(args.quiet)) as done:
        cells = run_tasks(
            sweep_cell,
            tasks,
            workers=args.workers,
            scheduler=args.scheduler,
            done=lambda k: done(" ".join(str(x) for x in tasks[k][:4])),
        )
    if args.json:
        print(json.dumps(cells, indent=2))
        return 0
    print(f"{'workload':<14}{'capacity':>9}{'seed':>5}  {'policy':<16}{'hit rate':>9}"
          f"{'cost $':>9}{'evictions':>10}{'zombie block-s':>16}")  # fmt: skip
    for c in cells:
        print(f"{c['workload']:<14}{c['capacity']:>9}{c['seed']:>5}  {c['policy']:<16}"
              f"{c['token_hit_rate']:>9.1%}{c['cost_usd']:>9.2f}{c['evictions']:>10}"
              f"{c['zombie_block_seconds']:>16.0f}")  # fmt: skip
    return 0


def add_sweep(sub: Subparsers) -> None:
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
    sw.set_defaults(func=_cmd_sweep)


def _cmd_compare(args: argparse.Namespace) -> int:
    """The paper-style comparison (see kvmodel.studies.compare); --out writes plots and JSON."""
    from kvmodel.studies.compare import (
        CACHE_POLICIES,
        PAPER_CAPACITY,
        PLACEMENT_POLICIES,
        compare,
    )

    out = output_dir(args.out) if args.out else None  # (before the work, not after it)
    pols = args.policies.split(",") if args.policies else None
    cache = [p for p in (pols or CACHE_POLICIES) if p in CACHE_POLICIES or pols]
    place = [p for p in (pols or PLACEMENT_POLICIES) if p in PLACEMENT_POLICIES]
    for p in cache + place:
        resolve_policy(p)
    splits = args.splits.split(",")
    load = None
    timing = Timing(prefill_servers=args.prefill_servers)
    if args.slo_tpot is not None and args.slo_ttft is None:
        raise ConfigError("--slo-tpot joins the load model's TTFT target: give --slo-ttft too")
    if args.slo_ttft is None:
        # Lachesis measures on a multi-agent trace: that preset by default, 8 sessions
        trace = workload(args, default_preset="multi-agent", default_sessions=8)
    else:
        from kvmodel.studies.load import find_load

        params = workload_params(args, default_preset="multi-agent", default_sessions=40)
        if params is None:
            raise ConfigError(
                "--slo-ttft sets the session arrivals: use a generator preset, not a trace file"
            )
        split = args.load_split or splits[0]
        node = hardware_config(split, args.model, scale=args.scale)
        with bar(1, "find load", on=wanted(args.quiet)) as found:
            load, trace = find_load(
                params,
                node,
                slo_ttft_s=args.slo_ttft,
                scale=args.scale,
                timing=timing,
                slo_tpot_s=args.slo_tpot,
                decode=None if args.slo_tpot is None else decode_node(args.model),
            )
            found(f"{load.sessions_per_s * 3600:.0f} sessions/h")
    if args.capacity is not None and args.config:
        raise ConfigError("--capacity sizes the cache memory from the workload: drop --config")
    capacity = None
    fraction = args.capacity
    cache_policies = [p for p in cache if p not in PLACEMENT_POLICIES]
    if fraction is None and args.paper and not args.config and cache_policies:
        fraction = PAPER_CAPACITY  # the claims are measured where the workload is under pressure
    if fraction is not None:
        from kvmodel.studies.compare import capacity_config

        cache_config, capacity = capacity_config(trace, fraction)
    elif args.config:
        cache_config = engine_config(args.config)
    else:
        cache_config = default_config(hbm_blocks=256, hbf_blocks=1024)
    cmp = compare(
        trace,
        cache_config,
        splits=splits,
        model=args.model,
        scale=args.scale,
        cache_policies=cache_policies,
        placement_policies=place,
        progress=wanted(args.quiet),
        workers=args.workers,
        scheduler=args.scheduler,
        load=load,
        capacity=capacity,
        timing=timing,
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
                    "load": attrs.asdict(load) if load else None,
                    "capacity": dict(
                        zip(("fraction", "footprint", "blocks"), capacity, strict=True)
                    )
                    if capacity
                    else None,
                    "claims": [attrs.asdict(c) for c in cmp.claims()],
                },
                indent=2,
            )
        )
    elif args.paper:
        print(cmp.render_paper())
    else:
        print(cmp.render())
    if out is not None:
        for path in cmp.plot(out):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def add_compare(sub: Subparsers) -> None:
    cp = sub.add_parser("compare", help="paper-style comparison of cache and placement policies")
    cp.add_argument(
        "--workload",
        default="agentic",
        help="'agentic', a preset (single-agent, multi-agent) or a trace file",
    )
    cp.add_argument("--policies", help="comma-separated subset (default: both families)")
    cp.add_argument(
        "--splits",
        default="1/7,2/6,3/5,4/4,8/8*",
        help="HBM/HBF stack splits of the tier comparison (8/8*: HBF behind eight HBM stacks; "
        "kvmodel.studies.presets)",
    )
    cp.add_argument(
        "--model",
        default="llama-4-maverick",
        help="model preset: its KV bytes per token (llama-4-maverick, qwen3-235b-a22b)",
    )
    _scale_arg(cp)
    cp.add_argument("--config", help="engine config TOML for the cache comparison")
    cp.add_argument(
        "--capacity",
        type=number_in(0.0, low_open=True),
        metavar="F",
        help="the cache comparison on one tier of F x the workload's footprint (spec E8: the "
        "most blocks kvtether holds at once on memory that never fills); --paper without "
        "--config defaults to kvmodel.studies.compare.PAPER_CAPACITY",
    )
    cp.add_argument(
        "--slo-ttft",
        type=number_in(0.0, low_open=True),
        metavar="SECONDS",
        help="generate the workload at the session rate whose mean TTFT meets this target on "
        "the node (spec E6: load model; default sessions 40); device-years over the settled "
        "window",
    )
    cp.add_argument(
        "--slo-tpot",
        type=number_in(0.0, low_open=True),
        metavar="SECONDS",
        help="with --slo-ttft: the load must also meet this p99 time per output token (spec "
        "E7: a decode step reads the GPU's share of the weights and its batch's KV)",
    )
    cp.add_argument(
        "--prefill-servers",
        type=int_at_least(1, 1024),
        default=1,
        metavar="N",
        help="prefill servers the requests queue for (spec E5/E6; 1: prefill shares the node, "
        "more: a disaggregated prefill pool, M/G/N in the load model)",
    )
    cp.add_argument(
        "--load-split", help="the split whose node sets the load (default: the first of --splits)"
    )
    cp.add_argument(
        "--paper",
        action="store_true",
        help="per paper claim: the paper's figure, the measured one, the optimum's, and why",
    )
    cp.add_argument("--out", help="directory for plots (PNG)")
    cp.add_argument(
        "--workers",
        type=int_at_least(1, 256),
        help="run the cells on a local Dask cluster of N processes (pip install 'kvmodel[dist]')",
    )
    cp.add_argument("--scheduler", metavar="ADDRESS", help="run the cells on this Dask scheduler")
    cp.add_argument("--quiet", action="store_true", help="no progress bar (drawn only on a TTY)")
    cp.add_argument("--json", action="store_true", help="print every cell as JSON")
    workload_args(cp)
    cp.set_defaults(func=_cmd_compare)


def _cmd_import(args: argparse.Namespace) -> int:
    """Turn logs of real LLM requests into a trace (``kvmodel import openai LOG... -o T``)."""
    from kvmodel.io.importers import import_claude_code, import_openai

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
    if report.untimed:
        print(
            f"  {report.untimed} conversations log no times: their requests are one second "
            "apart from t = 0 (spec R5)",
            file=sys.stderr,
        )
    for w in report.warnings:
        print(f"  skipped: {w}", file=sys.stderr)
    return 0


def add_import(sub: Subparsers) -> None:
    im = sub.add_parser("import", help="import real agent logs as a trace")
    im.add_argument("format", choices=["openai", "claude-code"], help="log format")
    im.add_argument(
        "paths",
        nargs="+",
        help="openai: tau-bench, mini-swe-agent, SWE-agent or request-list JSON files; "
        "claude-code: session .jsonl transcripts (sub-agents read from <session>/subagents/)",
    )
    im.add_argument("-o", "--output", required=True, help="trace file to write")
    im.set_defaults(func=_cmd_import)


def _cmd_stats(args: argparse.Namespace) -> int:
    """``kvmodel stats``: the calibration statistics of traces and generator presets side by
    side; ``--fit BASE`` fits BASE's generator to each trace (spec R8)."""
    from kvmodel.workloads import generate_agentic
    from kvmodel.workloads.fit import fit_generator, unreached
    from kvmodel.workloads.realsets import HALVES, family_trace
    from kvmodel.workloads.stats import render_side_by_side, workload_stats

    presets = [x for x in args.presets.split(",") if x] if args.presets is not None else []
    if bad := [x for x in presets if x not in PRESETS]:
        raise ConfigError(f"unknown preset {bad[0]!r}; presets: {', '.join(PRESETS)}")
    if args.fit is not None and args.fit not in PRESETS:
        raise ConfigError(f"--fit: unknown preset {args.fit!r}; presets: {', '.join(PRESETS)}")
    families = []
    for spec in (x for x in (args.family or "").split(",") if x):
        fam, _, half = spec.partition(":")
        if half and half not in HALVES:
            raise ConfigError(f"--family {spec!r}: the half is one of {', '.join(HALVES)}")
        families.append((spec, fam, half or None))
    if not args.traces and not presets and not families:
        presets = list(PRESETS)
    columns = {}
    fitted = {}
    gaps = {}
    sources: list[tuple[str, Callable[[], Trace]]] = [
        (Path(p).name.removesuffix(".jsonl"), functools.partial(load_trace, p)) for p in args.traces
    ]
    sources += [(spec, functools.partial(family_trace, f, h)) for spec, f, h in families]
    for name, load in sources:
        columns[name] = workload_stats(load())
        if args.fit is not None:
            params, stats = fit_generator(columns[name], PRESETS[args.fit])
            columns[f"fit:{name}"] = stats
            base = attrs.asdict(PRESETS[args.fit])
            fitted[name] = {k: v for k, v in attrs.asdict(params).items() if v != base[k]}
            gaps[name] = unreached(stats, columns[name])
    for p in presets:
        columns[p] = workload_stats(generate_agentic(PRESETS[p]))
    if args.json:
        print(json.dumps({"stats": {k: attrs.asdict(v) for k, v in columns.items()},
                          "fitted": fitted,
                          "unreached": {k: [list(g) for g in v] for k, v in gaps.items()}},
                         indent=2))  # fmt: skip
        return 0
    print(render_side_by_side(columns))
    for name, changed in fitted.items():
        knobs = ", ".join(f"{k}={v}" for k, v in changed.items()) or "the preset as it is"
        print(f"fit:{name} = {args.fit} with {knobs}")
        far = [f"{f} (real {_fmt(b)}, fit {_fmt(a)})" for f, b, a in gaps[name]]
        print(f"fit:{name} cannot reach within 2x: " + ("; ".join(far) if far else "nothing"))
    return 0


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def add_stats(sub: Subparsers) -> None:
    st = sub.add_parser(
        "stats", help="calibration statistics of traces and generator presets, side by side"
    )
    st.add_argument("traces", nargs="*", metavar="TRACE", help="trace files (e.g. imported)")
    st.add_argument(
        "--presets",
        help="comma-separated generator presets to print beside them (default: all, when no "
        "trace is given; none otherwise)",
    )
    st.add_argument(
        "--fit",
        metavar="PRESET",
        help="fit this preset's generator to each trace and print the fit beside it",
    )
    st.add_argument(
        "--family",
        metavar="NAME[:HALF]",
        help="comma-separated real trace families from ../shared/traces (mini-swe-agent, "
        "tau-bench, claude-code), each whole or one half (fit, validation; spec R9)",
    )
    st.add_argument("--json", action="store_true", help="print the statistics as JSON")
    st.set_defaults(func=_cmd_stats)
