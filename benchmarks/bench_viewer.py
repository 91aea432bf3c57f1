"""The HTML viewer's size and opening time at 100, 1,000 and 10,000 ops. Prints figures;
asserts nothing.

    python benchmarks/bench_viewer.py            # generated agentic traces, default config
    python benchmarks/bench_viewer.py --quick    # a smoke run (about 100 ops)

Each trace is a generated agentic workload (``kvmodel generate --seed S --sessions N``) replayed
under kvtether on the default config (hbm 512 + hbf 4096 blocks of 16 tokens), the config of
issue 61's measurements: the page's size and MB per 1,000 ops, the CPU time to write it, and,
where Debian's chromium and chromedriver are installed, the wall time headless Chromium takes to
load the page and draw its first view (the last step: every delta applied), read as the page's
own ``data-ready`` mark after ``driver.get`` returns.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from kvmodel.config import default_config
from kvmodel.io.viewer import viewer_html
from kvmodel.workloads import AgenticParams, generate_agentic

#: sessions giving about 100, 1,000 and 10,000 ops with seed 3 (108, 1,031 and 10,194)
SIZES = (2, 12, 115)


def _browser() -> Any:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        return None
    os.environ.setdefault("SE_OFFLINE", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,900"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=opts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the ~100-op trace")
    args = ap.parse_args()
    browser = _browser()
    print("viewer page, kvtether, default config (hbm 512 + hbf 4096 blocks of 16 tokens)")
    print(f"  {'ops':>7} {'MB':>7} {'MB/1k ops':>9} {'write CPU s':>11} {'open s':>7}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for sessions in SIZES[:1] if args.quick else SIZES:
                tr = generate_agentic(AgenticParams(seed=3, sessions=sessions))
                t0 = time.process_time()
                page = viewer_html(tr.ops, "kvtether", default_config())
                cpu = time.process_time() - t0
                path = Path(tmp) / f"p{sessions}.html"
                path.write_text(page, encoding="utf-8")
                mb = path.stat().st_size / 1e6
                opened = "-"
                if browser is not None:
                    t1 = time.perf_counter()
                    browser.get(path.resolve().as_uri())
                    ready = browser.find_element("tag name", "body").get_attribute("data-ready")
                    opened = f"{time.perf_counter() - t1:.2f}" if ready == "1" else "failed"
                n = len(tr.ops)
                print(f"  {n:>7,} {mb:>7.2f} {mb / n * 1000:>9.2f} {cpu:>11.1f} {opened:>7}")
    finally:
        if browser is not None:
            browser.quit()
    if browser is None:
        print("  (no chromium/chromedriver: opening times not measured)")


if __name__ == "__main__":
    main()
