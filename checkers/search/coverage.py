"""What a search exercised, so that a quiet run is never mistaken for a clean one.

Every finished run (a machine example, a random walk, a lockstep trace) is summarised by
:func:`run_coverage` from its observation log: evictions by block class, rejections, spills to a
lower tier, reclaims, temporaries, bypasses, worn tiers, dead blocks left resident -- and, for a
checked run, the evictions each eviction-order invariant constrained (the Monitor's count). A
:class:`SearchStats` adds the runs up, prints the coverage line, and names the invariants whose
trigger never happened (no eviction at all: the eviction-order invariants were not put to the
test).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import attrs

from checkers.invariants import SITUATIONS
from checkers.invariants.monitor import Monitor
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.io.observations import (
    AllocObs,
    BypassObs,
    CopyObs,
    DropCopyObs,
    EvictObs,
    FreeObs,
    FreeReason,
    InferObs,
    LoadObs,
    Observation,
    RejectObs,
)
from kvmodel.io.trace import OP_NAMES, Op, Pin, op_name
from kvmodel.lifecycle import BlockClass

__all__ = [
    "TARGETS",
    "TRIGGERS",
    "WITNESS_POLICIES",
    "SearchStats",
    "Witnesses",
    "at_deadlines",
    "count_records",
    "run_coverage",
]

#: an invariant -> the coverage counter without which it was never put to the test: read from
#: the one table of the situations each invariant constrains (checkers.invariants.SITUATIONS)
TRIGGERS: dict[str, str] = {name: counter for name, (counter, _) in SITUATIONS.items()}

#: short names of the eviction-order invariants in the coverage line
_SHORT = {
    "no-live-eviction-before-dead-reclaim": "dead-first",
    "state-priority-eviction": "priority",
    "suspended-mru": "mru",
}

#: the counters a machine example maximises (Hypothesis ``target``): pressure
TARGETS = ("evictions", "rejections", "spills", "dead resident")

#: counters that runs combine by their maximum, not their sum
MAXIMA = frozenset(
    {"widest choice", "largest prompt", "longest chain", "latest clock", "most open"}
)


def at_deadlines(ops: Iterable[Op]) -> int:
    """The ops of a run that fall exactly on the deadline of an earlier TTL pin of the run: the
    only ops at which a pin that ends late (or early) differs from one that ends on time."""
    deadlines: set[float] = set()
    n = 0
    for op in ops:
        n += op.t in deadlines
        if isinstance(op, Pin) and (d := op.deadline) is not None:
            deadlines.add(d)
    return n


def count_records(cov: Counter[str], first_tier: str, records: Iterable[Observation]) -> None:
    """Add what ``records`` (an op's, or a whole log) show to ``cov`` (one definition for a
    whole log and a log read op by op); ``first_tier``: the engine's fastest tier (a write
    elsewhere is a spill)."""
    for r in records:
        if isinstance(r, EvictObs):
            cov["evictions"] += 1
            cov[f"evict:{r.state.value}"] += 1
        elif isinstance(r, RejectObs):
            cov["rejections"] += 1
        elif isinstance(r, BypassObs):
            cov["bypasses"] += 1
        elif isinstance(r, AllocObs):
            cov["spills"] += r.tier != first_tier
            cov["temporaries"] += r.state is BlockClass.TEMPORARY
            if r.depth >= cov["longest chain"]:
                cov["longest chain"] = r.depth + 1  # (blocks written down to this depth)
        elif isinstance(r, FreeObs) and r.reason == FreeReason.RECLAIM:
            cov["reclaims"] += 1
        elif isinstance(r, InferObs) and r.prompt_tokens > cov["largest prompt"]:
            cov["largest prompt"] = r.prompt_tokens  # (what a policy reading sizes saw)
        elif isinstance(r, CopyObs):  # the movement layer's decisions (spec/movement.md)
            cov["demotions" if r.reason == "demote" else "offloads"] += 1
            cov[f"copy:{r.result}"] += 1
        elif isinstance(r, LoadObs):
            cov["loads"] += 1
        elif isinstance(r, DropCopyObs):
            cov["copies dropped"] += 1


def run_coverage(
    engine: Engine,
    ops: Sequence[Op],
    seconds_bound: float = 5.0,
    records: Counter[str] | None = None,
) -> Counter[str]:
    """What one finished run of ``ops`` exercised, from its observation log and memory.
    ``records``: the log's counts, already taken op by op with :func:`count_records` (a run
    whose log was forgotten as it went)."""
    cov: Counter[str] = Counter()
    cov["at deadlines"] = at_deadlines(ops)
    if records is None:
        count_records(cov, engine.memory.names[0], engine.log)
    else:
        cov.update(records)
        # (the maxima were counted as maxima: an update adds, and each appears once here)
    st = engine.stats
    seconds = (st.t_last or 0.0) - (st.t_first or 0.0)
    cov["latest clock"] = int(st.t_last or 0.0)  # (whole seconds: what a clock rule saw)
    for t in engine.memory.tiers:
        years = engine.memory.device_years(t.name, seconds)
        if years is not None and years < seconds_bound:
            cov["worn tiers"] += 1
    cov["dead resident"] = len(engine.dead)
    # blocks that died: reclaimed, evicted Dead, or Dead and resident now
    cov["died"] = cov["reclaims"] + cov["evict:dead"] + cov["dead resident"]
    cov["tiers>1"] = len(engine.memory.tiers) > 1
    cov["moving runs"] = engine.movement is not None
    if isinstance(engine.probe, Monitor):  # a checked run: the evictions each order constrained
        for name, n in engine.probe.contested.items():
            cov[f"contested:{name}"] += n
        cov["widest choice"] = engine.probe.widest_choice
        cov["most open"] = engine.probe.most_open
    return cov


#: the policies whose searches show what an exhaustive search's fragment can make, beside the
#: policy's own: one that keeps every block until evicted (LRU: Dead KV beside evictions) and one
#: that reclaims and bypasses (KVTether: reclaims, temporaries)
WITNESS_POLICIES = ("lru", "kvtether")


@attrs.define
class Witnesses:
    """What an exhaustive search saw of the situations its invariants constrain
    (:data:`~checkers.invariants.SITUATIONS`), over every state it reached: a proof that an
    invariant holds is vacuous where its situation never arose, and says so. Also the largest
    magnitudes the searched runs took (chain length, contexts open at once) -- what a ``place``
    written as code may read beyond."""

    invariants: tuple[str, ...]
    seen: set[str] = attrs.field(factory=set)
    most: Counter[str] = attrs.field(factory=Counter)

    def add(self, engine: Engine) -> None:
        """One state reached: its run's coverage, as far as it is still news."""
        needed = self.needed() - self.seen
        cov = run_coverage(engine, ())
        self.seen |= {c for c in needed if cov[c]}
        for k in ("longest chain", "most open"):
            self.most[k] = max(self.most[k], cov[k])

    def needed(self) -> set[str]:
        return {SITUATIONS[n][0] for n in self.invariants if n in SITUATIONS}

    def missing_any(self) -> str | None:
        """Some invariant whose situation no state reached, or None."""
        return next((n for n in self.invariants if self.missing(n) is not None), None)

    def missing(self, invariant: str) -> str | None:
        """The situation ``invariant`` constrains that no state reached, or None."""
        sit = SITUATIONS.get(invariant)
        return sit[1] if sit is not None and sit[0] not in self.seen else None

    def magnitudes(self) -> str:
        return (
            f"chains of up to {self.most['longest chain']} blocks, up to "
            f"{self.most['most open']} contexts open at once"
        )


@attrs.define
class SearchStats:
    #: Hypothesis machine (or trace-strategy) examples and the rules they fired
    examples: int = 0
    steps: int = 0
    rules: Counter[str] = attrs.field(factory=Counter)
    #: random walks (:mod:`checkers.search.walk`)
    walks: int = 0
    #: trace ops applied, by kind, over every run of either search
    ops: Counter[str] = attrs.field(factory=Counter)
    #: which rules the machine has (empty for a trace-level search)
    rule_names: tuple[str, ...] = ()
    #: the ops and engine of the run with the most evictions (the longest among those):
    #: replayed for the determinism check, so the run with the most decisions to make
    sample: list[Op] = attrs.field(factory=list)
    sample_config: EngineConfig | None = None
    sample_evictions: int = 0
    #: what the runs exercised, summed (see :func:`run_coverage`)
    coverage: Counter[str] = attrs.field(factory=Counter)
    #: invariant -> seconds from the search's start to its first violation (before shrinking)
    found_after: dict[str, float] = attrs.field(factory=dict)
    #: random traces on which the engine was compared with the contract (engine-contract)
    contract_traces: int = 0

    def keep_sample(self, ops: Sequence[Op], config: EngineConfig, evictions: int = 0) -> None:
        """Keep ``ops`` as the determinism check's sample if its run evicted more than the
        sample's (a policy's nondeterminism shows in its choices: a run with none cannot show a
        tie broken two ways), or as many and it is longer."""
        if (evictions, len(ops)) > (self.sample_evictions, len(self.sample)):
            self.sample = list(ops)
            self.sample_config = config
            self.sample_evictions = evictions

    def count_ops(self, ops: Iterable[Op]) -> None:
        self.ops.update(op_name(op) for op in ops)

    def add(self, cov: Counter[str]) -> None:
        self._combine(cov)
        self.coverage["runs"] += 1

    def _combine(self, cov: Counter[str]) -> None:
        for k, n in cov.items():
            self.coverage[k] = max(self.coverage[k], n) if k in MAXIMA else self.coverage[k] + n

    def observe(
        self, engine: Engine, ops: Sequence[Op], records: Counter[str] | None = None
    ) -> Counter[str]:
        """Add one finished run of ``ops``; return its own counts (the machine targets them).
        ``records``: its log's counts, taken as it went (see :func:`run_coverage`)."""
        cov = run_coverage(engine, ops, records=records)
        self.add(cov)
        return cov

    def merge(self, other: SearchStats) -> None:
        self.examples += other.examples
        self.steps += other.steps
        self.walks += other.walks
        self.rules.update(other.rules)
        self.ops.update(other.ops)
        self._combine(other.coverage)
        if other.sample_config is not None:
            self.keep_sample(other.sample, other.sample_config, other.sample_evictions)

    def coverage_line(self) -> str:
        keys = ("evictions", "rejections", "spills", "reclaims", "temporaries", "bypasses")
        parts = [f"{k} {self.coverage[k]}" for k in keys]
        by_class = ", ".join(
            f"{k.split(':')[1]} {n}" for k, n in sorted(self.coverage.items()) if k[:6] == "evict:"
        )
        contested = ", ".join(
            f"{_SHORT.get(name, name)} {n}"
            for k, n in sorted(self.coverage.items())
            if (name := k.removeprefix("contested:")) != k
        )
        inner = [by_class] if by_class else []
        if contested:  # how many of them each eviction-order invariant constrained
            inner.append(f"constraining {contested}")
        parts[0] += f" ({'; '.join(inner)})" if inner else ""
        if self.coverage["widest choice"]:  # (a checked run's, read from its monitor)
            parts[0] += f", the widest choosing among {self.coverage['widest choice']} blocks"
        # the magnitudes a policy's thresholds read, as far as the runs took them: a rule past
        # one of these was never put to the test
        parts.append(
            f"prompts of up to {self.coverage['largest prompt']:,} tokens, chains of up to "
            f"{self.coverage['longest chain']:,} blocks, a clock of up to "
            f"{self.coverage['latest clock']:,} s"
        )
        if self.coverage["most open"]:  # (a checked run's, read from its monitor)
            parts[-1] += f", up to {self.coverage['most open']} contexts open at once"
        parts += [f"forks {self.ops['fork']}", f"pins {self.ops['pin']}"]
        parts[-1] += f" ({self.coverage['at deadlines']} ops at a TTL deadline)"
        parts.append(f"worn tiers {self.coverage['worn tiers']}")
        parts.append(f"multi-tier runs {self.coverage['tiers>1']}/{self.coverage['runs']}")
        if self.coverage["moving runs"]:  # a policy that moves KV: how much moved
            c = self.coverage
            parts.append(
                f"moves: demotions {c['demotions']}, offloads {c['offloads']} (copies written "
                f"{c['copy:written']}, renewed {c['copy:held']}, no room {c['copy:no-room']}), "
                f"loads {c['loads']}, copies dropped {c['copies dropped']}"
            )
        return "coverage: " + ", ".join(parts)

    def unexercised(self, invariants: Iterable[str]) -> list[str]:
        """Warnings: checked invariants whose trigger never happened in any run (a quiet
        result there is not evidence)."""
        out = []
        for inv in invariants:
            need = TRIGGERS.get(inv)
            if need is not None and not self.coverage[need]:
                what = f"{need.replace('evict:', 'eviction of ')}"
                if need.startswith("contested:"):
                    what = "eviction it constrained (each chose among blocks it does not order)"
                elif need == "died":
                    what = "block died (became Dead)"
                out.append(f"{inv} never exercised: no {what}")
        if self.coverage["moving runs"] and not self.coverage["loads"]:
            out.append("moves never exercised: no load read a copy back (spec/movement.md MV4)")
        return out

    def never_fired(self) -> list[str]:
        """Machine rules that never fired and trace ops never applied (``op:NAME``)."""
        rules = sorted(set(self.rule_names) - {r for r, n in self.rules.items() if n})
        ops = sorted(set(OP_NAMES) - {o for o, n in self.ops.items() if n})
        return rules + [f"op:{o}" for o in ops]
