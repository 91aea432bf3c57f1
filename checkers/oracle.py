"""Log conformance: is an implementation's observation log one the reference policy allows?

The implementation logs what it did on a trace in the observation-log schema
(spec/trace-format.md T4; blocks are compared by hash-chain ``key``, slot ids are its own).
The oracle replays the trace in the reference engine under the named policy and compares, op by
op, the decisions: hits, writes (with tier), bypasses, reclaims, rejections -- and evictions,
**nondeterminism-aware**: at each eviction the policy's rule admits every candidate tied with
the best on the rank key (all terms but the final id tie-break); the implementation's victim
must lie in that set, and the reference then *follows* the implementation's choice, so that one
legal tie-break does not make every later record differ.

Verdicts: ``OK``; ``ILLEGAL`` with the first divergent op, what the reference allowed and what
the implementation did, and the resident state just before; ``UNKNOWN`` when the log cannot
decide (it ends before the trace does, or names ops the trace does not have).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import ConfigError, TraceError
from kvmodel.ids import BlockId
from kvmodel.jsonl import read_jsonl
from kvmodel.observations import observation_to_json
from kvmodel.policy import BasePolicy, Placement, Policy, rank_key, resolve_policy
from kvmodel.trace import Op, Trace
from kvmodel.view import BlockInfo, ModelView, NewBlock

__all__ = ["OracleVerdict", "check_log", "load_log"]


@attrs.frozen
class OracleVerdict:
    verdict: str  # OK | ILLEGAL | UNKNOWN
    op: int | None = None
    reason: str = ""
    expected: tuple[str, ...] = ()
    got: tuple[str, ...] = ()
    state_before: tuple[str, ...] = ()

    def render(self) -> str:
        lines = [
            f"{self.verdict}"
            + (f" at op {self.op}" if self.op is not None else "")
            + (f": {self.reason}" if self.reason else "")
        ]
        if self.expected or self.got:
            lines.append("  reference allows: " + "; ".join(self.expected))
            lines.append("  implementation:   " + "; ".join(self.got))
        if self.state_before:
            lines.append("  resident before the op:")
            lines += [f"    {s}" for s in self.state_before]
        return "\n".join(lines)


def load_log(path: str | Path) -> list[dict[str, Any]]:
    out = []
    for n, rec in read_jsonl(path, "implementation log"):
        if (
            not isinstance(rec, dict)
            or not isinstance(rec.get("op"), int)
            or not isinstance(rec.get("kind"), str)
        ):
            raise TraceError(
                "expected an observation record with integer 'op' and 'kind'",
                file=str(path),
                line=n,
                field="op",
            )
        out.append(rec)
    return out


def _decisions(records: Iterable[dict[str, Any]]) -> dict[int, list[str]]:
    """Per op, the comparable decisions (eviction victims are checked separately)."""
    out: dict[int, list[str]] = defaultdict(list)
    for r in records:
        k = r["kind"]
        if k == "hit":
            out[r["op"]].append(f"hit {r.get('key')}")
        elif k == "alloc":
            out[r["op"]].append(f"write {r.get('key')} in {r.get('tier')}")
        elif k == "bypass":
            out[r["op"]].append(f"bypass {r.get('key')}")
        elif k == "free" and r.get("reason") == "reclaim":
            out[r["op"]].append(f"reclaim {r.get('key')}")
        elif k == "reject":
            out[r["op"]].append("reject")
    return {op: sorted(v) for op, v in out.items()}


class _Follow(BasePolicy):
    """The reference policy, steered at evictions by the implementation's admissible choices."""

    name: ClassVar[str] = "oracle-follow"

    def __init__(self, inner: BasePolicy, victims: dict[int, list[str]]) -> None:
        self.inner = inner
        self.victims = {op: list(v) for op, v in victims.items()}
        self.illegal: tuple[int, str, tuple[str, ...], str] | None = None

    @property
    def claims(self) -> frozenset[str]:  # type: ignore[override]
        return self.inner.claims

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return self.inner.place(view, block)

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        return self.inner.on_op(view, op)

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        op = view.now_op
        wanted = self.victims.get(op) or []
        keyed = sorted(candidates, key=lambda b: rank_key(self.inner.rank, b))
        for key in list(wanted):
            keyed = [b for b in keyed if view.evictable(b.id)]
            if self.illegal is not None or not keyed:
                break
            best = rank_key(self.inner.rank, keyed[0])[:-1]
            admissible = [b for b in keyed if rank_key(self.inner.rank, b)[:-1] == best]
            pick = next((b for b in admissible if b.key == key), None)
            if pick is None:
                self.illegal = (
                    op,
                    "eviction outside the admissible set",
                    tuple(f"evict {b.key} ({b.state.value})" for b in admissible),
                    f"evict {key}",
                )
                break
            wanted.remove(key)
            keyed.remove(pick)
            yield pick.id
        yield from (b.id for b in keyed)


def _state(engine: Engine) -> tuple[str, ...]:
    v = engine.view
    return tuple(
        f"{b.key} depth {b.depth} {b.state.value} in {b.tier}"
        for b in (v.block(x) for x in v.resident())
    )


def check_log(
    trace: Trace, log: Sequence[dict[str, Any]], policy: str | Policy, config: EngineConfig
) -> OracleVerdict:
    inner = resolve_policy(policy)
    if (
        not isinstance(inner, BasePolicy)
        or not inner.rank
        or type(inner).eviction_order is not BasePolicy.eviction_order
    ):
        raise ConfigError(
            f"policy {inner.name!r} has no declarative rank: the oracle needs one "
            "to know which victims its rule admits"
        )
    n_ops = len(trace.ops)
    if any(r["op"] >= n_ops for r in log):
        return OracleVerdict("UNKNOWN", reason="the log names ops the trace does not have")
    victims: dict[int, list[str]] = defaultdict(list)
    for r in log:
        if r["kind"] == "evict":
            victims[r["op"]].append(str(r.get("key")))
    got = _decisions(log)
    follow = _Follow(inner, victims)
    engine = Engine(config, follow)
    last_logged = max((r["op"] for r in log), default=-1)
    for i, op in enumerate(trace.ops):
        before = _state(engine)
        seen = len(engine.log)
        engine.apply(op)
        if follow.illegal is not None:
            at, why, allowed, did = follow.illegal
            return OracleVerdict("ILLEGAL", at, why, allowed, (did,), before)
        mine = _decisions(observation_to_json(o) for o in engine.log.since(seen)).get(i, [])
        theirs = got.get(i, [])
        if i >= last_logged and mine != theirs:
            # the log's last op may be cut short: that is a truncated log, not a verdict
            return OracleVerdict("UNKNOWN", i, "the log ends before the trace does")
        if mine != theirs:
            return OracleVerdict(
                "ILLEGAL", i, "decisions differ", tuple(mine), tuple(theirs), before
            )
        left = victims.get(i, [])
        if left and not any(o.kind == "evict" for o in engine.log.since(seen)):
            return OracleVerdict(
                "ILLEGAL",
                i,
                "eviction the reference did not need",
                (),
                tuple(f"evict {k}" for k in left),
                before,
            )
    return OracleVerdict("OK")
