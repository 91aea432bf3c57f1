"""vLLM KV events as a partial log: the three structural rules, and located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkers.conformance.kv_events import check_kv_events
from kvmodel.cli import main


def _events(*evs: dict[str, object]) -> list[tuple[int, dict[str, object]]]:
    return list(enumerate(evs, start=1))


STORE_CHAIN: dict[str, object] = {
    "type": "BlockStored",
    "block_hashes": ["a", "b", "c"],
    "parent_block_hash": None,
}


def test_a_consistent_log_has_no_findings() -> None:
    assert (
        check_kv_events(
            _events(
                STORE_CHAIN,
                {"type": "BlockStored", "block_hashes": ["d"], "parent_block_hash": "b"},
                {"type": "BlockRemoved", "block_hashes": ["c", "d"]},
                {"type": "BlockRemoved", "block_hashes": ["b", "a"]},
                {"type": "AllBlocksCleared"},
                {"type": "BlockStored", "block_hashes": ["x"], "parent_block_hash": None},
            )
        )
        == []
    )


@pytest.mark.parametrize(
    ("events", "rule", "line"),
    [
        ([{"type": "BlockRemoved", "block_hashes": ["zz"]}], "removed-unstored", 1),
        (
            [{"type": "BlockStored", "block_hashes": ["k"], "parent_block_hash": "nope"}],
            "parent-before-child",
            1,
        ),
        (
            [STORE_CHAIN, {"type": "BlockRemoved", "block_hashes": ["b"]}],
            "children-before-parents",
            2,
        ),
        (
            [
                STORE_CHAIN,
                {"type": "AllBlocksCleared"},
                {"type": "BlockRemoved", "block_hashes": ["a"]},
            ],
            "removed-unstored",
            3,
        ),
    ],
)
def test_each_rule_is_caught(events: list[dict[str, object]], rule: str, line: int) -> None:
    [f] = check_kv_events(_events(*events))
    assert (f.rule, f.line) == (rule, line)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "events.jsonl"
    log.write_text(
        "\n".join(
            json.dumps(e) for e in [STORE_CHAIN, {"type": "BlockRemoved", "block_hashes": ["a"]}]
        )
        + "\n"
    )
    assert main(["kv-events", str(log)]) == 1
    assert f"{log}:2: children-before-parents" in capsys.readouterr().out
    log.write_text('{"type": "BlockStored"}\n{"type": "Nope"}\n')
    assert main(["kv-events", str(log)]) == 2
    assert f"{log}:2" in capsys.readouterr().err
