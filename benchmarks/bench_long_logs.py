"""Judging long logs (issue 61): each command's CPU time and peak memory on one workload.
Prints figures; asserts nothing.

    python benchmarks/bench_long_logs.py                  # issue 18's 60 x 40 workload
    python benchmarks/bench_long_logs.py --no-check       # without replay --check (minutes)
    python benchmarks/bench_long_logs.py --sessions 2 --rounds 3 --fork-depth 50   # a smoke run

The workload is bench_vs_vllm.py's: agent sessions taking turns, block size 16, 5,999 blocks
in one tier, replayed under vllm-prefix. Each command runs in a process of its own and is
measured there (CPU seconds, user + system, and peak resident memory): ``kvmodel replay`` with
and without ``--observations``, ``kvmodel oracle --policy vllm-prefix`` on that log, and
``kvmodel replay --check`` (with and without its optional passes, ``--skip``). Then a chain of
forks ``--fork-depth`` deep (each context forked from the last, one 16-token message appended
to each) is replayed, at the depth asked and a quarter of it, with and without an inference
after each append: forks share their source's messages (spec P5, cost), so without inferences
the cost is linear in the depth; with them each fork attaches the shared chain's blocks (one
holder more on each, B4), O(depth) per fork.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from kvmodel.io.trace import dump_trace, parse_trace_lines

#: run in each measured process: the command line, then its rusage as the last stderr line
_RUN = """
import json, resource, sys
from kvmodel.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
u = resource.getrusage(resource.RUSAGE_SELF)
print("RUSAGE " + json.dumps([u.ru_utime + u.ru_stime, u.ru_maxrss, rc]), file=sys.stderr)
"""


def measure(argv: list[str]) -> tuple[float, float, object]:
    """CPU seconds, peak MB and exit status of ``kvmodel ARGV`` in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, check=False
    )
    last = [ln for ln in done.stderr.splitlines() if ln.startswith("RUSAGE ")]
    if not last:
        raise RuntimeError(f"kvmodel {' '.join(argv)} failed: {done.stderr[-2000:]}")
    cpu, kib, rc = json.loads(last[-1][len("RUSAGE ") :])
    return float(cpu), kib / 1024, rc


def fork_chain(depth: int, *, infer: bool = False) -> list[str]:
    """A chain of ``depth`` forks, each context forked from the last and given one message (and
    an inference after it, with ``infer``)."""
    lines = [
        json.dumps({"op": "open", "t": 0, "ctx": "c0", "session": "s", "agent": "main"}),
        json.dumps({"op": "append", "t": 0, "ctx": "c0",
                    "messages": [{"id": "m0", "role": "user", "kind": "user", "tokens": 16}]}),
    ]  # fmt: skip
    for i in range(1, depth + 1):
        lines.append(json.dumps({"op": "fork", "t": i, "ctx": f"c{i}", "src": f"c{i - 1}"}))
        msg = {"id": f"m{i}", "role": "user", "kind": "user", "tokens": 16}
        lines.append(json.dumps({"op": "append", "t": i, "ctx": f"c{i}", "messages": [msg]}))
        if infer:
            lines.append(json.dumps({"op": "infer", "t": i, "ctx": f"c{i}", "output": []}))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--no-check", action="store_true", help="skip replay --check")
    ap.add_argument("--fork-depth", type=int, default=20000)
    ap.add_argument("--fork-infer-depth", type=int, default=2000, help="the chain with inferences")
    args = ap.parse_args(argv)
    spec = importlib.util.spec_from_file_location(
        "bench_vs_vllm", Path(__file__).with_name("bench_vs_vllm.py")
    )
    assert spec is not None
    assert spec.loader is not None
    bv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bv)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        trace, cfg, log = d / "t.jsonl", d / "c.toml", d / "log.jsonl"
        tr = bv.agent_rounds(args.sessions, args.rounds, 0)
        dump_trace(tr, trace)
        cfg.write_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 5999\n')
        base = [str(trace), "--config", str(cfg), "--policy", "vllm-prefix"]
        rows: list[tuple[str, list[str]]] = [
            ("replay", ["replay", *base]),
            ("replay --observations", ["replay", *base, "--observations", str(log)]),
            ("oracle --policy", ["oracle", str(trace), str(log), "--config", str(cfg),
                                 "--policy", "vllm-prefix"]),
        ]  # fmt: skip
        if not args.no_check:
            rows.append(("replay --check", ["replay", *base, "--check", "--quiet"]))
            skip = ["--skip", "nondeterminism,ample-contract"]
            rows.append(("replay --check --skip", ["replay", *base, "--check", "--quiet", *skip]))
        print(f"{args.sessions} sessions x {args.rounds} rounds: {len(tr.ops):,} ops, vllm-prefix,")
        print("5,999 blocks of 16 tokens; each command in its own process")
        print(f"  {'command':<24} {'CPU s':>8} {'peak MB':>8}  exit")
        for name, cmd in rows:
            cpu, mb, rc = measure(cmd)
            extra = f"  (log {log.stat().st_size / 1e6:.0f} MB)" if name.endswith("vations") else ""
            print(f"  {name:<24} {cpu:>8.1f} {mb:>8.0f}  {rc}{extra}")
        print("fork chains (replay, default config):")
        for infer, top in ((False, args.fork_depth), (True, args.fork_infer_depth)):
            for depth in (top // 4, top):
                chain = d / f"fork{depth}{'i' if infer else ''}.jsonl"
                dump_trace(parse_trace_lines(fork_chain(depth, infer=infer)), chain)
                cpu, mb, rc = measure(["replay", str(chain)])
                what = "deep, an inference each" if infer else "deep"
                print(f"  {depth:>6,} {what:<24} {cpu:>8.1f} CPU s {mb:>8.0f} peak MB  exit {rc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
