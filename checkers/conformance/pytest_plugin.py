"""pytest plugin (entry point ``pytest11``): the ``kvmodel_lockstep`` fixture.

An implementation's own test suite checks itself against a reference policy in one line:

    def test_my_cache_is_vllm_prefix(kvmodel_lockstep):
        kvmodel_lockstep(lambda config: MyCache(config), "vllm-prefix")

The fixture runs :func:`checkers.conformance.lockstep.differential` and fails the test with the
shrunk trace and the oracle's report when the implementation diverges. ``--kvmodel-examples N``
sets the number of traces searched (default 100).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from checkers.conformance.lockstep import Factory, LockstepResult, differential
from kvmodel.config import EngineConfig
from kvmodel.ids import TierName
from kvmodel.memory import TierConfig
from kvmodel.policy import Policy

__all__ = ["DEFAULT_CONFIG", "TIERED_CONFIG", "kvmodel_lockstep", "pytest_addoption"]

#: one small tier (as most engines have), so that eviction decisions are frequent: 8 blocks of
#: 4 tokens
DEFAULT_CONFIG = EngineConfig(4, (TierConfig(TierName("hbm"), 8),))
#: for an engine with a second tier: 4 HBM + 8 HBF blocks of 4 tokens
TIERED_CONFIG = EngineConfig(4, (TierConfig(TierName("hbm"), 4), TierConfig(TierName("hbf"), 8)))

Check = Callable[..., LockstepResult]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kvmodel-examples",
        type=int,
        default=100,
        help="traces the kvmodel_lockstep fixture searches per check (default 100)",
    )


@pytest.fixture
def kvmodel_lockstep(request: pytest.FixtureRequest) -> Check:
    """``check(make_impl, policy, config=DEFAULT_CONFIG, max_actions=30, allow=())``: fail on
    divergence (``allow``: the oracle's opt-in admissible variants)."""
    examples = int(request.config.getoption("--kvmodel-examples"))

    def check(
        make_impl: Factory,
        policy: str | Policy,
        config: EngineConfig = DEFAULT_CONFIG,
        *,
        max_actions: int = 30,
        allow: tuple[str, ...] = (),
    ) -> LockstepResult:
        result = differential(
            make_impl, policy, config, max_examples=examples, max_actions=max_actions, allow=allow
        )
        if not result.ok:
            pytest.fail(result.render(), pytrace=False)
        return result

    return check
