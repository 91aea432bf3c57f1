"""A trace, op by op, as one self-contained HTML page (``kvmodel view``, bundles' ``index.html``).

The page stores the replay as frames (:mod:`kvmodel.io.frames`: the first state and one delta
per op, in terms of the ITF's records) and rebuilds a step in the browser, keeping a snapshot
every 128 steps so that any step is at most 127 deltas from one. It opens at the violation (the
state after the violating op) or, without one, at the last step, and shows at each step:

* the op (index, name, time), what it did (hits, writes, evictions, reclaims, rejections,
  counted from the observation records) and, by name, the blocks it evicted or reclaimed --
  slot, key, depth, the contexts that held them and their class -- also drawn as outlined cells
  in their tier, since they are no longer resident after the op;
* a timeline of evictions (and reclaims) by class over the whole trace; a click goes to a step;
* every tier's resident blocks (sorted by slot) coloured by class, each labelled (hover) with
  its slot, key, depth and holders;
* every context as a tree of the fork/spawn DAG (forks, spawns and compactions under the
  context they came from; a sub-agent's return named), with its phase, its materialized chain
  (a cell per block, coloured by class, or hollow when the block is no longer resident) and
  its logical sequence (each message with its kind, tokens and state);
* for a context clicked, its chain over time: one bar per step that changed it, in class runs,
  beside its valid prefix -- what a reader needs to see when and why a block became dead.

A violation, if one is given, is announced at the top and its op highlighted. A slider, the
buttons and the keyboard (arrows, Home, End, ``v`` for the violation) move between steps.
``window.kvmodelState(i)`` returns step ``i`` as the ITF's records (the tests compare it with the
ITF export).

A trace is hostile input: its strings reach the page only as JSON inside
``<script type="application/json">`` with ``<``, ``>``, ``&`` and the line separators escaped,
and the script writes them with ``textContent``, never as markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import attrs

from kvmodel.config import EngineConfig
from kvmodel.io.frames import TALLY, frames, tally
from kvmodel.io.trace import Op
from kvmodel.policy import Policy

__all__ = ["Finding", "viewer_data", "viewer_html"]


@attrs.frozen
class Finding:
    """A violation to show: the op it happened at (None: not tied to an op, e.g. found at the
    end of the trace), the invariant and its message."""

    op: int | None
    invariant: str
    message: str


def _embed(data: Any) -> str:
    """JSON safe inside a ``<script>`` element: nothing in it can close the element or start
    markup, whatever the strings hold."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def viewer_data(
    ops: Sequence[Op],
    policy: str | Policy,
    config: EngineConfig,
    *,
    finding: Finding | None = None,
    title: str = "kvmodel trace",
    observed: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """What the page embeds: the frames of the replay, the title, the finding and, for
    ``observed`` (another implementation's records by op, spec T4), their counts by op."""
    data, stopped = frames(ops, policy, config)
    data.update({
        "title": title,
        "stopped": stopped,
        "finding": attrs.asdict(finding) if finding is not None else None,
        "tally": list(TALLY),
        "observed": None
        if observed is None
        else {str(op): tally(recs) for op, recs in sorted(observed.items())},
    })  # fmt: skip
    return data


def viewer_html(
    ops: Sequence[Op],
    policy: str | Policy,
    config: EngineConfig,
    *,
    finding: Finding | None = None,
    title: str = "kvmodel trace",
    observed: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
) -> str:
    """The page for ``ops`` replayed under ``policy`` on ``config``. ``observed``: another
    implementation's observation records by op (spec T4), counted beside the model's at each
    step, a step where the counts differ marked."""
    data = viewer_data(ops, policy, config, finding=finding, title=title, observed=observed)
    return _PAGE.replace("/*DATA*/", _embed(data))


#: the page (kvmodel/io/viewer.html, package data): its script rebuilds the steps from the frames
_PAGE = (resources.files("kvmodel.io") / "viewer.html").read_text(encoding="utf-8")
