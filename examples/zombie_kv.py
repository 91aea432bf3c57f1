"""Zombie KV after a compaction: LRU keeps the dead history resident, KVTether reclaims it.

A main context holds a system prompt and a long history; a one-shot compactor reads it and writes a
summary; the main context replaces its history by that summary. Run: python examples/zombie_kv.py
"""

from __future__ import annotations

import json

from kvmodel import EngineConfig, TierConfig, parse_trace_lines, replay
from kvmodel.ids import TierName


def m(mid: str, tokens: int, kind: str, role: str = "user") -> dict[str, object]:
    return {"id": mid, "role": role, "kind": kind, "tokens": tokens}


history = [
    m("sys", 64, "system", "system"),
    m("u1", 48, "user"),
    m("r1", 96, "reasoning", "assistant"),
    m("obs1", 160, "observation", "tool"),
]
ops = [
    {"op": "open", "t": 0, "ctx": "main", "session": "s", "agent": "main"},
    {"op": "append", "t": 0, "ctx": "main", "messages": history},
    {"op": "infer", "t": 1, "ctx": "main", "output": [], "duration": 2},
    {
        "op": "open",
        "t": 5,
        "ctx": "compact",
        "session": "s",
        "agent": "compactor",
        "parent": "main",
        "one_shot": True,
    },
    {"op": "append", "t": 5, "ctx": "compact", "messages": [*history, m("how", 32, "instruction")]},
    {"op": "infer", "t": 5, "ctx": "compact", "output": [m("sum", 48, "summary", "assistant")]},
    {"op": "remove", "t": 9, "ctx": "main", "index": 1, "count": 3},
    {"op": "append", "t": 9, "ctx": "main", "messages": [m("sum", 48, "summary")]},
    {"op": "infer", "t": 10, "ctx": "main", "output": [], "duration": 1},
    {"op": "end_session", "t": 70, "session": "s"},
]
trace = parse_trace_lines([json.dumps(o) for o in ops], source="zombie_kv")
config = EngineConfig(16, (TierConfig(TierName("hbm"), 64),))

if __name__ == "__main__":
    for policy in ("lru", "kvtether"):
        r = replay(trace, policy, config)
        print(
            f"{policy:<9} dead blocks max {r.summary.dead_resident_max:>3}, "
            f"at end {r.summary.dead_resident_final:>3}; "
            f"zombie block-seconds {r.summary.zombie_block_seconds:>7.1f}; "
            f"frees {r.summary.frees['hbm']}"
        )
