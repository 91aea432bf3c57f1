"""``kvmodel discover``: search the policy space for a safe policy that beats KVTether and
Lachesis (kvmodel issue 17; the search is :mod:`checkers.discover`, imported when the command
runs: it loads Z3 and Hypothesis)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvmodel.cli.common import Subparsers, atomic_write, int_at_least, output_dir
from kvmodel.errors import ConfigError
from kvmodel.progress import wanted

__all__ = ["add_discover"]


def add_discover(sub: Subparsers) -> None:
    d = sub.add_parser(
        "discover",
        help="search the policy space for a policy proved safe that beats KVTether and Lachesis",
    )
    d.add_argument("--seed", type=int_at_least(0), default=0, help="search seed (default 0)")
    d.add_argument(
        "--budget",
        type=int_at_least(1, 864),
        default=24,
        help="candidates to score on the training cells (default 24 of the space's 864)",
    )
    d.add_argument(
        "--gated",
        type=int_at_least(1, 20),
        default=2,
        help="frontier candidates that must pass the safety gate (default 2)",
    )
    d.add_argument(
        "--profile",
        choices=["dev", "ci"],
        default="dev",
        help="kvmodel check's search size in the gate (default dev)",
    )
    d.add_argument(
        "--cells",
        choices=["default", "small"],
        default="default",
        help="training and test cells: default (8 + 8), or small (1 + 1: a demonstration)",
    )
    d.add_argument(
        "--traces",
        metavar="DIR",
        help="also train and test on the real logs under DIR (the layout of ../shared/traces: "
        "mini-swe-agent and tau-bench train, the last mini-swe-agent log and SWE-agent test)",
    )
    d.add_argument("--workers", type=int_at_least(1, 256), help="a local Dask cluster of N")
    d.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler")
    d.add_argument(
        "--out",
        metavar="DIR",
        help="write discovery.json, the best policy as discovered.py and plots (matplotlib)",
    )
    d.add_argument("--json", action="store_true", help="print the search's result as JSON")
    d.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    d.set_defaults(func=_cmd_discover)


def _cmd_discover(args: argparse.Namespace) -> int:
    """Exit 0 when a candidate passed the gate, 1 when none did."""
    from checkers.discover import (
        SMALL_TEST,
        SMALL_TRAIN,
        TEST,
        TRAIN,
        AnyCell,
        discover,
        provenance,
        real_cells,
    )

    if args.workers and args.scheduler:
        raise ConfigError("--workers and --scheduler exclude each other")
    out = output_dir(args.out) if args.out else None  # (before the work, not after it)
    talk = wanted(args.quiet)
    cells = (TRAIN, TEST) if args.cells == "default" else (SMALL_TRAIN, SMALL_TEST)
    train: tuple[AnyCell, ...] = cells[0]
    test: tuple[AnyCell, ...] = cells[1]
    if args.traces:
        real = real_cells(Path(args.traces))
        if not real[0] or not real[1]:
            raise ConfigError(
                f"{args.traces}: expected mini_swe_agent_gemini3pro/*.traj.json, tau_bench/*.json "
                "or swe_agent_demo/*.traj logs for both training and test (found "
                f"{len(real[0])} training and {len(real[1])} test cells)"
            )
        train, test = (*train, *real[0]), (*test, *real[1])
    d = discover(
        seed=args.seed,
        budget=args.budget,
        gated=args.gated,
        train=train,
        test=test,
        profile=args.profile,
        workers=args.workers,
        scheduler=args.scheduler,
        done=(lambda msg: print(f"discover: {msg}", file=sys.stderr)) if talk else None,
    )
    if out is not None:
        atomic_write(out / "discovery.json", json.dumps(d.to_json(), indent=2) + "\n")
        if d.best is not None:
            atomic_write(out / "discovered.py", d.best.source(provenance(d)))
        d.plot(out)
    print(json.dumps(d.to_json(), indent=2) if args.json else d.render())
    return 0 if d.best is not None else 1
