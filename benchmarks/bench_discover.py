"""`kvmodel discover` as a benchmark (issue 17 item 5): per seed, how long the search, the gate
and the held-out evaluation took, what passed the gate, and how far the best candidate is from
the goal (beat KVTether on task cost and Lachesis on HBF writes on the test cells, within 10%
of the offline optima on hit rate and HBF writes). Prints figures; asserts nothing.

    python benchmarks/bench_discover.py [--budget 24] [--seeds 0,1] [--cells default|small]
                                        [--workers N]
"""

from __future__ import annotations

import argparse
import time

from checkers.discover import SMALL_TEST, SMALL_TRAIN, TEST, TRAIN, discover


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--budget", type=int, default=24)
    ap.add_argument("--gated", type=int, default=2)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--cells", choices=["default", "small"], default="default")
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args(argv)
    train, test = (TRAIN, TEST) if a.cells == "default" else (SMALL_TRAIN, SMALL_TEST)
    for seed in (int(s) for s in a.seeds.split(",")):
        t0 = time.perf_counter()
        d = discover(
            seed=seed, budget=a.budget, gated=a.gated, train=train, test=test, workers=a.workers
        )
        dt = time.perf_counter() - t0
        passed = [g.candidate.name for g in d.gates if g.passed]
        dropped = [f"{g.candidate.name} ({g.reason})" for g in d.gates if not g.passed]
        print(f"seed {seed}: {len(d.scores)} scored, frontier {len(d.frontier)}, "
              f"{len(d.gates)} gated in {dt:.1f} s")  # fmt: skip
        print(f"  passed: {', '.join(passed) or 'none'}")
        print(f"  dropped: {', '.join(dropped) or 'none'}")
        if d.best is not None:
            rows = d.test_table()
            for p in ("kvtether", "lachesis", "tether-lachesis", d.best.path):
                r = rows[p]
                print(f"  {p.split(':')[-1]:<50} cost/kvtether {r['cost_vs_kvtether']:.3f}  "
                      f"hbf-writes/lachesis {r['hbf_writes_vs_lachesis']:.3f}  "
                      f"hit/Belady {r['hit_rate_share_of_belady']:.1%}  "
                      f"hbf-writes/OPT {r['hbf_writes_vs_opt']:.2f}")  # fmt: skip
        ok, why = d.goal()
        print(f"  goal: {'met' if ok else 'not met: ' + why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
