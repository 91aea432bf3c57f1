"""The HTML viewer (kvmodel view, bundles' index.html) in a real browser: Debian's headless
Chromium driven by Selenium. Skipped, saying why, where no Chromium is installed (.ci/run
installs it)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvmodel.cli import main
from kvmodel.config import load_config
from kvmodel.io.itf import itf_trace
from kvmodel.io.trace import dump_trace, parse_trace_lines
from kvmodel.io.viewer import Finding, viewer_html
from kvmodel.workloads import AgenticParams, generate_agentic

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
CONFIG = (
    'block_size = 4\n[[tiers]]\nname = "hbm"\nblocks = 6\n[[tiers]]\nname = "hbf"\nblocks = 6\n'
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium/chromedriver on this machine (apt-get install chromium "
                    "chromium-driver; .ci/run does)")  # fmt: skip
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,900",
    ):
        opts.add_argument(flag)  # fmt: skip
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _open(driver: Any, page: Path) -> None:
    driver.get(page.resolve().as_uri())


def _step(driver: Any) -> int:
    return int(driver.find_element("id", "step").get_attribute("value"))


def test_a_bundle_page_opens_at_the_violation_and_steps(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    out = tmp_path / "cex"
    assert main(["check", "lru", "--invariants", "no-zombie-kv", "--out", str(out)]) == 0
    bundle = out / "lru" / "no-zombie-kv"
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
    cells = browser.find_elements("css selector", "#tiers .block:not(.free)")
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
    assert json.loads(data)["states"] == itf_trace(tr.ops, "kvtether", config)["states"]


def test_screenshots_of_two_views(browser: Any, tmp_path: Path) -> None:
    """docs/viewer-*.png are these two views; regenerate with KVMODEL_SCREENSHOTS=docs."""
    out = tmp_path / "cex"
    assert main(["check", "lru", "--invariants", "no-zombie-kv", "--out", str(out)]) == 0
    target = Path(os.environ.get("KVMODEL_SCREENSHOTS", tmp_path))
    _open(browser, out / "lru" / "no-zombie-kv" / "index.html")
    assert browser.save_screenshot(str(target / "viewer-violation.png"))
    tr = generate_agentic(AgenticParams(seed=3, sessions=3, turns=2))
    trace_file, cfg, page = tmp_path / "t.jsonl", tmp_path / "c.toml", tmp_path / "p.html"
    dump_trace(tr, trace_file)
    cfg.write_text('block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 48\n'
                   '[[tiers]]\nname = "hbf"\nblocks = 96\n')  # fmt: skip
    assert main(["view", str(trace_file), "--policy", "kvtether", "--config", str(cfg),
                 "-o", str(page)]) == 0  # fmt: skip
    _open(browser, page)
    for _ in range(60):
        browser.find_element("id", "next").click()
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
