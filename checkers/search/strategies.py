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

__all__ = ["actions", "agent_traces", "play"]

_tok = st.integers(1, 16)
_pick = st.integers(0, 7)
_ttl = st.sampled_from([None, 0.5, 2.0, 10.0])
_dur = st.sampled_from([0.0, 0.5, 2.0])

#: (builder method, argument strategies) -- the harness primitives, most frequent first
_ACTIONS: list[tuple[str, tuple[st.SearchStrategy[Any], ...]]] = [
    ("user", (_pick, _tok, st.booleans())),
    ("infer", (_pick, st.integers(0, 12), st.booleans(), _dur)),
    ("observe", (_pick, _tok, st.booleans())),
    ("start_session", (st.integers(0, 5), st.booleans(), _ttl)),
    ("spawn", (_pick, st.booleans(), st.integers(0, 4), _tok)),
    ("ret", (_pick,)),
    ("turn_end", (_pick,)),
    ("compact", (_pick, _dur)),
    ("fork", (_pick, st.integers(0, 8))),
    ("replace", (_pick, st.integers(0, 8), _tok)),
    ("remove", (_pick, st.integers(0, 8), st.integers(0, 3))),
    ("pin", (_pick, st.integers(0, 8), st.integers(0, 8), _ttl)),
    ("unpin", (_pick,)),
    ("close", (_pick,)),
    ("end_session", (_pick,)),
    ("advance", (st.sampled_from([0.5, 1.0, 5.0, 60.0, None]),)),  # None: to a pin deadline
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
