"""The CLI's commands that show or scale a run: view (an HTML page), export-itf, sweep (on Dask).

Split from :mod:`kvmodel.cli` (the composition root: the argument parser and ``main`` stay there)
as :mod:`kvmodel._cli_study` holds the study commands.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kvmodel._cli_common import atomic_write, engine_config, invariant_names
from kvmodel.errors import ConfigError
from kvmodel.policy import resolve_policy
from kvmodel.progress import bar, wanted
from kvmodel.trace import load_trace

__all__ = ["cmd_export_itf", "cmd_sweep", "cmd_view"]


def cmd_sweep(args: argparse.Namespace) -> int:
    """``kvmodel sweep``: every (policy, workload, capacity, seed) cell an independent task
    (kvmodel.sweep); a table of the main metrics, or every metric as JSON."""
    from kvmodel.sweep import run_tasks, sweep_cell
    from kvmodel.workloads import PRESETS

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


def cmd_export_itf(args: argparse.Namespace) -> int:
    """The trace's states, op by op, as ITF (kvmodel/itf.py); written whole or not at all."""
    from kvmodel.itf import dumps_itf, itf_trace

    trace = load_trace(args.trace)
    itf = itf_trace(trace.ops, args.policy, engine_config(args.config))
    atomic_write(Path(args.output), dumps_itf(itf))
    stopped = itf["#meta"].get("stopped")
    print(
        f"{len(itf['states'])} states -> {args.output}"
        + (f" (stopped: {stopped})" if stopped else ""),
        file=sys.stderr,
    )
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    """``kvmodel view``: the page of kvmodel/viewer.py; with ``--check``, the first violation the
    monitor finds is announced and its op highlighted."""
    from kvmodel.viewer import Finding, viewer_html

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
