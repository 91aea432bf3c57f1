"""The engine self-check: random traces of every op kind, each run on ample memory beside the
contract model (:mod:`checkers.invariants.nversion`); the first disagreement, delta-debugged."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from checkers.invariants.contract import ample_config, contract_violation
from checkers.invariants.structural import Violation
from checkers.search.shrink import op_groups, shrink
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.io.trace import Op

__all__ = ["SELF_CHECK_BLOCK_SIZES", "SelfCheckFind", "engine_self_check"]

#: block sizes the self-check cycles through (1 makes every message boundary a block boundary)
SELF_CHECK_BLOCK_SIZES = (4, 1, 2, 16)


@attrs.frozen
class SelfCheckFind:
    ops: tuple[Op, ...]  # delta-debugged
    violation: Violation
    config: EngineConfig  # ample memory for ``ops`` at the block size it was found with
    one_minimal: bool
    original_length: int


def engine_self_check(
    engine_class: type[Engine], *, traces: int, seed: int = 0, ops: int = 60
) -> SelfCheckFind | None:
    """Compare ``engine_class`` with the contract on ``traces`` random traces (every op kind,
    :func:`kvmodel.workloads.random_ops.random_trace`); the first disagreement, delta-debugged,
    or ``None``."""
    from kvmodel.workloads.random_ops import RandomParams, random_trace

    for i in range(traces):
        bs = SELF_CHECK_BLOCK_SIZES[i % len(SELF_CHECK_BLOCK_SIZES)]
        trace = random_trace(RandomParams(seed=seed * 100_003 + i, ops=ops))
        if contract_violation(trace.ops, engine_class, block_size=bs) is None:
            continue

        def fails(cand: Sequence[Op], bs: int = bs) -> bool:
            return contract_violation(cand, engine_class, block_size=bs) is not None

        small, minimal = shrink(trace.ops, fails, groups=op_groups)
        v = contract_violation(small, engine_class, block_size=bs)
        assert v is not None
        return SelfCheckFind(tuple(small), v, ample_config(small, bs), minimal, len(trace.ops))
    return None
