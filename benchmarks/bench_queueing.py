"""TTFT with and without queueing for prefill (spec E4, E5): KVTether against LRU on the
multi-agent preset (seed 0, one HBM tier of 16-token blocks), as load grows. Prints figures;
asserts nothing.

    python benchmarks/bench_queueing.py
"""

from __future__ import annotations

import attrs

from kvmodel import EngineConfig, TierConfig
from kvmodel.ids import TierName
from kvmodel.replay import replay
from kvmodel.studies.metrics import compute_metrics
from kvmodel.workloads.agentic import PRESETS, generate_agentic

CASES = ((24, 30.0, 512), (24, 30.0, 1024), (24, 30.0, 2048), (96, 30.0, 4096), (96, 5.0, 4096))


def main() -> int:
    print(
        "sessions  gap s  blocks   TTFT ms lru/kvtether (E4)   queued mean (E5)   queued p99"
        "   kvtether vs lru: E4     E5   E5 p99"
    )
    for sessions, gap, blocks in CASES:
        params = attrs.evolve(PRESETS["multi-agent"], sessions=sessions, session_gap_s=gap)
        trace = generate_agentic(params)
        config = EngineConfig(16, (TierConfig(TierName("hbm"), blocks),))
        lru, kvt = (compute_metrics(replay(trace, p, config)) for p in ("lru", "kvtether"))
        print(
            f"{sessions:>8} {gap:>6g} {blocks:>7}"
            f"   {lru.ttft_s_mean * 1e3:>9.0f} {kvt.ttft_s_mean * 1e3:>9.0f}"
            f"   {lru.queued_ttft_s_mean * 1e3:>7.0f} {kvt.queued_ttft_s_mean * 1e3:>7.0f}"
            f"   {lru.queued_ttft_s_p99 * 1e3:>5.0f} {kvt.queued_ttft_s_p99 * 1e3:>5.0f}"
            f"   {kvt.ttft_s_mean / lru.ttft_s_mean - 1:>+17.1%}"
            f" {kvt.queued_ttft_s_mean / lru.queued_ttft_s_mean - 1:>+6.1%}"
            f" {kvt.queued_ttft_s_p99 / lru.queued_ttft_s_p99 - 1:>+7.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
