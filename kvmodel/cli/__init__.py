"""The ``kvmodel`` command line: a parser whose commands are plugged in.

Every command -- the model's own and those other packages contribute (the checkers add
``check``, ``prove``, ``oracle``, ``kv-events``, ``view``, ``discover`` and ``replay --check``) --
is an entry point of the group ``kvmodel.commands``: a function given the parser's subcommands
that adds its own (``kvmodel.cli.common`` has what they share). The model registers first, so a
plugin may extend a model command; the model never imports a plugin.

Exit codes, the same for every command:

* 0 -- done; every verdict asked for held (a check, a proof, a conformance verdict OK);
* 1 -- a negative verdict (a claimed invariant violated, a finding, an illegal log, a violated
  rung, a discovery whose gate nobody passed), a failure inside a policy or kvmodel itself, or
  a reader that closed the output pipe early (no traceback);
* 2 -- bad input: a trace, config, log, policy name, invariant name or usage error, reported
  with the file, line, op and field it is about;
* 3 -- undecided: the oracle could not tell whether a log is legal (an UNKNOWN verdict).

Output files are written to a temporary name and renamed into place only on success, so a
failed run leaves no partial file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points

from kvmodel.cli.common import Subparsers
from kvmodel.errors import (
    ConfigError,
    KVModelError,
    PolicyDefinitionError,
    PolicyNotFoundError,
    TraceError,
)

__all__ = [
    "COMMAND_GROUP",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_UNDECIDED",
    "main",
]

COMMAND_GROUP = "kvmodel.commands"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNDECIDED = 3


def _commands() -> list[EntryPoint]:
    """The registered commands: the model's first (a plugin may extend them), then the rest,
    each by name, so ``--help`` lists them in one order everywhere."""
    found = entry_points(group=COMMAND_GROUP)
    return sorted(found, key=lambda e: (not e.value.startswith("kvmodel."), e.name))


def _parser() -> argparse.ArgumentParser:
    import kvmodel

    doc = __doc__ or ""
    codes = doc[doc.index("Exit codes") : doc.index("Output files")].strip()
    p = argparse.ArgumentParser(
        prog="kvmodel",
        description=(kvmodel.__doc__ or "kvmodel").splitlines()[0],
        epilog=codes,  # the one text of the exit codes, this module's docstring
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="kvmodel COMMAND --help for each"
    )
    commands = _commands()
    if not commands:
        raise ConfigError(
            f"no kvmodel commands are registered (entry-point group {COMMAND_GROUP!r}): "
            "install the package, e.g. pip install -e ."
        )
    for ep in commands:
        add: Callable[[Subparsers], None] = ep.load()
        add(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (a usage error, printed by argparse, is 2)."""
    try:
        parser = _parser()
    except KVModelError as e:
        print(f"kvmodel: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2): a status, like any other
        return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
    func: Callable[[argparse.Namespace], int] = args.func
    # a policy path names a module beside the user (`kvmodel check my_policy:MyPolicy` next to
    # my_policy.py), as `python -m` would find it; appended, so a file in the working directory
    # never shadows an installed module
    with contextlib.suppress(OSError):  # (a working directory since deleted: nothing to add)
        if (cwd := os.getcwd()) not in sys.path:
            sys.path.append(cwd)
    try:
        return func(args)
    except BrokenPipeError:
        # the reader went away (``kvmodel compare | head``): stop like a Unix filter, with no
        # traceback; stdout now points at devnull so the interpreter's last flush cannot fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except (TraceError, ConfigError, PolicyNotFoundError, PolicyDefinitionError) as e:
        print(f"kvmodel: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KVModelError as e:
        print(f"kvmodel: failed: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
