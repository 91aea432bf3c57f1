"""``kvmodel oracle`` (is an implementation's observation log one the reference allows?) and
``kvmodel kv-events`` (a vLLM KV-event log, checked for what a partial log can show)."""

from __future__ import annotations

import argparse
import json

import attrs

from checkers.invariants.registry import invariant_names
from kvmodel.cli import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED
from kvmodel.cli.common import Subparsers, engine_config
from kvmodel.errors import ConfigError, TraceError
from kvmodel.io.trace import load_trace
from kvmodel.policy import STRUCTURAL_CLAIMS
from kvmodel.progress import bar, wanted

__all__ = ["add_kv_events", "add_oracle"]


def _cmd_oracle(args: argparse.Namespace) -> int:
    """Log conformance: is IMPL_LOG a behaviour the reference allows on TRACE?"""
    from checkers.conformance.adapters import refuse_undeclared
    from checkers.conformance.oracle import check_log, check_log_invariants
    from checkers.conformance.oracle_log import LogStream

    if args.invariant and not args.invariants_only:
        raise ConfigError("--invariant goes with --invariants-only (--policy judges by the rank)")
    if (args.keep_going or args.allow) and args.invariants_only:
        raise ConfigError(
            "--keep-going and --allow go with --policy (invariants-only mode follows every op)"
        )
    trace = load_trace(args.trace)
    if args.implements is not None:
        # an op the implementation never implemented cannot be judged from its log: refused
        # by name (exit 2), never compared as though the implementation had ignored it
        refuse_undeclared(trace, args.implements.split(","), file=args.trace)
    config = engine_config(args.config)
    names = invariant_names(args.invariant, default=sorted(STRUCTURAL_CLAIMS))
    log = LogStream(args.log)  # read op by op: the judge holds what the log describes
    # progress over the trace's ops (a terminal only; a divergence's shortening is not counted)
    with bar(len(trace.ops), "oracle", on=wanted(args.quiet)) as done:

        def tick() -> None:
            done("judged")

        if args.invariants_only:
            verdict = check_log_invariants(
                trace, log, config, names, complete=args.complete, tick=tick
            )
        else:
            verdict = check_log(
                trace,
                log,
                args.policy,
                config,
                complete=args.complete,
                keep_going=args.keep_going,
                allow=args.allow.split(",") if args.allow else (),
                tick=tick,
            )
    if args.json:
        print(json.dumps(attrs.asdict(verdict), indent=2))
    else:
        print(verdict.render())
    return {"OK": EXIT_OK, "ILLEGAL": EXIT_FAILED}.get(verdict.verdict, EXIT_UNDECIDED)


def add_oracle(sub: Subparsers) -> None:
    orc = sub.add_parser("oracle", help="check an implementation's log against the reference")
    orc.add_argument("trace", help="the trace the implementation ran (JSONL)")
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
    orc.add_argument(
        "--implements",
        metavar="OP[,...]",
        help="the ops (and trace features, e.g. output-hash) the implementation implements: a "
        "trace with any other is refused, naming the op (default: it implements every op)",
    )
    orc.add_argument("--json", action="store_true", help="print the verdict as JSON")
    orc.add_argument("--quiet", action="store_true", help="no progress bar (drawn only on a TTY)")
    orc.set_defaults(func=_cmd_oracle)


def _cmd_kv_events(args: argparse.Namespace) -> int:
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


def add_kv_events(sub: Subparsers) -> None:
    ke = sub.add_parser("kv-events", help="check a vLLM KV-event log (a partial log)")
    ke.add_argument("log", help="JSONL of BlockStored/BlockRemoved/AllBlocksCleared events")
    ke.add_argument("--json", action="store_true", help="print the verdict as JSON")
    ke.set_defaults(func=_cmd_kv_events)
