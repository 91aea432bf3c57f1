"""Every fitted preset's comparison beside the same comparison on real sessions the fit never
saw (spec/metrics.md E9).

For each trace family (:data:`kvmodel.workloads.realsets.FAMILIES`): the cache comparison of
``kvmodel compare --capacity C`` (one tier of C x the workload's footprint, spec E8), cost of
each policy against LRU's, at each capacity, on three workloads --

* ``preset``: the family's fitted preset (fitted to the fit half only), ``sessions`` sessions;
* ``validation, resampled``: the validation half's real sessions resampled into the same number
  of sessions arriving at the preset's own mean gap (R7): the same tenancy as the preset, the
  real sessions' structure;
* ``validation, own times``: the validation half replayed on its own timestamps (R5), where
  the log has them (tau-bench logs none: its times are made up, so no such row).

The gap between the preset's delta and the real ones is the claim a preset's figure cannot make
on its own. Rankings: the policies ordered by cost, two costs within :data:`TIE` of LRU's
counted as a tie (a difference smaller than that is below what a fit can promise); over several
draws, a pair is ordered only where every draw orders it the same way (:func:`orders`). Two
rankings agree when neither orders a pair the other orders the opposite way (:func:`opposed`):
the magnitudes are the gaps' to judge, the ranking says only which way each pair goes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from kvmodel.io.trace import Trace
from kvmodel.studies.compare import capacity_config, measure
from kvmodel.workloads.agentic import PRESETS, generate_agentic
from kvmodel.workloads.decode import with_inference_time
from kvmodel.workloads.realsets import FAMILIES, family_trace
from kvmodel.workloads.resample import ResampleParams, resample_sessions
from kvmodel.workloads.retime import with_waits_of

__all__ = [
    "CAPACITIES",
    "POLICIES",
    "TIE",
    "Cell",
    "cost_cells",
    "family_workloads",
    "opposed",
    "orders",
    "ranking",
    "render_validation",
    "seed_means",
]

CAPACITIES: tuple[float, ...] = (0.25, 0.5)
POLICIES: tuple[str, ...] = ("lru", "kvtether", "mori", "belady")
#: two policies whose costs differ by less than this share of LRU's are tied in a ranking
TIE = 0.01


@attrs.frozen
class Cell:
    """One workload at one capacity: each policy's cost in USD (spec E1-E3)."""

    workload: str
    capacity: float
    blocks: int
    cost: Mapping[str, float]
    #: a seed mean's draws (:func:`seed_means`): each draw's cost of every policy as a share of
    #: LRU's; empty for one draw
    draws: tuple[Mapping[str, float], ...] = ()

    def delta(self, policy: str) -> float:
        """The policy's cost against LRU's (-0.3: 30% cheaper)."""
        return self.cost[policy] / self.cost["lru"] - 1.0


def ranking(cell: Cell) -> tuple[frozenset[str], ...]:
    """The policies by cost, cheapest first, in tie groups: a policy joins the group before it
    when its cost is within :data:`TIE` x LRU's cost of that group's cheapest."""
    order = sorted(cell.cost, key=lambda p: (cell.cost[p], p))
    groups: list[set[str]] = []
    lead = 0.0
    for p in order:
        if groups and cell.cost[p] - lead <= TIE * cell.cost["lru"]:
            groups[-1].add(p)
        else:
            groups.append({p})
            lead = cell.cost[p]
    return tuple(frozenset(g) for g in groups)


def orders(cell: Cell) -> frozenset[tuple[str, str]]:
    """The pairs ``(a, b)`` the cell shows ``a`` cheaper than ``b``: by more than :data:`TIE`
    of LRU's cost and, for a seed mean, in every one of its draws -- a pair the draws order
    both ways is not ordered, whatever their mean (one seed's arrivals move a policy's cost by
    several points: E9)."""
    share = {p: cell.cost[p] / cell.cost["lru"] for p in cell.cost}
    return frozenset(
        (a, b)
        for a in share
        for b in share
        if share[b] - share[a] > TIE and all(d[a] < d[b] for d in cell.draws)
    )


def opposed(one: Cell, other: Cell) -> list[tuple[str, str]]:
    """The pairs ``one`` orders ``(a, b)`` that ``other`` orders ``(b, a)``, sorted: empty when
    the two rankings agree (a pair ordered on one side and tied on the other agrees)."""
    theirs = orders(other)
    return sorted((a, b) for a, b in orders(one) if (b, a) in theirs)


def cost_cells(
    name: str,
    trace: Trace,
    capacities: Sequence[float] = CAPACITIES,
    policies: Sequence[str] = POLICIES,
) -> list[Cell]:
    """The comparison on ``trace``, one :class:`Cell` per capacity."""
    out = []
    for c in capacities:
        cfg, (_, _, blocks) = capacity_config(trace, c)
        cost = {p: measure(trace, p, cfg).cost_usd for p in policies}
        out.append(Cell(name, c, blocks, cost))
    return out


def family_workloads(
    family: str, *, sessions: int | None = None, seed: int = 0, decode_tpot: float | None = None
) -> dict[str, Trace]:
    """The three workloads of the module docstring for ``family`` (one draw: ``seed``), of
    ``sessions`` sessions (default: the family's). ``decode_tpot``: under the assumption that
    every inference takes time -- its prompt at the generator's prefill rate and this many
    seconds an output token, cut to the gap the log shows -- on both sides: the preset with
    timed inferences at that rate, the real sessions through
    :func:`~kvmodel.workloads.decode.with_inference_time` (E9, "decode time")."""
    fam = FAMILIES[family]
    sessions = fam.sessions if sessions is None else sessions
    preset = attrs.evolve(PRESETS[fam.preset], sessions=sessions, seed=seed)
    # an untimed family's sessions take the preset's clock: neither side's times are measured,
    # so the two then differ in what the logs record alone (E9, "untimed families")
    real = with_waits_of(family_trace(family, "validation"), preset, seed=seed)
    if decode_tpot is not None:
        preset = attrs.evolve(preset, timed_inferences=True, tpot_s=decode_tpot)
        real = with_inference_time(real, tpot_s=decode_tpot)
    out = {
        "preset": generate_agentic(preset),
        "validation, resampled": resample_sessions(
            [real],
            ResampleParams(
                seed=seed,
                sessions=sessions,
                session_gap_s=preset.session_gap_s,
                arrival_batch=preset.arrival_batch,
            ),
            (f"{family}/validation",),
        ),
    }

    if "retimed" not in real.header.meta:
        out["validation, own times"] = real
    return out


def render_validation(cells: Mapping[str, Sequence[Cell]], policies: Sequence[str]) -> str:
    """One row per (family/workload, capacity): each policy's delta against LRU, the gap of
    each real row to its family's preset row of the same seed (a name's `` (seed K)``
    suffix), and whether the rankings agree (:func:`opposed`: the pairs the preset orders one
    way and the real row the other, if any)."""
    others = [p for p in policies if p != "lru"]
    head = f"{'workload':<44}{'C':>6}" + "".join(f"{p:>12}" for p in others) + "  ranking"
    lines = [head]
    for name, row in cells.items():
        family, _, workload = name.partition(": ")
        workload, _, seed = workload.partition(" (seed ")
        base = cells.get(f"{family}: preset" + (f" (seed {seed}" if seed else ""))
        for k, cell in enumerate(row):
            ds = "".join(f"{cell.delta(p):>+12.1%}" for p in others)
            order = " < ".join("=".join(sorted(g)) for g in ranking(cell))
            lines.append(f"{name:<44}{cell.capacity:>6.2f}{ds}  {order}")
            if base is not None and workload != "preset":
                ref = base[k]
                gaps = "".join(f"{100 * (cell.delta(p) - ref.delta(p)):>+10.1f}pp" for p in others)
                against = opposed(ref, cell)
                same = (
                    "agree"
                    if not against
                    else "OPPOSED: " + ", ".join(f"{a} < {b} on the preset" for a, b in against)
                )
                lines.append(f"{'  gap to the preset':<44}{'':>6}{gaps}  {same}")
    return "\n".join(lines)


def seed_means(cells: Mapping[str, Sequence[Cell]]) -> dict[str, list[Cell]]:
    """Per workload drawn on several seeds (names ending `` (seed K)``; seed 0 has no suffix),
    one row per capacity: each policy's cost as a share of LRU's, averaged over the seeds (a
    workload of one draw -- own times -- as it is), each draw's shares kept for
    :func:`orders`. Its name gains `` (seed mean)``. A
    headline is read as a seed mean: one seed's Belady moves by several points with its draw
    of arrivals (spec/metrics.md E9)."""
    groups: dict[str, list[Sequence[Cell]]] = {}
    for name, row in cells.items():
        groups.setdefault(name.split(" (seed ")[0], []).append(row)
    out = {}
    for name, rows in groups.items():
        out[f"{name} (seed mean)"] = [
            Cell(
                name,
                col[0].capacity,
                col[0].blocks,
                {p: sum(c.cost[p] / c.cost["lru"] for c in col) / len(col) for p in col[0].cost},
                tuple({p: c.cost[p] / c.cost["lru"] for p in c.cost} for c in col),
            )
            for col in zip(*rows, strict=True)
        ]
    return out
