"""Hypothesis profiles: which one runs is decided here, once, for the whole suite.

* ``ci`` -- selected when the ``CI`` environment variable is set (``.ci/run``): derandomized (the
  examples are a function of each test's source, so a run never passes or fails by luck), no
  example database, failing examples printed with a reproduction blob.
* ``dev`` -- the default elsewhere: random examples, so local runs keep exploring; a failure
  found this way becomes an explicit ``@example`` or a golden test before it is fixed.
* ``thorough`` -- selected when the marker expression asks for slow tests (``-m slow``): many
  more examples, random.

``HYPOTHESIS_PROFILE=name`` overrides the choice (e.g. ``HYPOTHESIS_PROFILE=ci`` to reproduce CI
locally). Every test runs with Hypothesis's pool of constants harvested from loaded modules pinned
empty (:func:`checkers.search.pool.fixed_constants`): otherwise a test's examples would depend on
which modules the worker happened to import before it. The profile only sets what a test does
not set itself; the checkers' own searches
(``kvmodel check``) are seeded explicitly and do not depend on it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, settings

from checkers.search.pool import fixed_constants

settings.register_profile(
    "ci",
    max_examples=60,
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def choose_profile(env: dict[str, str] | os._Environ[str], markexpr: str) -> str:
    if env.get("HYPOTHESIS_PROFILE"):
        return env["HYPOTHESIS_PROFILE"]
    if "slow" in markexpr and "not slow" not in markexpr:
        return "thorough"
    if env.get("CI"):
        return "ci"
    return "dev"


# loaded at import (before any test module builds its own settings objects, which inherit from
# the profile in force when they are built); the marker expression is read in pytest_configure
settings.load_profile(choose_profile(os.environ, ""))


def pytest_configure(config: pytest.Config) -> None:
    settings.load_profile(choose_profile(os.environ, str(config.getoption("markexpr") or "")))


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis profile: {settings.get_current_profile_name()}"


@pytest.fixture(scope="session")
def vllm_src() -> Path:
    """The vLLM files the conformance tests drive, fetched from the wheel once per session;
    the test skips with the reason where the fetch is impossible."""
    from checkers.conformance.vllm_pool import VLLMUnavailableError, fetch_sources

    try:
        return fetch_sources()
    except VLLMUnavailableError as e:
        pytest.skip(f"vLLM sources unavailable here: {e}")


@pytest.fixture(scope="session")
def vllm_pool(vllm_src: Path) -> object:
    """vLLM's ``BlockPool`` modules, loaded from :func:`vllm_src` once per session."""
    from checkers.conformance.vllm_pool import load_block_pool

    return load_block_pool(vllm_src)


@pytest.fixture(autouse=True, scope="session")
def _no_harvested_constants() -> Iterator[None]:
    with fixed_constants():
        yield


CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium driven by Selenium (the HTML viewer's and the docs site's tests);
    skipped, saying why, where it is not installed."""
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


@pytest.fixture(scope="session")
def lru_zombie_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The counterexample bundle ``kvmodel check lru --invariants no-zombie-kv --out DIR``
    writes (``DIR/lru/no-zombie-kv``): searched once per test process for the tests that only
    read it (the viewer's pages, the ITF it carries). Read-only: a test that runs something in
    a bundle writes its own (tests/test_checkers.py)."""
    from kvmodel.cli import main

    out = tmp_path_factory.mktemp("cex")
    assert main(["check", "lru", "--invariants", "no-zombie-kv", "--out", str(out)]) == 0
    return out / "lru" / "no-zombie-kv"


@attrs.define
class ProgressSeen:
    """What a command's progress bars were asked to draw: each bar's ``"what total on"`` and
    every step's name, in order (the bar is still drawn, as the real one)."""

    titles: list[str] = attrs.Factory(list)
    ticks: list[str] = attrs.Factory(list)


@pytest.fixture
def progress_seen(monkeypatch: pytest.MonkeyPatch) -> Callable[[ModuleType], ProgressSeen]:
    """``progress_seen(cli_module)``: that module's ``bar`` counted (:class:`ProgressSeen`)."""
    from kvmodel.progress import bar as real

    def install(module: ModuleType) -> ProgressSeen:
        seen = ProgressSeen()

        def counted(total: int, what: str, *, on: bool) -> Iterator[Callable[[str], None]]:
            seen.titles.append(f"{what} {total} {on}")
            with real(total, what, on=on) as done:

                def step(name: str) -> None:
                    seen.ticks.append(name)
                    done(name)

                yield step

        monkeypatch.setattr(module, "bar", contextlib.contextmanager(counted))
        return seen

    return install
