"""What goes in and out of the model: traces (``trace``, spec/trace-format.md), observation
logs (``observations``, T4), JSON Lines reading with located errors (``jsonl``), ITF state
traces (``itf``), the one-page HTML viewer (``viewer``) and the importers of real agent logs
(``importers``)."""

from __future__ import annotations

__all__: list[str] = []
