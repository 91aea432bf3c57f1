"""Oracle throughput, and vLLM's real block pool beside `vllm-prefix` on the same trace.
Prints figures; asserts nothing.

    python benchmarks/bench_oracle.py [--sessions 8]
"""

from __future__ import annotations

import argparse
import time

from checkers.conformance.lockstep import EngineImplementation, run_lockstep
from checkers.conformance.oracle import check_log, check_log_invariants
from checkers.conformance.vllm_pool import (
    VLLMBlockPool,
    VLLMUnavailableError,
    fetch_sources,
    load_block_pool,
    vllm_comparable,
)
from kvmodel import EngineConfig, TierConfig
from kvmodel.ids import TierName
from kvmodel.io.observations import observation_to_json
from kvmodel.policy import STRUCTURAL_CLAIMS
from kvmodel.replay import replay
from kvmodel.workloads import AgenticParams, generate_agentic


def _rate(n: int, dt: float) -> str:
    return f"{n / dt:9.0f} ops/s  ({n} ops, {dt:.2f} s)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=8)
    a = ap.parse_args()
    trace = vllm_comparable(generate_agentic(AgenticParams(seed=1, sessions=a.sessions, turns=4)))
    n = len(trace.ops)
    two = EngineConfig(16, (TierConfig(TierName("hbm"), 256), TierConfig(TierName("hbf"), 512)))
    print(f"agentic trace, {a.sessions} sessions, {n} ops, 256 HBM + 512 HBF blocks of 16 tokens")
    for policy in ("lru", "vllm-prefix", "kvtether", "lachesis-det"):
        log = [observation_to_json(o) for o in replay(trace, policy, two).engine.log]
        t0 = time.perf_counter()
        v = check_log(trace, log, policy, two)
        dt = time.perf_counter() - t0
        print(f"  oracle --policy {policy:<13} {_rate(n, dt)}  {v.verdict}")
    log = [observation_to_json(o) for o in replay(trace, "lru", two).engine.log]
    t0 = time.perf_counter()
    v = check_log_invariants(trace, log, two, sorted(STRUCTURAL_CLAIMS))
    print(f"  oracle --invariants-only      {_rate(n, time.perf_counter() - t0)}  {v.verdict}")
    t0 = time.perf_counter()
    v = run_lockstep(trace, lambda c: EngineImplementation("kvtether", c), "kvtether", two)
    print(f"  lockstep, kvtether vs itself  {_rate(n, time.perf_counter() - t0)}  {v.verdict}")

    one = EngineConfig(16, (TierConfig(TierName("hbm"), 256),))
    try:
        mods = load_block_pool(fetch_sources())
    except VLLMUnavailableError as e:
        print(f"vLLM block pool: skipped ({e})")
        return
    print("same trace, one 256-block pool:")
    t0 = time.perf_counter()
    replay(trace, "vllm-prefix", one)
    print(f"  kvmodel vllm-prefix replay    {_rate(n, time.perf_counter() - t0)}")
    pool = VLLMBlockPool(one, mods)
    t0 = time.perf_counter()
    for i, op in enumerate(trace.ops):
        pool.apply(i, op)
    print(f"  vLLM BlockPool (+ adapter)    {_rate(n, time.perf_counter() - t0)}")
    t0 = time.perf_counter()
    v = run_lockstep(trace, lambda c: VLLMBlockPool(c, mods), "vllm-prefix", one)
    print(f"  lockstep, vLLM vs reference   {_rate(n, time.perf_counter() - t0)}  {v.verdict}")


if __name__ == "__main__":
    main()
