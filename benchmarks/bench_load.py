"""The load model (spec E6) at two scales: the same node (split 2/6, Llama-4-Maverick, TTFT
target 2 s) simulated as a 0.05 and a 0.1 slice, sessions in proportion. If scale is a slice
and not a regime, the node's sustainable rate, its concurrency and the settled device-years
agree between the two up to the discreteness of few sessions. Prints figures; asserts nothing.

    python benchmarks/bench_load.py
    python benchmarks/bench_load.py --cases 0.2:160    # a larger slice (about 15 min)
"""

from __future__ import annotations

import argparse
import time

import attrs

from kvmodel.replay import replay
from kvmodel.studies.load import decode_batch, find_load, tpot_p99
from kvmodel.studies.metrics import Timing, compute_metrics
from kvmodel.studies.presets import decode_node, hardware_config
from kvmodel.workloads.agentic import PRESETS

CASES = ((0.05, 40), (0.1, 80))
POLICIES = ("hbm-first", "lachesis-det", "lachesis")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="two tiny slices (the test's run)")
    ap.add_argument(
        "--cases",
        nargs="+",
        metavar="SCALE:SESSIONS",
        help="slices to run instead of the default 0.05:40 0.1:80",
    )
    ap.add_argument("--slo-tpot", type=float, help="also meet this p99 TPOT (spec E7)")
    a = ap.parse_args(argv)
    cases: tuple[tuple[float, int], ...] = ((0.01, 4), (0.02, 8)) if a.quick else CASES
    if a.cases:
        cases = tuple((float(c.split(":")[0]), int(c.split(":")[1])) for c in a.cases)
    print(
        "scale  sessions  node sessions/h  node concurrency  utilisation   "
        + "  ".join(f"{p} years" for p in POLICIES)
        + "   p99 TPOT ms  seconds"
    )
    for scale, sessions in cases:
        t0 = time.perf_counter()
        node = hardware_config("2/6", "llama-4-maverick", scale=scale)
        params = attrs.evolve(PRESETS["multi-agent"], sessions=sessions)
        decode = decode_node("llama-4-maverick")
        load, trace = find_load(
            params,
            node,
            slo_ttft_s=2.0,
            scale=scale,
            slo_tpot_s=a.slo_tpot,
            decode=None if a.slo_tpot is None else decode,
        )
        p99 = tpot_p99(decode_batch(trace, Timing().tpot_s), decode, scale=scale,
                       window=load.window)  # fmt: skip
        years = []
        for p in POLICIES:
            m = compute_metrics(replay(trace, p, node), window=load.window)
            y = m.device_years_settled.get("hbf")
            years.append(f"{y:>{len(p) + 6}.2f}" if y else f"{'-':>{len(p) + 6}}")
        print(
            f"{scale:<7}{sessions:>8}{load.sessions_per_s * 3600:>17.0f}"
            f"{load.concurrency / scale:>18.0f}{load.utilisation:>13.0%}   "
            + "  ".join(years)
            + (f"{p99 * 1000:>14.1f}" if p99 is not None else f"{'-':>14}")
            + f"{time.perf_counter() - t0:>9.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
