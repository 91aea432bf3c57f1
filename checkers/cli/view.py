"""``kvmodel view``: a trace op by op as one self-contained HTML page (kvmodel/io/viewer.py),
with the monitor's first violation (``--check``) or the oracle's first divergence from an
implementation's log (``--observations``) highlighted."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from checkers.invariants.registry import invariant_names
from kvmodel.cli.common import Subparsers, atomic_write, engine_config
from kvmodel.errors import ConfigError
from kvmodel.io.trace import load_trace

__all__ = ["add_view"]


def _cmd_view(args: argparse.Namespace) -> int:
    """``kvmodel view``: the page of kvmodel/io/viewer.py; with ``--check``, the first violation the
    monitor finds is announced and its op highlighted."""
    from kvmodel.io.viewer import Finding, viewer_html

    trace = load_trace(args.trace)
    config = engine_config(args.config)
    finding = None
    if args.check is not None:
        from checkers.invariants.replay import check_ops

        names = invariant_names(args.check)
        run = check_ops(trace.ops, args.policy, config, names)
        if run.violations:
            v = run.violations[0]
            finding = Finding(v.op, v.invariant, v.message)
    observed: dict[int, list[dict[str, Any]]] | None = None
    if args.observations:
        from checkers.conformance.oracle import check_log, load_log, rank_policy

        log = load_log(args.observations)
        observed = {}
        for r in log:
            observed.setdefault(int(r["op"]), []).append(r)
        try:
            rank_policy(args.policy)
        except ConfigError:
            pass  # not a rank policy: the counts are shown, no verdict
        else:
            verdict = check_log(trace, log, args.policy, config, shorten=False)
            if verdict.verdict == "ILLEGAL" and finding is None:
                finding = Finding(verdict.op, "oracle", verdict.reason)
    title = f"{Path(args.trace).name} under {args.policy}"
    page = viewer_html(
        trace.ops, args.policy, config, finding=finding, title=title, observed=observed
    )
    atomic_write(Path(args.output), page)
    print(
        f"{len(trace.ops)} ops -> {args.output}"
        + (f"; {finding.invariant} violated at op {finding.op}" if finding else ""),
        file=sys.stderr,
    )
    return 0


def add_view(sub: Subparsers) -> None:
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
    vw.add_argument("-o", "--output", required=True, metavar="OUT.html", help="page to write")
    vw.set_defaults(func=_cmd_view)
