"""Validate a policy and find counterexamples: a naive "most recently used first" policy.

MRU everywhere is KVTether's rule applied without its lifecycle states. The checker finds where
that breaks the invariants KVTether relies on, writes a replayable bundle for each violation,
and replays one to show it reproduces. Run: python examples/find_counterexample.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import ClassVar

from checkers.invariants.replay import check_ops
from checkers.search.report import check_policies
from kvmodel import BasePolicy, RankTerm, load_config, load_trace


class NaiveMRU(BasePolicy):
    name: ClassVar[str] = "naive-mru"
    rank: ClassVar[tuple[RankTerm, ...]] = (RankTerm("last_access", descending=True),)


INVARIANTS = ["no-zombie-kv", "state-priority-eviction", "pinned-never-evicted", "accounting"]

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        [report] = check_policies(
            ["find_counterexample:NaiveMRU"], INVARIANTS, profile="dev", out=Path(tmp)
        )
        for inv in INVARIANTS:
            print(f"{inv:<26} {report.verdict(inv)}")
        bundle = report.bundles["state-priority-eviction"]
        trace, config = load_trace(bundle / "trace.jsonl"), load_config(bundle / "config.toml")
        again = check_ops(
            trace.ops,
            "find_counterexample:NaiveMRU",
            config,
            ["state-priority-eviction"],
            stop_at="state-priority-eviction",
        )
        found = report.result.found["state-priority-eviction"]
        print(
            "bundle replays to the same violation:",
            again.first("state-priority-eviction") == found.violation,
        )
        print("counterexample is 1-minimal:", found.one_minimal)
