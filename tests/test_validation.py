"""Fitted presets judged on real sessions the fit never saw (spec/metrics.md E9): rankings with
ties, the workloads each family is compared on, and -- ``slow`` -- the rankings themselves."""

from __future__ import annotations

import attrs
import pytest

from kvmodel.studies.validation import (
    CAPACITIES,
    POLICIES,
    Cell,
    cost_cells,
    family_workloads,
    opposed,
    orders,
    ranking,
    render_validation,
    seed_means,
)
from kvmodel.workloads import PRESETS
from kvmodel.workloads.realsets import FAMILIES, traces_root


def _cell(**cost: float) -> Cell:
    return Cell("w", 0.5, 100, cost)


def test_a_ranking_groups_costs_within_one_percent_of_lrus() -> None:
    cell = _cell(lru=100.0, kvtether=99.5, mori=103.0, belady=80.0)
    assert ranking(cell) == (
        frozenset({"belady"}),
        frozenset({"kvtether", "lru"}),
        frozenset({"mori"}),
    )
    assert cell.delta("belady") == pytest.approx(-0.2)
    # a chain of near-ties is one group only while each is within 1% of the group's cheapest
    assert ranking(_cell(lru=100.0, kvtether=100.9, mori=101.8, belady=90.0))[1:] == (
        frozenset({"lru", "kvtether"}),
        frozenset({"mori"}),
    )


def test_a_pair_is_ordered_only_where_every_draw_orders_it_the_same_way() -> None:
    """Over several seeds, a mean 1.7% apart whose draws disagree is no order; a pair ordered
    on one side and not on the other is no disagreement, one ordered both ways is."""
    preset = Cell("p", 0.5, 100, {"lru": 1.0, "kvtether": 0.983},
                  ({"lru": 1.0, "kvtether": 0.949}, {"lru": 1.0, "kvtether": 1.012},
                   {"lru": 1.0, "kvtether": 0.988}))  # fmt: skip
    real = Cell("r", 0.5, 100, {"lru": 1.0, "kvtether": 1.016},
                ({"lru": 1.0, "kvtether": 1.009}, {"lru": 1.0, "kvtether": 1.001},
                 {"lru": 1.0, "kvtether": 1.037}))  # fmt: skip
    assert orders(preset) == frozenset()
    assert orders(real) == {("lru", "kvtether")}
    assert opposed(preset, real) == opposed(real, preset) == []
    worse = attrs.evolve(preset, draws=tuple({**d, "kvtether": 0.98} for d in preset.draws))
    assert opposed(worse, real) == [("kvtether", "lru")]
    # one draw: ordered by more than 1% of LRU's cost
    assert orders(_cell(lru=100.0, kvtether=99.5, belady=80.0)) == {
        ("belady", "lru"), ("belady", "kvtether")
    }  # fmt: skip


def test_seed_means_keep_each_draw_for_the_orders() -> None:
    a = {"w": [_cell(lru=10.0, kvtether=9.0)], "w (seed 1)": [_cell(lru=10.0, kvtether=10.5)]}
    (mean,) = seed_means(a)["w (seed mean)"]
    assert mean.cost["kvtether"] == pytest.approx(0.975)
    assert mean.draws == ({"lru": 1.0, "kvtether": 0.9}, {"lru": 1.0, "kvtether": 1.05})
    assert orders(mean) == frozenset()  # 2.5% apart on the mean, but the draws disagree


def test_the_table_states_each_real_rows_gap_to_its_preset() -> None:
    pre = [_cell(lru=100.0, kvtether=70.0, mori=90.0, belady=60.0)]
    real = [_cell(lru=100.0, kvtether=101.0, mori=95.0, belady=80.0)]
    out = render_validation({"f: preset": pre, "f: validation, resampled": real}, POLICIES)
    # (each real row is set beside the preset of its own seed)
    seeded = render_validation(
        {"f: preset": real, "f: preset (seed 1)": pre, "f: validation, resampled (seed 1)": real},
        POLICIES,
    )
    assert "+31.0pp" in seeded
    assert "-30.0%" in out
    assert "+1.0%" in out
    assert "+31.0pp" in out  # kvtether: +1.0% real against -30.0% on the preset
    assert "OPPOSED: kvtether < lru on the preset" in out


needs_shared = pytest.mark.skipif(
    traces_root() is None, reason="no ../shared/traces (or $KVMODEL_SHARED_TRACES) here"
)


@needs_shared
def test_the_workloads_of_a_family_share_the_presets_tenancy() -> None:
    """The resampled validation sessions arrive at the preset's own mean gap, as many as the
    preset's; an untimed family (tau-bench) has no own-times row."""
    ws = family_workloads("tau-bench", sessions=4)
    assert set(ws) == {"preset", "validation, resampled"}
    res = ws["validation, resampled"].header.meta
    assert res["sessions"] == 4
    assert res["session_gap_s"] == PRESETS["tau-bench-fit"].session_gap_s
    # tau-bench logs no times: its sessions run on the preset's clock, and the header says so
    assert res["retimed"]["tool_wait_median_s"] == PRESETS["tau-bench-fit"].tool_wait_median_s
    assert "untimed_sessions" not in res
    mini = family_workloads("mini-swe-agent", sessions=2)["validation, resampled"].header.meta
    assert mini["arrival_batch"] == PRESETS["mini-swe-agent-fit"].arrival_batch > 1
    [cell] = cost_cells("t", ws["validation, resampled"], (0.5,), ("lru", "belady"))
    assert cell.cost["belady"] <= cell.cost["lru"]
    assert "validation, own times" in family_workloads("mini-swe-agent", sessions=2)


#: the draws a ranking is read over: one seed's Belady moves by several points with its draw
#: of arrivals, so a headline is a seed mean (E9)
_SEEDS = (0, 1, 2)


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_fitted_presets_ranking_is_the_real_validation_sessions(family: str) -> None:
    """Issue 58's rule: the order of lru, kvtether, mori and belady by cost on the fitted
    preset is the order on the validation half's real sessions (resampled into the preset's
    tenancy), at each capacity: no pair ordered one way on the preset and the other way on the
    real sessions, a pair ordered where its costs are more than 1% of LRU's apart on the mean
    over :data:`_SEEDS` and in the same direction in every seed (spec E9). Measured 2026-12-08:
    every family agrees at both capacities."""
    cells: dict[str, list[Cell]] = {}
    for seed in _SEEDS:
        ws = family_workloads(family, seed=seed)
        suffix = f" (seed {seed})" if seed else ""
        cells["preset" + suffix] = cost_cells("preset", ws["preset"], CAPACITIES)
        cells["real" + suffix] = cost_cells("real", ws["validation, resampled"], CAPACITIES)
    means = seed_means(cells)
    for p, r in zip(means["preset (seed mean)"], means["real (seed mean)"], strict=True):
        assert not opposed(p, r), (p.capacity, p.draws, r.draws)


def test_seed_means_average_each_policys_share_of_lru() -> None:
    a = Cell("w", 0.5, 10, {"lru": 10.0, "belady": 8.0})
    b = Cell("w", 0.5, 10, {"lru": 20.0, "belady": 10.0})
    [mean] = seed_means({"w": [a], "w (seed 1)": [b]})["w (seed mean)"]
    assert mean.cost == {"lru": 1.0, "belady": pytest.approx(0.65)}


def test_inference_time_is_prefill_and_decode_cut_to_the_logged_gap() -> None:
    """spec E9, "decode time": each inference takes its prompt at the prefill rate plus its
    output at ``tpot_s``, never past its context's next op (the next request came when the log
    says); nothing else changes, and the header says what was assumed."""
    from kvmodel.ids import ContextId, MessageId, SessionId
    from kvmodel.io.trace import Append, EndSession, Infer, Open, Trace, TraceHeader
    from kvmodel.messages import AgentKind, Message, MessageKind, Role
    from kvmodel.workloads.decode import with_inference_time

    c, s = ContextId("c"), SessionId("s")

    def m(i: str, n: int, kind: MessageKind = MessageKind.USER) -> Message:
        return Message(MessageId(i), Role.USER, kind, n)

    o1, o2 = (m(i, 100, MessageKind.OUTPUT) for i in ("o1", "o2"))
    ops = (
        Open(0.0, c, s, AgentKind.MAIN),
        Append(0.0, c, (m("u", 1000),)),
        Infer(0.0, c, (o1,)),  # 1000 / 1000 + 100 x 0.01 = 2 s; the next op at 5 s
        Append(5.0, c, (m("t", 1000, MessageKind.OBSERVATION),)),
        Infer(5.0, c, (o2,)),  # 2100 / 1000 + 1 = 3.1 s, cut to the 1.5 s before end_session
        EndSession(6.5, s),
    )
    got = with_inference_time(Trace(TraceHeader(), ops), tpot_s=0.01, prefill_tok_per_s=1000.0)
    assert [op.duration for op in got.ops if isinstance(op, Infer)] == [2.0, 1.5]
    assert [op.t for op in got.ops] == [op.t for op in ops]
    assert got.header.meta["inference_time"] == {"tpot_s": 0.01, "prefill_tok_per_s": 1000.0}
