"""A replay as its first state and one delta per op: what the HTML viewer stores (spec T7).

The viewer once stored every ITF state whole, so a page grew with ops x resident blocks (a
440-op generated trace under the default config: 179 MB). Here each op stores only what it
changed, in terms of the ITF's own records (:func:`kvmodel.io.itf.context_record` and
:func:`~kvmodel.io.itf.block_record`, the one definition of a state), and the page rebuilds
any step in the browser. :func:`decode` rebuilds the ITF states from the frames in Python: the
tests hold the page's decoder (JavaScript, in kvmodel/io/viewer.html) and this one to the ITF
export step for step.

The encoding (``FRAMES_VERSION``)::

    {"v": 2, "K": [block name, ...],      # interned: a block's name is its index in K, packed
             "X": [context id, ...],      # interned, in order of creation
             "L": [class, ...],           # lifecycle classes: a class is its index in L
             "tiers": [[name, blocks], ...],   # a tier is its index here
             "steps": [step, ...]}        # steps[0] is the state before the first op

    step = {"o": op index (-1 for init), "a": action, "t": time as ITF writes it,
            "n": [hits, writes, evictions, reclaims, rejections],   # the op's records, counted
            "e": [[what, class, [slot, ...]], ...],  # evictions, reclaims: runs, in log order
            "f": [free per tier], "w": [writes per tier],
            "c": [[context, {changed fields}], ...],
            "b": [[slot, name, tier, depth, class, [holders]], ...],  # new or changed blocks
            "s": [[class, ranges], ...],     # blocks whose class changed, by new class
            "h": [[context, joined, ranges], ...],  # holders that joined (1) or left (0) blocks
            "d": ranges,                     # slots no longer resident, other than "e"'s
            "g": [[from, to, kind], ...]}    # new fork/spawn/compaction/return edges

A name in ``K`` is packed: a key of lowercase hex (its length a multiple of 6, as every
chain key's is) as the base64url of its bytes, two thirds of its length; any other name behind a
``=`` (no base64url text starts with one). Names are most of a page: one per block written.
``ranges`` are sorted slots as ``[first, count, first, count, ...]``: a phase change reclasses a
whole chain, most often written into consecutive slots. ``what`` is ``evict`` or ``reclaim`` and
``class`` the block's class as it left (its record's). A context's changed fields are its ITF
record's scalars (``open``, ``phase``, ``messages``, ``tokens``, ``valid``) as they now are, and
``chain`` and ``seq`` as ``[keep, [new tail]]`` (the first ``keep`` entries unchanged). A message
of ``seq`` is ``[id, kind, tokens, state]``, ``state`` null when it is the context's phase, so a
phase change (every inference's) does not rewrite the sequence.

Cost: a context is compared with its last state at C speed (its entries, stored states, chain),
and only a changed one is encoded. A block's record can change only with the op's records (what
it wrote, evicted, freed or hit) or with a context that holds it (its holders and class), so an
op looks at the new slots, those its records name and those on the chains (before and after) of
the contexts it changed, and rebuilds one only when its stamp (the residency's version of it and
its holders, which the engine's own feature cache trusts), name or tier changed; on any engine
but the reference (an engine mutant) every block is looked at, every op. Looking at every
resident block every op cost 5.3 s for a 1,104-op trace under the default config; this, 4.5 s
(most of what is left is the classes of chains a phase change reclasses).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kvmodel._engine_view import EngineView
from kvmodel.config import EngineConfig
from kvmodel.contexts import Context
from kvmodel.engine import Engine
from kvmodel.errors import KVModelError
from kvmodel.ids import BlockId, ContextId
from kvmodel.io.itf import ITF_VARS, block_name, block_record, context_record
from kvmodel.io.trace import Op, op_name
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Policy, resolve_policy

__all__ = ["FRAMES_VERSION", "TALLY", "decode", "frames", "pack_name", "tally", "unpack_name"]

FRAMES_VERSION = 2
#: the lifecycle classes, as the frames number them
CLASSES = tuple(c.value for c in BlockClass)
_CLASS = {c: i for i, c in enumerate(CLASSES)}
#: what a step counts of its records, in the order of ``n``
TALLY = ("hit", "alloc", "evict", "reclaim", "reject")


def tally(records: Sequence[Mapping[str, Any]]) -> list[int]:
    """The counts of :data:`TALLY` in observation records (JSON form): a free for a reclaim is
    a reclaim. One definition for the model's records and an implementation's log."""
    n = dict.fromkeys(TALLY, 0)
    for r in records:
        kind = r.get("kind")
        if kind == "free" and r.get("reason") == "reclaim":
            n["reclaim"] += 1
        elif kind in n:
            n[str(kind)] += 1
    return list(n.values())


def _probe(c: Context) -> tuple[Any, ...]:
    """Everything :func:`context_record` reads, compared at C speed (copies of the lists)."""
    return (
        c.is_open,
        c.phase,
        c.valid,
        list(c.entries),
        dict(c.stored),
        list(c.materialized),
    )


_HEX = re.compile(r"(?:[0-9a-f]{6})+")


def pack_name(name: str) -> str:
    """A block name as ``K`` stores it (module docstring)."""
    if _HEX.fullmatch(name):
        return base64.urlsafe_b64encode(bytes.fromhex(name)).decode("ascii")
    return "=" + name


def unpack_name(packed: str) -> str:
    if packed.startswith("="):
        return packed[1:]
    return base64.urlsafe_b64decode(packed).hex()


def _ranges(slots: Sequence[int]) -> list[int]:
    """Sorted ``slots`` as ``[first, count, ...]`` runs."""
    return _runs(sorted(slots))


def _runs(xs: Sequence[int]) -> list[int]:
    """``xs`` in their order as ``[first, count, ...]``: runs of consecutive integers."""
    out: list[int] = []
    for x in xs:
        if out and out[-2] + out[-1] == x:
            out[-1] += 1
        else:
            out += [x, 1]
    return out


def _unranges(runs: Sequence[int]) -> list[int]:
    return [x for i in range(0, len(runs), 2) for x in range(runs[i], runs[i] + runs[i + 1])]


def _tail(old: Sequence[Any], new: Sequence[Any]) -> tuple[int, list[Any]]:
    keep = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        keep += 1
    return keep, list(new[keep:])


class _Encoder:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.names: dict[str, int] = {}
        self.ctx_ids: dict[ContextId, int] = {}
        self.probes: dict[ContextId, tuple[Any, ...]] = {}
        self.records: dict[ContextId, dict[str, Any]] = {}
        self.blocks: dict[BlockId, tuple[int, str, str, list[Any]]] = {}  # stamp, name, tier, row
        self.edges = 0
        self.tiers = [t.name for t in engine.memory.tiers]
        self.tier_index = {t: i for i, t in enumerate(self.tiers)}
        # the shortcuts below read the reference engine's semantics (what changes a record, and
        # the stamps its feature cache trusts): an engine mutant has every block looked at
        self.fast = type(engine) is Engine and type(engine.view) is EngineView
        #: per context, the slots of its chain when last encoded; the slots whose record may
        #: have changed in this op (gathered by :meth:`_contexts` and :meth:`step`)
        self.chain_slots: dict[ContextId, set[BlockId]] = {}
        self.touched: set[BlockId] = set()

    def name(self, key: str) -> int:
        i = self.names.get(key)
        if i is None:
            i = self.names[key] = len(self.names)
        return i

    def ctx(self, cid: ContextId) -> int:
        i = self.ctx_ids.get(cid)
        if i is None:
            i = self.ctx_ids[cid] = len(self.ctx_ids)
        return i

    def _seq(self, rec: Mapping[str, Any], phase: str) -> list[list[Any]]:
        return [
            [m["id"], m["kind"], m["tokens"], None if m["state"] == phase else m["state"]]
            for m in rec["sequence"]
        ]

    def _contexts(self) -> list[list[Any]]:
        out = []
        for cid, c in self.engine.contexts.items():
            probe = _probe(c)
            if self.probes.get(cid) == probe:
                continue
            self.probes[cid] = probe
            # a block's record (class, holders) changes only with a context that holds it
            index, blocks = self.engine.index, self.engine.blocks
            now = {
                b
                for spec in c.materialized
                if spec.key is not None and (b := index.get(spec.key)) is not None and b in blocks
            }
            self.touched |= now
            self.touched |= self.chain_slots.get(cid, set())
            self.chain_slots[cid] = now
            rec = context_record(c)
            rec["chain"] = [self.name(k) for k in rec["chain"]]
            rec["sequence"] = self._seq(rec, rec["phase"])
            old = self.records.get(cid)
            self.records[cid] = rec
            delta: dict[str, Any] = {}
            for k in ("open", "phase", "messages", "tokens", "valid"):
                if old is None or old[k] != rec[k]:
                    delta[k] = rec[k]
            if old is None or old["chain"] != rec["chain"]:
                keep, tail = _tail(() if old is None else old["chain"], rec["chain"])
                delta["chain"] = [keep, _runs(tail)]
            if old is None or old["sequence"] != rec["sequence"]:
                delta["seq"] = list(_tail(() if old is None else old["sequence"], rec["sequence"]))
            if delta:
                out.append([self.ctx(cid), delta])
        return out

    def _blocks(
        self,
    ) -> tuple[
        list[list[Any]], list[list[Any]], dict[int, list[int]], list[list[Any]], list[BlockId]
    ]:
        """Blocks new or changed since the last step -- whole rows, or, for a block one context
        holds at its chain's depth, the context, tier, class and depth in runs (an inference
        writes its blocks at consecutive depths, most often into consecutive slots), or, where
        only the class changed, the slot under its new class (a phase change reclasses a whole
        chain) -- and the slots no longer resident."""
        e = self.engine
        stamp = e.residency.stamp
        changed: list[list[Any]] = []
        on_chain: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        reclassed: dict[int, list[int]] = {}
        joined: dict[tuple[int, int], list[int]] = {}  # (context, joined or left) -> slots
        gone: list[BlockId] = sorted(self.blocks.keys() - e.blocks.keys())
        for bid in gone:
            del self.blocks[bid]
        if self.fast:
            # the blocks an op can have changed: those it wrote, evicted, freed or hit (its
            # records), the new ones, and those of every context it changed (their holders
            # and classes); the test holds the result to the ITF export at every step
            look = sorted((self.touched | (e.blocks.keys() - self.blocks.keys())) & e.blocks.keys())
        else:  # an engine with a view of its own: every block, at every op
            look = sorted(e.blocks)
        self.touched = set()
        for bid in look:
            b = e.blocks[bid]
            s = stamp(b)
            name = block_name(e, bid)
            old = self.blocks.get(bid)
            if (
                self.fast
                and old is not None
                and old[0] == s
                and old[1] == name
                and old[2] == b.tier
            ):
                continue
            rec = block_record(e, bid)
            row = [
                bid,
                self.name(name),
                self.tier_index[rec["tier"]],
                rec["depth"],
                _CLASS[rec["state"]],
                [self.ctx(h) for h in rec["holders"]["#set"]],
            ]
            self.blocks[bid] = (s, name, b.tier, row)
            if old is not None and old[3] == row:
                continue
            if old is not None and old[3][:4] == row[:4]:
                # the same block: its class and holders, each as a change
                if old[3][4] != row[4]:
                    reclassed.setdefault(row[4], []).append(bid)
                if old[3][5] != row[5]:
                    was, now = set(old[3][5]), set(row[5])
                    for x in now - was:
                        joined.setdefault((x, 1), []).append(bid)
                    for x in was - now:
                        joined.setdefault((x, 0), []).append(bid)
                continue
            holders = rec["holders"]["#set"]
            if len(holders) == 1:
                chain = self.records[holders[0]]["chain"]
                depth = rec["depth"]
                if depth < len(chain) and chain[depth] == row[1]:
                    on_chain.setdefault((row[5][0], row[2], row[4]), []).append((depth, bid))
                    continue
            changed.append(row)
        grouped: list[list[Any]] = []
        for (x, tier, cls), pairs in sorted(on_chain.items()):
            pairs.sort()
            start = 0
            for i in range(1, len(pairs) + 1):
                if i == len(pairs) or pairs[i][0] != pairs[i - 1][0] + 1:
                    group = pairs[start:i]
                    grouped.append([x, tier, cls, group[0][0], _runs([b for _, b in group])])
                    start = i
        holders = [[x, j, _ranges(slots)] for (x, j), slots in sorted(joined.items())]
        return changed, grouped, reclassed, holders, gone

    def step(self, action: str, index: int, t: str, records: Sequence[Any]) -> dict[str, Any]:
        from kvmodel.io.observations import observation_to_json

        e = self.engine
        recs = [observation_to_json(o) for o in records]
        left: list[list[Any]] = []
        for r in recs:
            if r["kind"] == "evict" or (r["kind"] == "free" and r["reason"] == "reclaim"):
                what, cls = (
                    str(r["kind"] if r["kind"] == "evict" else "reclaim"),
                    _CLASS[r["state"]],
                )
                if left and left[-1][0] == what and left[-1][1] == cls:
                    left[-1][2].append(r["block"])
                else:
                    left.append([what, cls, [r["block"]]])
        contexts = self._contexts()
        self.touched.update(BlockId(r["block"]) for r in recs if isinstance(r.get("block"), int))
        changed, grouped, reclassed, holders, gone = self._blocks()
        step: dict[str, Any] = {"o": index, "a": action, "t": t, "n": tally(recs)}
        if left:
            step["e"] = left
        step["f"] = [e.memory.free_count(n) for n in self.tiers]
        step["w"] = [e.memory.writes[n] for n in self.tiers]
        if contexts:
            step["c"] = contexts
        if changed:
            step["b"] = changed
        if grouped:
            step["k"] = grouped
        if reclassed:
            step["s"] = [[cls, _ranges(reclassed[cls])] for cls in sorted(reclassed)]
        if holders:
            step["h"] = holders
        left_slots = {x for _, _, slots in left for x in slots}
        gone = [x for x in gone if x not in left_slots]
        if gone:
            step["d"] = _ranges(gone)
        if len(e.edges) > self.edges:
            step["g"] = [[self.ctx(a), self.ctx(b), k] for a, b, k in e.edges[self.edges :]]
            self.edges = len(e.edges)
        return step


def frames(
    ops: Sequence[Op], policy: str | Policy, config: EngineConfig
) -> tuple[dict[str, Any], str]:
    """The frames of replaying ``ops`` under ``policy`` (module docstring) and why the replay
    stopped early ("" if it did not): an op the model refuses ends the frames there, as it ends
    an ITF export."""
    pol = resolve_policy(policy)
    engine: Engine = getattr(pol, "engine_class", Engine)(config, pol)  # an engine mutant's own
    enc = _Encoder(engine)
    steps = [enc.step("init", -1, repr(float(ops[0].t if ops else 0.0)), ())]
    stopped = ""
    for i, op in enumerate(ops):
        seen = len(engine.log)
        try:
            engine.apply(op)
        except KVModelError as err:
            stopped = f"op {i} ({op_name(op)}): {err}"
            break
        steps.append(enc.step(op_name(op), i, repr(float(op.t)), engine.log.since(seen)))
    data = {
        "v": FRAMES_VERSION,
        "policy": engine.policy.name,
        "K": [pack_name(n) for n in enc.names],
        "L": list(CLASSES),
        "X": list(enc.ctx_ids),
        "tiers": [[t.name, t.blocks] for t in config.tiers],
        "steps": steps,
    }
    return data, stopped


def decode(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ITF states (``contexts``, ``blocks``, ``free``, ``writes``, ``action``, ``op_index``,
    ``t``; not ``records``, which frames only count) the frames encode, step by step: the
    Python twin of the page's decoder, which the tests hold to the ITF export."""
    names, ctxs, classes = [unpack_name(k) for k in data["K"]], data["X"], data["L"]
    tiers = [t for t, _ in data["tiers"]]
    contexts: dict[int, dict[str, Any]] = {}
    blocks: dict[int, list[Any]] = {}
    out = []
    for s in data["steps"]:
        for x, delta in s.get("c", ()):
            c = contexts.setdefault(x, {"chain": [], "seq": []})
            for k, v in delta.items():
                if k == "chain":
                    c[k] = c[k][: v[0]] + _unranges(v[1])
                elif k == "seq":
                    c[k] = c[k][: v[0]] + v[1]
                else:
                    c[k] = v
        for slot in [x for _, _, slots in s.get("e", ()) for x in slots] + _unranges(
            s.get("d", ())
        ):
            blocks.pop(slot, None)
        for row in s.get("b", ()):
            blocks[row[0]] = row
        for x, tier, cls, depth, slot_runs in s.get("k", ()):
            chain = contexts[x]["chain"]
            for i, slot in enumerate(_unranges(slot_runs)):
                blocks[slot] = [slot, chain[depth + i], tier, depth + i, cls, [x]]
        for cls, runs in s.get("s", ()):
            for slot in _unranges(runs):
                blocks[slot] = [*blocks[slot][:4], cls, blocks[slot][5]]
        for x, joins, runs in s.get("h", ()):
            for slot in _unranges(runs):
                row = blocks[slot]
                held = sorted({*row[5], x}) if joins else [h for h in row[5] if h != x]
                blocks[slot] = [*row[:5], held]
        state: dict[str, Any] = {
            "action": s["a"],
            "op_index": s["o"],
            "t": s["t"],
            "contexts": {
                "#map": sorted([ctxs[x], _context(c, names)] for x, c in contexts.items())
            },
            "blocks": {
                "#map": sorted(
                    (
                        [
                            names[n],
                            {
                                "slot": slot,
                                "tier": tiers[tier],
                                "depth": depth,
                                "state": classes[cls],
                                "holders": {"#set": sorted(ctxs[h] for h in holders)},
                            },
                        ]
                        for slot, n, tier, depth, cls, holders in blocks.values()
                    ),
                    key=lambda kv: (str(kv[0]), kv[1]["slot"]),
                )
            },
            "free": {"#map": [[t, f] for t, f in zip(tiers, s["f"], strict=True)]},
            "writes": {"#map": [[t, w] for t, w in zip(tiers, s["w"], strict=True)]},
        }
        out.append({k: state[k] for k in ITF_VARS if k in state})
    return out


def _context(c: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {
        "open": c["open"],
        "phase": c["phase"],
        "messages": c["messages"],
        "tokens": c["tokens"],
        "valid": c["valid"],
        "chain": [names[k] for k in c["chain"]],
        "sequence": [
            {"id": i, "kind": k, "tokens": n, "state": st or c["phase"]} for i, k, n, st in c["seq"]
        ],
    }
