"""The documentation site (issue 63 item 2): ``mkdocs build --strict`` passes, and fails on a
broken link; the API reference documents every public name and the CLI reference every command,
each option with its help; and the built site works in headless Chromium (the home page and the
tutorial render, the search box finds a page)."""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kvmodel
from kvmodel.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
#: what a build reads: the config, its hooks, the pages and the sources the API page documents
SITE_SOURCES = ("mkdocs.yml", "README.md", "CHANGELOG.md", "docs", "spec", "examples")
PACKAGES = ("kvmodel", "checkers", "policies")


def build(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=root,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT, out)
    assert done.returncode == 0, done.stderr
    return out


def test_the_site_builds_strictly(site: Path) -> None:
    for page in ("index.html", "docs/tutorial/index.html", "docs/reference/api/index.html",
                 "docs/reference/cli/index.html", "spec/lifecycle/index.html",
                 "CHANGELOG/index.html"):  # fmt: skip
        assert (site / page).is_file(), page


def _copy(dst: Path) -> None:
    for name in SITE_SOURCES + PACKAGES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst / name)


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """Strict mode is on: a link to a page that does not exist, or to an anchor a page does not
    have, fails the build and names the link."""
    (tmp_path / "repo").mkdir()
    _copy(tmp_path / "repo")
    page = tmp_path / "repo" / "docs" / "using.md"
    page.write_text(
        page.read_text(encoding="utf-8")
        + "\n[gone](no-such-page.md) and [lost](../spec/lifecycle.md#no-such-section)\n",
        encoding="utf-8",
    )
    done = build(tmp_path / "repo", tmp_path / "out")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr
    assert "no-such-section" in done.stderr


def _documented() -> set[str]:
    text = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    names = set()
    for path in re.findall(r"^::: (\S+)", text, flags=re.M):
        parts = path.split(".")
        assert parts[0] == "kvmodel", path
        names.add(parts[-1])
    return names


def test_the_api_reference_documents_every_public_name() -> None:
    assert _documented() == set(kvmodel.__all__)


def test_every_public_name_has_a_docstring() -> None:
    bare = [
        n
        for n in kvmodel.__all__
        if callable(obj := getattr(kvmodel, n)) and not (getattr(obj, "__doc__", "") or "").strip()
    ]
    assert bare == []


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_option_of_every_command_says_what_it_is() -> None:
    bare = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, p in a.choices.items():
                    walk(f"{name} {sub}", p)
            if not a.help and not isinstance(a, argparse._HelpAction):
                bare.append(f"{name} {'/'.join(a.option_strings) or a.dest}")

    walk("kvmodel", _parser())
    assert bare == []


def test_the_cli_reference_is_every_commands_help(site: Path) -> None:
    html = (site / "docs" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for name in _commands():
        assert f"kvmodel {name}" in html, name
    assert "--invariants" in html  # a flag of `check`, from its own --help


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP (the search runs in a web worker, which a file: URL forbids)."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _wait(browser: Any, condition: Any, seconds: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, seconds).until(condition)


def test_the_home_page_and_the_tutorial_render(browser: Any, served: str) -> None:
    browser.get(served)
    assert browser.find_element("css selector", "article h1").text.startswith("kvmodel")
    browser.get(served + "docs/tutorial/")
    assert browser.find_element("css selector", "article h1").text.startswith("Tutorial")
    code = browser.find_elements("css selector", "article pre code")
    assert any("class DeadFirstLRU" in c.text for c in code)
    shot = browser.find_element("css selector", "article img")
    assert browser.execute_script("return arguments[0].naturalWidth", shot) > 0
    # the navigation lists the how-to guides and the reference
    nav = browser.find_element("css selector", "nav.md-nav--primary").get_attribute("textContent")
    assert "Check your own engine" in nav
    assert "Python API" in nav


def test_the_search_box_finds_a_page(browser: Any, served: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(served)
    browser.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-search__input").click()
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    _wait(browser, lambda b: box.is_displayed() and box.is_enabled())
    box.send_keys("zombie")
    results = _wait(
        browser,
        lambda b: b.find_elements(By.CSS_SELECTOR, ".md-search-result__item a") or False,
    )
    hrefs = [r.get_attribute("href") for r in results]
    assert hrefs
    assert all(h.startswith(served) for h in hrefs)
