"""Every fitted preset's comparison beside the same comparison on real sessions the fit never
saw (spec/metrics.md E9, kvmodel/studies/validation.py): per family, the cost of KVTether, MORI
and Belady against LRU at each capacity (one tier of C x the workload's footprint, E8) on the
fitted preset, on the validation half resampled into the preset's tenancy, and on the
validation half's own timestamps; each real row's gap to the preset in percentage points, and
whether the rankings agree (no pair of policies ordered opposite ways; a pair is ordered where
its costs are more than 1% of LRU's apart, and over seeds where every seed orders it alike).
Then the statistics that decide a ranking (R8) for the preset and the two halves side by side.
Asserts nothing.

    python benchmarks/bench_real_validation.py [--families mini-swe-agent,tau-bench,claude-code]
        [--capacity 0.25,0.5] [--sessions N] [--seeds 0] [--quick]

``--ablate``: instead, for each family's preset, the same deltas with each piece of structure
the real logs lack turned back on, one at a time (the first presets had them all): inferences
that take time (an Active phase during decode), reasoning as the hand-set preset writes it
(``reasoning_scale`` 1), a pinned system prompt, forks and temporaries -- what KVTether's gain
on a generated workload needs.

Needs ../shared/traces (or $KVMODEL_SHARED_TRACES). ``--quick``: 4 sessions, tau-bench only,
one capacity (what the test runs). The full run took ~35 min on one core (2026-12-07).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import attrs

from kvmodel.studies.validation import (
    POLICIES,
    Cell,
    cost_cells,
    family_workloads,
    render_validation,
    seed_means,
)
from kvmodel.workloads import PRESETS, generate_agentic
from kvmodel.workloads.realsets import FAMILIES, family_trace, traces_root
from kvmodel.workloads.stats import render_side_by_side, workload_stats

#: (label, knobs): the fitted preset, then each piece of structure the first presets had and
#: the real logs do not, turned back on alone, then all of them
ABLATIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("preset", {}),
    ("+ timed inferences", {"timed_inferences": True}),
    ("+ reasoning x1", {"reasoning_scale": 1.0}),
    ("+ pinned system prompt", {"pin_system": True}),
    ("+ forks and temporaries", {"p_fork": 0.1, "p_temporary": 0.1}),
    # not a piece the first presets had: the real runs' bursts (spec E9), measured beside them
    ("+ arrivals in batches of 4", {"arrival_batch": 4}),
    (
        "+ all four",
        {
            "timed_inferences": True,
            "reasoning_scale": 1.0,
            "pin_system": True,
            "p_fork": 0.1,
            "p_temporary": 0.1,
        },
    ),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--capacity", default="0.25,0.5")
    ap.add_argument("--sessions", type=int, help="default: the family's (24; Claude Code 8)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ablate", action="store_true")
    ap.add_argument(
        "--decode-tpot",
        type=float,
        help="assume every inference takes time: its prompt at the generator's prefill rate and "
        "this many seconds an output token, cut to the gap the log shows (preset and real alike)",
    )
    args = ap.parse_args(argv)
    if traces_root() is None:
        print("no ../shared/traces here (set KVMODEL_SHARED_TRACES): nothing to validate on")
        return 0
    families = args.families.split(",")
    seeds = [int(x) for x in args.seeds.split(",")]
    capacities = tuple(float(c) for c in args.capacity.split(","))
    sessions = args.sessions
    if args.quick:
        families, capacities, sessions = ["tau-bench"], (0.5,), 4
    cells: dict[str, list[Cell]] = {}
    if args.ablate:
        for family in families:
            base = attrs.evolve(
                PRESETS[FAMILIES[family].preset], sessions=sessions or FAMILIES[family].sessions
            )
            for label, knobs in ABLATIONS:
                key = f"{family}: {label}"
                cells[key] = cost_cells(
                    key, generate_agentic(attrs.evolve(base, **knobs)), capacities
                )
                print(key, file=sys.stderr, flush=True)
        print(render_validation(cells, POLICIES))
        return 0
    for family in families:
        for seed in seeds:
            drawn = family_workloads(
                family, sessions=sessions, seed=seed, decode_tpot=args.decode_tpot
            )
            for name, trace in drawn.items():
                if name.endswith("own times") and seed:
                    continue  # (the same trace on every seed)
                t0 = time.perf_counter()
                key = f"{family}: {name}" + (f" (seed {seed})" if seed else "")
                cells[key] = cost_cells(key, trace, capacities)
                print(f"{key}: {len(trace.ops)} ops, {time.perf_counter() - t0:.1f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
    print(render_validation(cells, POLICIES))
    if len(seeds) > 1:
        print(f"\nmean over seeds {args.seeds} (each cost as a share of LRU's):")
        print(render_validation(seed_means(cells), POLICIES))
    for family in families:
        preset = FAMILIES[family].preset
        cols = {
            preset: workload_stats(
                generate_agentic(
                    attrs.evolve(PRESETS[preset], sessions=sessions or FAMILIES[family].sessions)
                )
            ),
            "real fit half": workload_stats(family_trace(family, "fit")),
            "real validation half": workload_stats(family_trace(family, "validation")),
        }
        print(f"\n{family}:")
        print(render_side_by_side(cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
