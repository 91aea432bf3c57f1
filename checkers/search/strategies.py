"""Hypothesis strategies for valid agent traces, for other projects' tests too.

``agent_traces()`` draws a list of harness actions and plays them on a
:class:`~checkers.search.builder.HarnessBuilder`, so every trace it produces is valid and has the
structure the stateful machine explores (sessions, turns, sub-agents, compaction, forks, pins,
temporaries). Hypothesis shrinks by dropping and simplifying actions.

    from hypothesis import given
    from checkers.search.strategies import agent_traces

    @given(agent_traces())
    def test_my_engine(trace): ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from checkers.search.builder import HarnessBuilder
from kvmodel.io.trace import Op, Trace, TraceHeader

__all__ = ["actions", "agent_traces", "durations", "picks", "play", "tokens", "ttls", "waits"]

# the harness actions' arguments: one definition, read by agent_traces() and the stateful
# machine (checkers.search.stateful) alike
tokens = st.integers(1, 16)
picks = st.integers(0, 7)
#: a pin's TTL, None (no TTL) as often as each length: ``one_of(none(), ...)`` made nine pins
#: in ten untimed, and the deadlines went untested (spec/invariants.md, PinEndsLate)
ttls = st.sampled_from([None, 0.5, 2.0, 10.0])
durations = st.sampled_from([0.0, 0.5, 2.0])
#: how long a wait lasts; None: exactly to the next TTL pin deadline, a boundary that the
#: other waits would almost never land on (HarnessBuilder.advance)
waits = st.sampled_from([0.5, 1.0, 5.0, 60.0, None])

#: (builder method, argument strategies) -- the harness primitives, most frequent first
_ACTIONS: list[tuple[str, tuple[st.SearchStrategy[Any], ...]]] = [
    ("user", (picks, tokens, st.booleans())),
    ("infer", (picks, st.integers(0, 12), st.booleans(), durations)),
    ("observe", (picks, tokens, st.booleans())),
    ("start_session", (st.integers(0, 5), st.booleans(), ttls)),
    ("spawn", (picks, st.booleans(), st.integers(0, 4), tokens)),
    ("ret", (picks,)),
    ("turn_end", (picks,)),
    ("compact", (picks, durations)),
    ("fork", (picks, st.integers(0, 8))),
    ("replace", (picks, st.integers(0, 8), tokens)),
    ("remove", (picks, st.integers(0, 8), st.integers(0, 3))),
    ("pin", (picks, st.integers(0, 8), st.integers(0, 8), ttls)),
    ("unpin", (picks,)),
    ("close", (picks,)),
    ("end_session", (picks,)),
    ("advance", (waits,)),
]


def actions() -> st.SearchStrategy[tuple[Any, ...]]:
    """One harness action: ``(name, *args)``."""
    return st.one_of(*(st.tuples(st.just(name), *args) for name, args in _ACTIONS))


def play(steps: list[tuple[Any, ...]]) -> list[Op]:
    """The ops of a list of actions (a session is started first if none runs)."""
    b = HarnessBuilder()
    for name, *args in steps:
        if not b.ctxs and name not in ("start_session", "advance", "end_session"):
            b.start_session(0, True, None)
        method: Callable[..., list[Op]] = getattr(b, name)
        method(*args)
    return b.ops


def agent_traces(max_actions: int = 30) -> st.SearchStrategy[Trace]:
    """Valid traces of up to ``max_actions`` harness actions."""
    return st.lists(actions(), max_size=max_actions).map(
        lambda steps: Trace(TraceHeader(), tuple(play(steps)))
    )
