"""The fit and validation halves of the shared real traces (spec importers.md R9): a session's
half follows from its name alone, a tau-bench task's trials stay together, and each half is a
valid trace on the real clock."""

from __future__ import annotations

import pytest

from kvmodel.io.trace import EndSession
from kvmodel.workloads.realsets import (
    FAMILIES,
    HALVES,
    family_trace,
    group_of,
    half_of,
    traces_root,
)
from kvmodel.workloads.resample import sessions_of
from kvmodel.workloads.stats import workload_stats


def test_a_tau_bench_tasks_trials_are_one_group_and_groups_alternate_in_natural_order() -> None:
    assert group_of("gpt-4o-airline.task12.3") == "gpt-4o-airline.task12"
    assert group_of("astropy__astropy-13453") == "astropy__astropy-13453"
    assert (
        group_of("258c7280-ae70-4798-800f-63464d01a85d") == "258c7280-ae70-4798-800f-63464d01a85d"
    )
    halves = half_of(["t.task10", "t.task2", "t.task1", "t.task2"])
    assert halves == {"t.task1": "fit", "t.task2": "validation", "t.task10": "fit"}


needs_shared = pytest.mark.skipif(
    traces_root() is None, reason="no ../shared/traces (or $KVMODEL_SHARED_TRACES) here"
)

#: (fit, validation) sessions of each family in the shared folder as of 2026-12-06
COUNTS = {"mini-swe-agent": (52, 52), "tau-bench": (52, 48), "claude-code": (2, 1)}


def _names(family: str, half: str | None) -> set[str]:
    trace = family_trace(family, half)  # type: ignore[arg-type]
    return {str(op.session) for op in trace.ops if isinstance(op, EndSession)}


@needs_shared
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_halves_split_every_session_once_and_no_task_across_them(family: str) -> None:
    fit, val = (_names(family, h) for h in HALVES)
    assert (len(fit), len(val)) == COUNTS[family]
    assert not fit & val
    assert fit | val == _names(family, None)
    assert not {group_of(s) for s in fit} & {group_of(s) for s in val}


@needs_shared
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_half_is_a_valid_trace_with_its_untimed_sessions_listed(family: str) -> None:
    for half in HALVES:
        trace = family_trace(family, half)
        assert trace.header.meta["half"] == half
        untimed = set(trace.header.meta.get("untimed_sessions", ()))
        assert untimed <= _names(family, half)
        if family == "tau-bench":  # (tau-bench logs no times at all, R5)
            assert untimed == _names(family, half)
        assert len(sessions_of([trace])) == len(_names(family, half))
        assert workload_stats(trace).sessions == len(_names(family, half))  # (valid: it runs)
