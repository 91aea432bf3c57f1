"""Traces as Informal Trace Format (ITF) JSON: the model's states, op by op.

ITF (Apalache ADR-015, also read by Quint and its viewers) is a JSON object ``{"#meta", "vars",
"states"}``: each state a record of the model's variables. :func:`itf_trace` replays a trace under
a policy and records, before the first op and after each one:

==============  ===============================================================================
``action``      the op just applied (``init`` for the first state), its name
``op_index``    its index in the trace (-1 for ``init``)
``t``           its time, as a decimal string (ITF has no fractional numbers)
``contexts``    map context -> record ``open``, ``phase``, ``messages``, ``tokens``, ``valid``
                (blocks of the chain still a prefix of the logical sequence), ``chain`` (the
                materialized chain's keys) and ``sequence`` (the logical sequence: each
                message's ``id``, ``kind``, ``tokens`` and lifecycle ``state``)
``blocks``      map key -> record ``slot``, ``tier``, ``depth``, ``state`` (lifecycle class) and
                ``holders`` (set of contexts) -- the resident blocks
``free``        map tier -> free blocks
``writes``      map tier -> block writes so far
``records``     the op's observation records (spec T4), absent fields dropped
==============  ===============================================================================

:func:`itf_trace` returns the states with plain JSON integers (what the viewer's frames and the
tests read); :func:`dumps_itf` writes them through itf-py, the Apalache/Quint ITF library, as
ITF's consumers read them: every integer ``{"#bigint": "..."}`` (Quint's reader and the Rust
``itf`` crate refuse a bare integer), ``{"#set": ...}`` sorted and ``{"#map": [[k, v], ...]}``.
A checker that found a counterexample adds the violated invariant and its op to ``#meta``. The
schema this output satisfies is ``spec/itf.schema.json``. Deterministic: same inputs, same
bytes. Every state is whole, so the size is states x resident blocks: meant for counterexamples
and short traces (a small ``--config``, ``--vars``, ``--ops``), not for a day of real traffic.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from types import SimpleNamespace
from typing import Any

import itf_py

from kvmodel.config import EngineConfig
from kvmodel.contexts import Context
from kvmodel.engine import Engine
from kvmodel.errors import ConfigError, KVModelError
from kvmodel.ids import BlockId
from kvmodel.io.observations import observation_to_json
from kvmodel.io.trace import Op, op_name
from kvmodel.policy import Policy, resolve_policy

__all__ = [
    "ITF_VARS",
    "block_name",
    "block_record",
    "context_record",
    "dumps_itf",
    "itf_json",
    "itf_trace",
]

#: the variables of every state, in order
ITF_VARS = ("action", "op_index", "t", "contexts", "blocks", "free", "writes", "records")
_ADR = "https://apalache-mc.org/docs/adr/015adr-trace.html"
_SAFE = 2**53


def _value(v: Any) -> Any:
    """A JSON value of a record as an ITF value (None fields are dropped by the caller)."""
    if isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        return v if -_SAFE < v < _SAFE else {"#bigint": str(v)}
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list | tuple):
        return [_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _value(x) for k, x in v.items() if x is not None}
    return str(v)


def context_record(c: Context) -> dict[str, Any]:
    """A context's ITF record (the one definition: ITF states and the viewer's frames read it)."""
    return {
        "open": c.is_open,
        "phase": c.phase.value,
        "messages": len(c),
        "tokens": _value(c.total_tokens),
        "valid": c.valid,
        "chain": [s.key or "" for s in c.materialized],
        "sequence": [
            {"id": m.id, "kind": m.kind.value, "tokens": m.tokens, "state": st.value}
            for m, st in c.message_states()
        ],
    }


def block_name(engine: Engine, bid: BlockId) -> str:
    """A resident block's name in ITF: its key, or ``slot-N`` for a partial tail (no key)."""
    return engine.blocks[bid].spec.key or f"slot-{bid}"


def block_record(engine: Engine, bid: BlockId) -> dict[str, Any]:
    """A resident block's ITF record (one definition, as :func:`context_record`)."""
    b = engine.blocks[bid]
    return {
        "slot": bid,
        "tier": b.tier,
        "depth": b.depth,
        "state": engine.view.block(bid).state.value,
        "holders": {"#set": sorted(b.holders)},
    }


def _state(
    engine: Engine, action: str, index: int, t: float, records: Sequence[Any], names: Set[str]
) -> dict[str, Any]:
    mem = engine.memory
    every: dict[str, Callable[[], Any]] = {
        "action": lambda: action,
        "op_index": lambda: index,
        "t": lambda: repr(float(t)),
        "contexts": lambda: {
            "#map": [[cid, context_record(engine.contexts[cid])] for cid in sorted(engine.contexts)]
        },
        "blocks": lambda: {
            "#map": sorted(
                (
                    [block_name(engine, bid), block_record(engine, bid)]
                    for bid in sorted(engine.blocks)
                ),
                key=lambda kv: str(kv[0]),
            )
        },
        "free": lambda: {"#map": [[tier.name, mem.free_count(tier.name)] for tier in mem.tiers]},
        "writes": lambda: {
            "#map": [[tier.name, _value(mem.writes[tier.name])] for tier in mem.tiers]
        },
        "records": lambda: [_value(observation_to_json(o)) for o in records],
    }
    out: dict[str, Any] = {"#meta": {"index": index + 1}}
    for name in ITF_VARS:
        if name in names:
            out[name] = every[name]()
    return out


def itf_trace(
    ops: Sequence[Op],
    policy: str | Policy,
    config: EngineConfig,
    *,
    meta: Mapping[str, Any] | None = None,
    variables: Sequence[str] | None = None,
    first: int = 0,
    last: int | None = None,
) -> dict[str, Any]:
    """The ITF trace of replaying ``ops`` under ``policy``: a state before the first op and after
    each op applied. An op the model refuses (a bad trace, a policy's protocol error) ends the
    trace there; ``#meta.stopped`` says why. ``meta`` is added to ``#meta`` (a counterexample's
    invariant and op, say).

    ``variables`` keeps only those of :data:`ITF_VARS` (in their order); ``first`` and ``last``
    keep the window of ops ``first..last`` (inclusive; every op is still replayed): its first
    state is the state before op ``first`` (``init`` when ``first`` is 0), then one after each op
    of the window -- still a valid ITF trace, whose initial state is the model's state there.
    """
    names = ITF_VARS if variables is None else tuple(v for v in ITF_VARS if v in variables)
    unknown = sorted(set(variables or ()) - set(ITF_VARS))
    if unknown or not names:
        raise ConfigError(
            f"unknown ITF variable(s) {', '.join(unknown) or '(none given)'}; expected some of "
            + ", ".join(ITF_VARS)
        )
    stop = len(ops) - 1 if last is None else last
    if (first, last) != (0, None) and not 0 <= first <= stop < len(ops):
        raise ConfigError(
            f"expected an op window FIRST:LAST with 0 <= FIRST <= LAST < {len(ops)}, the "
            f"trace's ops (got {first}:{stop})"
        )
    keep = frozenset(names)
    pol = resolve_policy(policy)
    engine: Engine = getattr(pol, "engine_class", Engine)(config, pol)  # an engine mutant's own
    states = []
    if first == 0:
        states.append(_state(engine, "init", -1, ops[0].t if ops else 0.0, (), keep))
    head: dict[str, Any] = {
        "format": "ITF",
        "format-description": _ADR,
        "source": "kvmodel",
        "description": f"kvmodel replay under {engine.policy.name}",
        "policy": engine.policy.name,
    }
    if first > 0 or last is not None:
        head["window"] = [first, stop]
    for i, op in enumerate(ops[: stop + 1]):
        seen = len(engine.log)
        try:
            engine.apply(op)
        except KVModelError as e:
            head["stopped"] = f"op {i} ({op_name(op)}): {e}"
            break
        if i >= first - 1:
            states.append(_state(engine, op_name(op), i, op.t, engine.log.since(seen), keep))
    head.update({k: _value(v) for k, v in (meta or {}).items() if v is not None})
    return {"#meta": head, "vars": list(names), "states": states}


class _SortedSet(frozenset[Any]):
    """A set that itf-py writes in sorted order: same inputs, same bytes (a plain frozenset of
    strings iterates in the order of the run's string hashes)."""

    def __iter__(self) -> Iterator[Any]:
        return iter(sorted(frozenset.__iter__(self), key=repr))


def _python(v: Any) -> Any:
    """A value of :func:`itf_trace`'s states as the Python value itf-py writes: ``#map`` a dict,
    ``#set`` a set, ``#bigint`` an int, a record an object with those attributes."""
    if isinstance(v, dict):
        if "#map" in v:
            return {_python(k): _python(x) for k, x in v["#map"]}
        if "#set" in v:
            return _SortedSet(_python(x) for x in v["#set"])
        if "#bigint" in v:
            return int(v["#bigint"])
        return SimpleNamespace(**{str(k): _python(x) for k, x in v.items()})
    if isinstance(v, list):
        return [_python(x) for x in v]
    return v


def itf_json(itf: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`itf_trace`'s result as ITF's consumers read it, written by itf-py (the Apalache /
    Quint ITF library): every integer ``{"#bigint": "..."}``, maps ``#map`` and sets ``#set``
    (Quint's reader and the Rust ``itf`` crate refuse a bare JSON integer)."""
    out: dict[str, Any] = {"#meta": dict(itf["#meta"]), "vars": list(itf["vars"])}
    states = []
    for s in itf["states"]:
        values = {k: _python(v) for k, v in s.items() if k != "#meta"}
        states.append(itf_py.state_to_json(itf_py.State(meta=dict(s["#meta"]), values=values)))
    out["states"] = states
    return out


def dumps_itf(itf: Mapping[str, Any]) -> str:
    """The ITF JSON text of :func:`itf_trace`'s result, as :func:`itf_json` writes it (keys in
    a fixed order, one trailing newline)."""
    return json.dumps(itf_json(itf), indent=1, ensure_ascii=False) + "\n"
