"""The policies package's commands, plugged into ``kvmodel`` as any package's would be (the
``kvmodel.commands`` entry points): ``kvmodel lachesis fit|cv``, Lachesis's spawn-signal
predictor (policies/spawn_predictor.py). The model's command line never imports a policy."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import attrs

from kvmodel.cli.common import Subparsers, int_at_least, number_in
from kvmodel.io.trace import load_trace
from policies.spawn_predictor import WorkerSample

__all__ = ["add_lachesis"]


def _lachesis_samples(paths: Sequence[str]) -> list[WorkerSample]:
    from policies.spawn_predictor import default_training_traces, samples_from

    traces = [load_trace(p) for p in paths] if paths else default_training_traces()
    return samples_from(traces)


def _cmd_lachesis_fit(args: argparse.Namespace) -> int:
    from policies.spawn_predictor import DEFAULT_TRAINING, SpawnPredictor

    samples = _lachesis_samples(args.traces)
    model = SpawnPredictor.fit(samples, ridge=args.ridge or DEFAULT_TRAINING["ridge"])
    model.save(args.out)
    print(
        f"fitted on {len(samples)} workers from "
        f"{len({s.session for s in samples})} sessions; weights written to {args.out}"
    )
    return 0


def _cmd_lachesis_cv(args: argparse.Namespace) -> int:
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


def add_lachesis(sub: Subparsers) -> None:
    la = sub.add_parser("lachesis", help="Lachesis's spawn-signal predictor: fit, cross-validate")
    lsub = la.add_subparsers(dest="lachesis_command", required=True, help="what to do")
    lf = lsub.add_parser("fit", help="fit ridge weights (default: the documented training set)")
    lf.add_argument("traces", nargs="*", help="trace files (default: built-in training traces)")
    lf.add_argument("--out", required=True, help="weights JSON to write")
    lf.add_argument("--ridge", type=number_in(0.0), help="ridge penalty (default 1.0)")
    lf.set_defaults(func=_cmd_lachesis_fit)
    lc = lsub.add_parser("cv", help="grouped k-fold CV: Kendall tau and 10%% selection shares")
    lc.add_argument("traces", nargs="*", help="trace files (default: built-in training traces)")
    lc.add_argument("--folds", type=int_at_least(2), default=5, help="folds (default 5)")
    lc.add_argument(
        "--select",
        type=number_in(0.0, 1.0, low_open=True),
        default=0.1,
        help="share of workers chosen, shortest-predicted first (default 0.1)",
    )
    lc.add_argument("--json", action="store_true", help="print the scores as JSON")
    lc.set_defaults(func=_cmd_lachesis_cv)
