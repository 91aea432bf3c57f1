"""MkDocs hooks for the documentation site (mkdocs.yml).

The site mirrors the repository's layout: README.md is the home page, ``docs/``, ``spec/`` and
``examples/`` keep their paths, so every relative link works the same on GitHub and in the site,
and ``mkdocs build --strict`` fails on a link that resolves in neither. The CLI reference is
generated here from the real parser (each command's ``--help``), never written by hand.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]

#: what the site holds, as (directory under the repository, file name patterns)
SOURCES = (
    (".", ("README.md", "CHANGELOG.md")),
    ("docs", ("*.md", "*.png")),
    ("docs/reference", ("*.md",)),
    ("spec", ("*.md", "*.json")),
    ("examples", ("*.py", "*.out")),
)

#: the help text's width: the same page on every terminal
HELP_COLUMNS = "100"

_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj):(?=<code>)")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """The repository's files at their own paths, and the generated CLI reference; the theme's
    own files (already added, from outside ``docs_dir``) stay."""
    docs = Path(config["docs_dir"]).resolve()
    out = Files(
        [f for f in files if f.abs_src_path is None or docs not in Path(f.abs_src_path).parents]
    )
    for folder, patterns in SOURCES:
        for pattern in patterns:
            for path in sorted((ROOT / folder).glob(pattern)):
                rel = path.relative_to(ROOT).as_posix()
                out.append(File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    out.append(File.generated(config, "docs/reference/cli.md", content=cli_reference()))
    return out


def cli_reference() -> str:
    """Every command's ``--help``, in the order ``kvmodel --help`` lists them."""
    from kvmodel.cli import _parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS  # argparse wraps to the terminal's width
    try:
        parser = _parser()
        parser.prog = "kvmodel"
        sub = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
        assert isinstance(sub.choices, dict)
        parts = [
            "# Command line\n",
            "Generated from the parser when the site is built (`kvmodel COMMAND --help` prints "
            "the same). Exit codes: 0 ok, 1 a verdict against (a claim violated, a divergence), "
            "2 bad input or usage, 3 undecided or a checker error.\n",
            f"```text\n{parser.format_help()}```\n",
        ]
        for name, cmd in sub.choices.items():
            cmd.prog = f"kvmodel {name}"
            parts.append(f"## kvmodel {name}\n\n```text\n{cmd.format_help()}```\n")
        return "\n".join(parts)
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def on_page_content(html: str, page: Page, **kwargs: Any) -> str:
    """Sphinx-style roles in docstrings (``:func:`replay```) read as the code they name."""
    return _ROLE.sub("", html)
