"""Wall time of a `kvmodel compare` sweep, serial versus a 2-worker Dask LocalCluster, and that
both give the same bytes. Prints figures; asserts nothing else.

    python benchmarks/bench_sweep.py [--sessions 8] [--workers 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time

from kvmodel.cli import main as cli


def _run(argv: list[str]) -> tuple[float, str]:
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli(argv)
    if code != 0:
        raise SystemExit(f"kvmodel {' '.join(argv)} exited {code}")
    return time.perf_counter() - t0, out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    argv = ["compare", "--sessions", str(a.sessions), "--json"]
    serial_s, serial = _run(argv)
    dist_s, dist = _run([*argv, "--workers", str(a.workers)])
    print(f"kvmodel compare, multi-agent preset, {a.sessions} sessions (every default cell):")
    print(f"  serial            {serial_s:7.1f} s")
    print(f"  {a.workers} Dask workers    {dist_s:7.1f} s  ({serial_s / dist_s:.2f}x; "
          f"cluster start-up included)")  # fmt: skip
    print(f"  same output: {serial == dist}")


if __name__ == "__main__":
    main()
