"""The HTML viewer (kvmodel view, bundles' index.html) in a real browser: Debian's headless
Chromium driven by Selenium. Skipped, saying why, where no Chromium is installed (.ci/run
installs it)."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kvmodel.cli import main
from kvmodel.config import EngineConfig, default_config, load_config, parse_config
from kvmodel.io.frames import decode, frames, tally
from kvmodel.io.itf import itf_trace
from kvmodel.io.trace import Op, dump_trace, parse_trace_lines
from kvmodel.io.viewer import Finding, viewer_html
from kvmodel.workloads import AgenticParams, RandomParams, generate_agentic, random_trace

CONFIG = (
    'block_size = 4\n[[tiers]]\nname = "hbm"\nblocks = 6\n[[tiers]]\nname = "hbf"\nblocks = 6\n'
)


def load_config_text(text: str) -> EngineConfig:
    return parse_config(tomllib.loads(text))


def _open(driver: Any, page: Path) -> None:
    driver.get(page.resolve().as_uri())


def _step(driver: Any) -> int:
    return int(driver.find_element("id", "step").get_attribute("value"))


def test_a_bundle_page_opens_at_the_violation_and_steps(
    browser: Any, lru_zombie_bundle: Path
) -> None:
    from selenium.webdriver.common.keys import Keys

    bundle = lru_zombie_bundle
    itf = json.loads((bundle / "counterexample.itf.json").read_text())
    at = itf["#meta"]["at"]
    _open(browser, bundle / "index.html")
    banner = browser.find_element("id", "violation")
    assert banner.is_displayed()
    assert f"violated no-zombie-kv at op {at}" in banner.text
    line = browser.find_element("id", "op-line")
    assert "violation" in line.get_attribute("class").split()  # the violating op, highlighted
    assert _step(browser) == at + 1
    body = browser.find_element("tag name", "body")
    body.send_keys(Keys.HOME)
    assert _step(browser) == 0
    assert "violation" not in line.get_attribute("class").split()
    last = len(itf["states"]) - 1
    body.send_keys(Keys.END)
    assert _step(browser) == last
    body.send_keys(Keys.ARROW_LEFT)
    assert _step(browser) == last - 1
    browser.find_element("id", "to-violation").click()
    assert _step(browser) == at + 1
    # what the page shows is the state: resident blocks and records counted as in the ITF
    state = itf["states"][at + 1]
    cells = browser.find_elements("css selector", "#tiers .block:not(.free):not(.left)")
    assert len(cells) == len(state["blocks"]["#map"])
    for kind in ("hit", "alloc", "evict", "reject"):
        shown = browser.find_element("css selector", f'#counts [data-kind="{kind}"]')
        want = sum(1 for r in state["records"] if r["kind"] == kind)
        assert int(shown.get_attribute("data-count")) == want
    rows = browser.find_elements("css selector", "#contexts tbody tr")
    assert len(rows) == len(state["contexts"]["#map"])


HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '"><img src=x onerror="window.__pwned=2">',
    "</script><script>window.__pwned=3</script>",
    "ctx \u2028 \u2029 ünïcødé 日本 'q' \"qq\" &amp; <!--",
]


def test_hostile_strings_render_as_text(browser: Any, tmp_path: Path) -> None:
    lines = []
    for i, name in enumerate(HOSTILE):
        msg = {"id": name, "role": "user", "kind": "user", "tokens": 6, "hash": name}
        lines += [
            json.dumps({"op": "open", "t": i, "ctx": name, "session": name, "agent": "main"}),
            json.dumps({"op": "append", "t": i, "ctx": name, "messages": [msg]}),
            json.dumps({"op": "infer", "t": i, "ctx": name, "output": []}),
        ]
    trace = parse_trace_lines(lines)
    trace_file, cfg, page = tmp_path / "t.jsonl", tmp_path / "c.toml", tmp_path / "p.html"
    dump_trace(trace, trace_file)
    cfg.write_text(CONFIG)
    assert main(["view", str(trace_file), "--config", str(cfg), "-o", str(page)]) == 0
    _open(browser, page)
    browser.find_element("tag name", "body").send_keys("\ue010")  # End
    assert browser.execute_script("return window.__pwned === undefined")
    assert not browser.find_elements("css selector", "#contexts img")
    shown = [r.find_element("css selector", "td").text for r in
             browser.find_elements("css selector", "#contexts tbody tr")]  # fmt: skip
    # every name shown literally (the browser collapses the line separators to spaces)
    assert sorted(s.split()[0] for s in shown) == sorted(n.split()[0] for n in HOSTILE)
    # message ids too, in each context's logical sequence
    chips = [m.text for m in browser.find_elements("css selector", "#contexts .msg")]
    assert sorted(c.split()[0] for c in chips) == sorted(n.split()[0] for n in HOSTILE)


def test_the_page_is_self_contained_and_deterministic(tmp_path: Path) -> None:
    tr = generate_agentic(AgenticParams(seed=2, sessions=2, turns=2))
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(CONFIG)
    config = load_config(cfg_file)
    a = viewer_html(tr.ops, "kvtether", config, finding=Finding(3, "x", "y"))
    assert a == viewer_html(tr.ops, "kvtether", config, finding=Finding(3, "x", "y"))
    for remote in ("http://", "https://", "//cdn", "src="):
        assert remote not in a.split('<script id="data"')[0]  # no fetched code or style
    data = a.split('<script id="data" type="application/json">')[1].split("</script>")[0]
    assert "<" not in data
    assert decode(json.loads(data)) == _itf_states(tr.ops, "kvtether", config)


def _itf_states(ops: Sequence[Op], policy: str, config: EngineConfig) -> list[dict[str, Any]]:
    """The ITF export's states as the frames keep them: without records (counted) or #meta."""
    return [
        {k: v for k, v in s.items() if k not in ("records", "#meta")}
        for s in itf_trace(ops, policy, config)["states"]
    ]


# the engine mutants with a view of their own take the frames' slow path (every block rebuilt)
FRAME_POLICIES = ["lru", "kvtether", "ttl", "mori", "lachesis", "vllm-offload",
                  "checkers.search.engine_mutants:LatestSuspensionTether",
                  "checkers.search.engine_mutants:StaleFeaturesAfterPinTether"]  # fmt: skip


@pytest.mark.parametrize("policy", FRAME_POLICIES)
def test_the_frames_are_the_itf_states_op_by_op(policy: str) -> None:
    """The viewer stores deltas (kvmodel/io/frames.py); decoded, they are the ITF export's
    states at every step, its records counted, on random traces over every op kind (small
    tiers: evictions, rejections, reclaims) and an agentic trace with forks and sub-agents."""
    small = load_config_text(CONFIG)
    two = load_config_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 48\n'
                           '[[tiers]]\nname = "hbf"\nblocks = 96\n')  # fmt: skip
    runs: list[tuple[Sequence[Op], EngineConfig]] = [
        (random_trace(RandomParams(seed=seed, ops=80)).ops, small) for seed in range(6)
    ]
    runs.append((generate_agentic(AgenticParams(seed=3, sessions=3, turns=2)).ops, two))
    evictions = 0
    for ops, config in runs:
        data, stopped = frames(ops, policy, config)
        itf = itf_trace(ops, policy, config)
        assert stopped == itf["#meta"].get("stopped", "")
        assert decode(data) == _itf_states(ops, policy, config)
        assert [s["n"] for s in data["steps"]] == [tally(s["records"]) for s in itf["states"]]
        evictions += sum(s["n"][2] for s in data["steps"])
    assert evictions > 0  # the deltas were put to evictions, not only to writes


def test_block_names_pack_and_unpack() -> None:
    from kvmodel.io.frames import pack_name, unpack_name

    names = ["5598200abdbb8066c28aa4f3", "slot-3", "=x", "", "abcdef", "abcd", "ABCDEF",
             "5598200abdbb8066c28aa4f", "<script>", "0" * 30 + "ffffff"]  # fmt: skip
    for name in names:
        assert unpack_name(pack_name(name)) == name
    assert len(pack_name("5598200abdbb8066c28aa4f3")) == 16


def test_a_page_stays_small(tmp_path: Path) -> None:
    """At most 2 MB per 1,000 ops on a generated agentic trace under the default config (the
    page of issue 61's 440-op trace was 179 MB when every state was stored whole)."""
    tr = generate_agentic(AgenticParams(seed=3, sessions=6))
    page = viewer_html(tr.ops, "kvtether", default_config())
    assert len(tr.ops) > 400
    assert len(page) <= 2_000_000 * len(tr.ops) / 1000


def test_screenshots_of_two_views(browser: Any, tmp_path: Path, lru_zombie_bundle: Path) -> None:
    """docs/viewer-*.png are these two views; regenerate with KVMODEL_SCREENSHOTS=docs."""
    target = Path(os.environ.get("KVMODEL_SCREENSHOTS", tmp_path))
    _open(browser, lru_zombie_bundle / "index.html")
    assert browser.save_screenshot(str(target / "viewer-violation.png"))
    tr = generate_agentic(AgenticParams(seed=3, sessions=3, turns=2))
    trace_file, cfg, page = tmp_path / "t.jsonl", tmp_path / "c.toml", tmp_path / "p.html"
    dump_trace(tr, trace_file)
    cfg.write_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 48\n'
                   '[[tiers]]\nname = "hbf"\nblocks = 96\n')  # fmt: skip
    assert main(["view", str(trace_file), "--policy", "kvtether", "--config", str(cfg),
                 "-o", str(page)]) == 0  # fmt: skip
    _open(browser, page)
    browser.find_element("id", "first").click()
    for _ in range(60):
        browser.find_element("id", "next").click()
    browser.find_elements("css selector", "#contexts td.name")[0].click()  # its chain over time
    assert browser.save_screenshot(str(target / "viewer-agentic.png"))


def test_an_implementations_log_is_shown_beside_the_model(browser: Any, tmp_path: Path) -> None:
    # LRU's log under the KVTether reference: the oracle's first divergence is where the page
    # opens, and steps where the counts differ (KVTether reclaims, LRU does not) are marked
    from kvmodel.io.observations import observation_to_json
    from kvmodel.replay import replay

    tr = generate_agentic(AgenticParams(seed=3, sessions=3, turns=2))
    trace_file, cfg, log, page = (tmp_path / n for n in ("t.jsonl", "c.toml", "l.jsonl", "p.html"))
    dump_trace(tr, trace_file)
    cfg.write_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 96\n'
                   '[[tiers]]\nname = "hbf"\nblocks = 160\n')  # fmt: skip
    records = [observation_to_json(o) for o in replay(tr, "lru", load_config(cfg)).engine.log]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    argv = ["view", str(trace_file), "--policy", "kvtether", "--config", str(cfg),
            "--observations", str(log), "-o", str(page)]  # fmt: skip
    assert main(argv) == 0
    _open(browser, page)
    assert "violated oracle at op 23: eviction outside the admissible set" in (
        browser.find_element("id", "violation").text
    )
    box = browser.find_element("id", "observed-counts")
    assert box.is_displayed()
    assert box.text.startswith("implementation:")
    marked = 0
    for _ in range(len(tr.ops)):
        browser.find_element("id", "next").click()
        marked += "differs" in box.get_attribute("class").split()
    assert marked > 0


def _as_page_state(s: dict[str, Any]) -> dict[str, Any]:
    """An ITF state in the shape of the page's window.kvmodelState: contexts by id, blocks by
    slot, tiers' counts as lists."""
    return {
        "action": s["action"],
        "op_index": s["op_index"],
        "t": s["t"],
        "contexts": dict(s["contexts"]["#map"]),
        "blocks": {
            str(b["slot"]): {
                "name": k,
                "tier": b["tier"],
                "depth": b["depth"],
                "state": b["state"],
                "holders": b["holders"]["#set"],
            }
            for k, b in s["blocks"]["#map"]
        },
        "free": [n for _, n in s["free"]["#map"]],
        "writes": [n for _, n in s["writes"]["#map"]],
    }


def test_the_page_rebuilds_every_step_as_the_itf_has_it(browser: Any, tmp_path: Path) -> None:
    """The page's own decoder, stepping back and forth past its snapshots (every 128 steps),
    gives the ITF export's state at every step; without a finding it opens at the last step."""
    tr = random_trace(RandomParams(seed=5, ops=300, max_open=6))
    config = load_config_text(CONFIG)
    page = tmp_path / "p.html"
    page.write_text(viewer_html(tr.ops, "kvtether", config))
    want = [_as_page_state(s) for s in itf_trace(tr.ops, "kvtether", config)["states"]]
    _open(browser, page)
    assert _step(browser) == len(want) - 1
    order = [*range(len(want) - 1, -1, -1), *range(0, len(want), 5), 200, 130, 127, 3, 260]
    for i in order:
        assert browser.execute_script(f"return window.kvmodelState({i})") == want[i], i


def test_the_dag_the_evicted_blocks_and_a_chain_over_time(browser: Any, tmp_path: Path) -> None:
    """What a reader needs to see why a block is dead: sub-agents and forks under their
    context, the blocks an op evicted named and outlined, a context's chain step by step."""
    tr = generate_agentic(AgenticParams(seed=3, sessions=3, turns=2))
    config = load_config_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 48\n'
                              '[[tiers]]\nname = "hbf"\nblocks = 96\n')  # fmt: skip
    page = tmp_path / "p.html"
    page.write_text(viewer_html(tr.ops, "kvtether", config))
    data, _ = frames(tr.ops, "kvtether", config)
    _open(browser, page)
    rows = browser.find_elements("css selector", "#contexts tbody tr")
    names = [r.find_element("css selector", "td.name").text for r in rows]
    assert "└ s2.f1\nfork of s2.main" in names
    assert "├ s2.w1\nspawned by s2.main\nreturned to s2.main" in names
    assert "└ s0.c1\ncompaction of s0.main" in names
    # the first step that evicts: its victims named by slot, key and holder, and outlined
    at = next(i for i, s in enumerate(data["steps"]) if s["n"][2])
    browser.execute_script(f"show({at})")
    lines = [li.text for li in browser.find_elements("css selector", "#left li")]
    victims = [x for what, _, slots in data["steps"][at]["e"] if what == "evict" for x in slots]
    left = sum(len(slots) for _, _, slots in data["steps"][at]["e"])
    assert len(lines) == min(left, 50) + (left > 50)
    assert lines[0].startswith(f"evicted {data['L'][data['steps'][at]['e'][0][1]]} block slot "
                               f"{victims[0]} · key ")  # fmt: skip
    ghosts = browser.find_elements("css selector", "#tiers .block.left")
    assert sorted(int(g.get_attribute("data-slot")) for g in ghosts) == sorted(
        x for _, _, slots in data["steps"][at]["e"] for x in slots
    )
    # a context's chain over time: one row per change, each a bar of class runs
    browser.find_elements("css selector", "#contexts td.name")[0].click()
    hist = browser.find_elements("css selector", "#history tbody tr")
    assert len(hist) > 5
    assert browser.find_element("id", "history-title").text == "Chain of s0.main over time"
    hist[3].click()
    assert _step(browser) == int(hist[3].get_attribute("data-step"))


def test_a_ten_thousand_op_page_opens(browser: Any, tmp_path: Path) -> None:
    """A 10,000-op trace's page opens at its last step and steps back to the first (issue 61:
    benchmarks/bench_viewer.py prints its size and opening time; no clock is asserted here)."""
    tr = random_trace(RandomParams(seed=1, ops=10_000, max_open=6))
    page = tmp_path / "p.html"
    page.write_text(viewer_html(tr.ops, "kvtether", load_config_text(CONFIG)))
    assert page.stat().st_size <= 2_000_000 * 10
    _open(browser, page)
    assert browser.find_element("tag name", "body").get_attribute("data-ready") == "1"
    assert _step(browser) == 10_000
    browser.find_element("id", "first").click()
    assert _step(browser) == 0
