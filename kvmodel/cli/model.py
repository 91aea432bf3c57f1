"""The model's own commands: replay, export-itf, policies, generate, demo (entry points of the
``kvmodel.commands`` group, as every command is; ``replay --check`` is added by the checkers)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from kvmodel.cli.common import (
    Subparsers,
    agentic_from,
    atomic_write,
    atomic_writer,
    engine_config,
    int_at_least,
    number_in,
    workload_args,
)
from kvmodel.config import EngineConfig, default_config
from kvmodel.engine import Engine
from kvmodel.errors import ConfigError, PolicyNotFoundError
from kvmodel.io.itf import ITF_VARS
from kvmodel.io.trace import Op, Trace, iter_trace_lines, load_trace
from kvmodel.policy import claimed_invariants, registered_policies, resolve_policy
from kvmodel.replay import Summary, replay

__all__ = ["add_demo", "add_export_itf", "add_generate", "add_policies", "add_replay"]


def _cmd_replay(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    config = engine_config(args.config)
    checked: Callable[[argparse.Namespace, Trace, EngineConfig], int] | None = getattr(
        args, "checked", None
    )
    if checked is not None and args.check is not None:  # ``--check``, added by the checkers
        return checked(args, trace, config)
    if getattr(args, "skip", ()):  # (the checkers' --skip names passes of --check)
        raise ConfigError("--skip names passes of --check: give --check too")
    if not args.observations:  # the records are built only to be written: the summary needs none
        result = replay(trace, args.policy, config, observe=False)
    else:
        # written op by op and forgotten (a long trace's log is never held whole); the file
        # appears only when the whole replay succeeded (atomic_writer), never half-written
        with atomic_writer(Path(args.observations)) as out:

            def write(engine: Engine, i: int, op: Op) -> None:
                out.write(engine.log.to_jsonl())
                engine.log.forget()

            result = replay(trace, args.policy, config, after_op=write)
    _print_summary(result.summary, as_json=args.json)
    return 0


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


def add_replay(sub: Subparsers) -> None:
    r = sub.add_parser("replay", help="replay a trace under a policy")
    r.add_argument("trace", help="trace file (JSONL, spec/trace-format.md)")
    r.add_argument("--policy", default="lru", help="policy name or package.module:Name")
    r.add_argument("--config", help="engine config TOML (default: hbm 512 + hbf 4096 blocks)")
    r.add_argument("--observations", metavar="OUT.jsonl", help="write the observation log")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.set_defaults(func=_cmd_replay)


def _cmd_export_itf(args: argparse.Namespace) -> int:
    """The trace's states, op by op, as ITF (kvmodel/io/itf.py); written whole or not at all."""
    from kvmodel.io.itf import dumps_itf, itf_trace

    trace = load_trace(args.trace)
    variables = None if args.vars is None else [v.strip() for v in args.vars.split(",") if v]
    first, last = (None, None) if args.ops is None else args.ops
    itf = itf_trace(
        trace.ops,
        args.policy,
        engine_config(args.config),
        variables=variables,
        first=first or 0,
        last=last,
    )
    atomic_write(Path(args.output), dumps_itf(itf))
    stopped = itf["#meta"].get("stopped")
    print(
        f"{len(itf['states'])} states -> {args.output}"
        + (f" (stopped: {stopped})" if stopped else ""),
        file=sys.stderr,
    )
    return 0


def add_export_itf(sub: Subparsers) -> None:
    ex = sub.add_parser(
        "export-itf", help="a trace's states under a policy as ITF JSON (Apalache ADR-015)"
    )
    ex.add_argument("trace", help="trace file (JSONL, spec/trace-format.md)")
    ex.add_argument("--policy", default="lru", help="policy name or package.module:Name")
    ex.add_argument("--config", help="engine config TOML (default: hbm 512 + hbf 4096 blocks)")
    ex.add_argument(
        "--vars",
        metavar="VAR,...",
        help="only these variables (default: all of " + ", ".join(ITF_VARS) + ")",
    )
    ex.add_argument(
        "--ops",
        type=_op_window,
        metavar="FIRST:LAST",
        help="only the states of ops FIRST..LAST (inclusive; either may be omitted), after the "
        "state before FIRST -- every op is still replayed, and the output is valid ITF",
    )
    ex.add_argument(
        "-o", "--output", required=True, metavar="OUT.itf.json", help="ITF file to write"
    )
    ex.set_defaults(func=_cmd_export_itf)


def _op_window(text: str) -> tuple[int | None, int | None]:
    """``FIRST:LAST`` (either may be empty) as two op indices."""
    first, sep, last = text.partition(":")
    try:
        if not sep:
            raise ValueError
        lo = int(first) if first.strip() else None
        hi = int(last) if last.strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected FIRST:LAST op indices, either omitted (got {text!r})"
        ) from None
    if (lo is not None and lo < 0) or (lo is not None and hi is not None and hi < lo):
        raise argparse.ArgumentTypeError(f"expected 0 <= FIRST <= LAST (got {text!r})")
    return lo, hi


def _cmd_policies(args: argparse.Namespace) -> int:
    rows = []
    for name, path in registered_policies().items():
        try:
            p = resolve_policy(name)
            claims = sorted(claimed_invariants(p))
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


def add_policies(sub: Subparsers) -> None:
    pol = sub.add_parser("policies", help="list registered policies and their claims")
    pol.add_argument("--json", action="store_true", help="print the registry as JSON")
    pol.set_defaults(func=_cmd_policies)


def _cmd_generate(args: argparse.Namespace) -> int:
    if args.random_ops is not None:
        from kvmodel.workloads import RandomParams, random_trace

        if args.random_ops < 1:
            raise ConfigError(f"--random-ops must be >= 1 (got {args.random_ops})")
        # every op kind (replace, unpin, partial forks, temporaries, ...), not agent-shaped
        trace = random_trace(RandomParams(seed=args.seed, ops=args.random_ops))
    elif args.from_traces:
        from kvmodel.workloads.resample import ResampleParams, resample_sessions

        p = ResampleParams(args.seed, args.sessions, args.session_gap, args.arrival_batch)
        trace = resample_sessions(
            [load_trace(f) for f in args.from_traces], p, [Path(f).name for f in args.from_traces]
        )
        batches = f" in batches of {p.arrival_batch}" if p.arrival_batch > 1 else ""
        print(
            f"{trace.header.meta['sessions']} sessions resampled from "
            f"{trace.header.meta['pool_sessions']} real sessions, Poisson arrivals{batches} "
            f"every {args.session_gap:g} s on average; {len(trace.ops)} ops",
            file=sys.stderr,
        )
    else:
        trace = agentic_from(args)
    text = "".join(line + "\n" for line in iter_trace_lines(trace))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        atomic_write(Path(args.output), text)
    return 0


def add_generate(sub: Subparsers) -> None:
    g = sub.add_parser("generate", help="write a generated agent workload trace")
    workload_args(g)
    g.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    g.add_argument(
        "--random-ops",
        type=int_at_least(1),
        metavar="N",
        help="instead of an agent workload, N random valid ops over every op kind "
        "(replace, unpin, partial forks, temporaries, ...): the fuzzing and checking generator",
    )
    g.add_argument(
        "--from-traces",
        nargs="+",
        metavar="TRACE",
        help="instead of generating, resample the sessions of imported real traces "
        "(kvmodel import output) into a multi-tenant workload: --sessions copies (default: "
        "one per session), Poisson arrivals, each copy sharing only the fixed prefix",
    )
    g.add_argument(
        "--session-gap",
        type=number_in(0.0, low_open=True),
        default=30.0,
        metavar="S",
        help="with --from-traces: mean seconds between arrivals (default 30)",
    )
    g.add_argument(
        "--arrival-batch",
        type=int_at_least(1, 10_000),
        default=1,
        metavar="K",
        help="with --from-traces: sessions arrive K at a time, a millisecond apart, at the "
        "Poisson arrivals' mean rate, as runs launched by a pool of workers do (default 1)",
    )
    g.set_defaults(func=_cmd_generate)


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


def add_demo(sub: Subparsers) -> None:
    d = sub.add_parser("demo", help="compare built-in policies on a generated agent workload")
    workload_args(d)
    d.add_argument("--policies", help="comma-separated policy names (default: all registered)")
    d.add_argument("--config", help="engine config TOML (default: hbm 256 + hbf 1024 blocks)")
    d.add_argument("--json", action="store_true", help="print the comparison as JSON")
    d.set_defaults(func=_cmd_demo)
