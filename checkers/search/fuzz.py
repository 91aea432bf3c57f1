"""A mutation fuzzer of every input the ``kvmodel`` command line reads (kvmodel issue 20).

Seeds are valid inputs of each format -- generated traces, their observation logs, vLLM KV
events, engine configs, the Claude Code and OpenAI-style fixtures of ``tests/data`` -- and
:func:`mutate` damages them the way hostile or broken producers do: a JSON value replaced by one
of another type or of an extreme size (huge or negative numbers, NaN, deep nesting, long strings,
lone surrogates, NUL, U+2028), a key deleted, lines duplicated, dropped or swapped, bytes flipped
or truncated, invalid UTF-8.

:func:`run` calls :func:`kvmodel.cli.main` in-process on the files and classifies the
:class:`Outcome`. The contract (spec/trace-format.md §T3): exit 0, a verdict (exit 1 or 3), or a
located error (exit 2, a message on stderr, and no output file left behind) -- never an uncaught
exception, never a hang (:data:`HANG_SECONDS`). ``tests/test_fuzz.py`` runs a derandomized slice
and ``benchmarks/bench_fuzz.py`` a campaign. Trace files generated from the JSON Schema
itself come from :mod:`checkers.search.schema_inputs`.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import attrs
import numpy as np

from kvmodel.errors import HarnessInterrupt

__all__ = [
    "ARGV_GRAMMAR",
    "ARG_VALUES",
    "FAILURE_KINDS",
    "HANG_SECONDS",
    "TARGETS",
    "Campaign",
    "Outcome",
    "Target",
    "argv_campaign",
    "campaign",
    "mutate",
    "random_argv",
    "run",
    "seeds",
]

#: an input that keeps a command busy longer than this is a hang (seed inputs take < 0.5 s)
HANG_SECONDS = 10.0

_DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


@attrs.frozen
class Target:
    """One command: its argv from the input file paths (``files[name]``) and an output path
    (or None), and the names of its input files."""

    name: str
    inputs: tuple[str, ...]
    argv: Callable[[dict[str, str], str], list[str]]
    writes: bool = False  # the command writes ``out`` (it must not exist after exit 2)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("replay", ("trace",), lambda f, o: ["replay", f["trace"], "--policy", "kvtether"]),
        Target(
            "replay-check",
            ("trace", "config"),
            lambda f, o: ["replay", f["trace"], "--check", "--config", f["config"], "--json"],
        ),
        Target(
            "replay-observations",
            ("trace",),
            lambda f, o: ["replay", f["trace"], "--observations", o],
            writes=True,
        ),
        Target(
            "oracle",
            ("trace", "log"),
            lambda f, o: ["oracle", f["trace"], f["log"], "--policy", "lru"],
        ),
        Target(
            "oracle-invariants",
            ("trace", "log"),
            lambda f, o: ["oracle", f["trace"], f["log"], "--invariants-only", "--json"],
        ),
        Target("kv-events", ("events",), lambda f, o: ["kv-events", f["events"], "--json"]),
        Target(
            "import-claude-code",
            ("transcript",),
            lambda f, o: ["import", "claude-code", f["transcript"], "-o", o],
            writes=True,
        ),
        Target(
            "import-openai",
            ("openai",),
            lambda f, o: ["import", "openai", f["openai"], "-o", o],
            writes=True,
        ),
        # the newer commands that read a trace (issue 63 item 5)
        Target(
            "generate-from-traces",
            ("trace",),
            lambda f, o: ["generate", "--from-traces", f["trace"], "--sessions", "3", "-o", o],
            writes=True,
        ),
        Target("stats", ("trace",), lambda f, o: ["stats", f["trace"]]),
        Target(
            "view",
            ("trace", "config"),
            lambda f, o: ["view", f["trace"], "--config", f["config"], "--check", "-o", o],
            writes=True,
        ),
        Target(
            "export-itf",
            ("trace", "config"),
            lambda f, o: [
                "export-itf",
                f["trace"],
                "--config",
                f["config"],
                "--ops",
                "2:9",
                "--vars",
                "blocks,free",
                "-o",
                o,
            ],
            writes=True,
        ),
    )
}


@attrs.frozen
class Outcome:
    target: str
    code: int | None  # the exit status; None: an uncaught exception or a hang
    kind: str  # ok | verdict | error | crash | hang | left-output | mute-error
    detail: str = ""
    seconds: float = 0.0


class _Hang(HarnessInterrupt):
    """Raised by the alarm; a BaseException so that no ``except Exception`` swallows it."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


def run(
    target: Target,
    files: dict[str, bytes],
    *,
    hang_seconds: float = HANG_SECONDS,
    argv: Sequence[str] | None = None,
) -> Outcome:
    """Run ``target`` on ``files`` (name -> content) in a fresh directory and classify it.
    ``argv`` replaces the target's own command line (``{NAME}`` is the path of file NAME,
    ``{out}`` the output path). The command runs with that directory as its working directory,
    so an output path the command line names relatively (``generate -o 0``) is written there and
    removed with it, never into the caller's directory."""
    from kvmodel.cli import main

    with tempfile.TemporaryDirectory(prefix="kvmodel-fuzz-") as tmp:
        paths = {}
        for name, data in files.items():
            p = Path(tmp) / f"{name}.in"
            p.write_bytes(data)
            paths[name] = str(p)
        out = str(Path(tmp) / "out.jsonl")
        if argv is None:
            argv = target.argv(paths, out)
        else:
            subs = {**{f"{{{k}}}": v for k, v in paths.items()}, "{out}": out}
            argv = [subs.get(a, a) for a in argv]
        err = io.StringIO()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, hang_seconds)
        t0 = time.perf_counter()
        try:
            with (
                contextlib.chdir(tmp),
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(err),
            ):
                code = main(list(argv))
        except _Hang:
            return Outcome(target.name, None, "hang", f"> {hang_seconds:g} s", hang_seconds)
        except SystemExit as e:  # argparse's own exits are returned by main, but be sure
            code = e.code if isinstance(e.code, int) else 2
        except BaseException as e:
            tb = traceback.extract_tb(e.__traceback__)
            where = next(
                (f"{Path(fr.filename).name}:{fr.lineno} {fr.name}" for fr in reversed(tb)
                 if "/kvmodel/" in fr.filename or "/checkers/" in fr.filename
                 or "/policies/" in fr.filename),
                "?",
            )  # fmt: skip
            return Outcome(
                target.name,
                None,
                "crash",
                f"{type(e).__name__} @ {where}: {str(e)[:200]}",
                time.perf_counter() - t0,
            )
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        dt = time.perf_counter() - t0
        if code == 2:
            if target.writes and Path(out).exists():
                return Outcome(target.name, code, "left-output", err.getvalue()[:200], dt)
            if "error" not in err.getvalue():
                return Outcome(target.name, code, "mute-error", err.getvalue()[:200], dt)
            return Outcome(target.name, code, "error", err.getvalue().strip()[:200], dt)
        if code in (1, 3):
            return Outcome(target.name, code, "verdict", "", dt)
        if code == 0:
            return Outcome(target.name, code, "ok", "", dt)
        return Outcome(target.name, code, "crash", f"unexpected exit status {code}", dt)


# ---------------------------------------------------------------- seeds


def seeds() -> dict[str, list[dict[str, bytes]]]:
    """Valid inputs per target (each a name -> content mapping)."""
    from kvmodel.cli import main
    from kvmodel.io.trace import iter_trace_lines
    from kvmodel.workloads.random_ops import RandomParams, random_trace

    traces = []
    logs = []
    with tempfile.TemporaryDirectory(prefix="kvmodel-fuzz-seed-") as tmp:
        for s in range(3):
            t = random_trace(RandomParams(seed=s, ops=30))
            text = "".join(line + "\n" for line in iter_trace_lines(t)).encode()
            tp, lp = Path(tmp) / f"t{s}.jsonl", Path(tmp) / f"l{s}.jsonl"
            tp.write_bytes(text)
            with contextlib.redirect_stdout(io.StringIO()):
                main(["replay", str(tp), "--policy", "lru", "--observations", str(lp)])
            traces.append(text)
            logs.append(lp.read_bytes())
    config = b'block_size = 16\n[[tiers]]\nname = "hbm"\nblocks = 64\n'
    events = (
        "\n".join(
            json.dumps(e)
            for e in (
                {"type": "BlockStored", "block_hashes": ["a", "b", "c"], "parent_block_hash": None},
                {"type": "BlockStored", "block_hashes": ["d"], "parent_block_hash": "b"},
                {"type": "BlockRemoved", "block_hashes": ["c", "d"]},
                {"type": "AllBlocksCleared"},
                {"type": "BlockStored", "block_hashes": ["x"], "parent_block_hash": None},
            )
        )
        + "\n"
    ).encode()
    cc = sorted((_DATA / "claude_code").glob("*.jsonl"))
    oa = sorted((_DATA / "openai").glob("*"))
    return {
        "replay": [{"trace": t} for t in traces],
        "replay-check": [{"trace": t, "config": config} for t in traces],
        "replay-observations": [{"trace": t} for t in traces],
        "oracle": [{"trace": t, "log": lg} for t, lg in zip(traces, logs, strict=True)],
        "oracle-invariants": [{"trace": t, "log": lg} for t, lg in zip(traces, logs, strict=True)],
        "kv-events": [{"events": events}],
        "import-claude-code": [{"transcript": p.read_bytes()} for p in cc],
        "import-openai": [{"openai": p.read_bytes()} for p in oa if p.is_file()],
        "generate-from-traces": [{"trace": t} for t in traces],
        "stats": [{"trace": t} for t in traces],
        "view": [{"trace": t, "config": config} for t in traces],
        "export-itf": [{"trace": t, "config": config} for t in traces],
    }


# ---------------------------------------------------------------- mutations


def _deep(n: int) -> Any:
    x: Any = 0
    for _ in range(n):
        x = [x]
    return x


#: values a hostile producer puts where another was expected
HOSTILE: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    -(2**70),
    2**70,
    10**30,
    1e308,
    -1e308,
    0.5,
    math.nan,
    math.inf,
    "",
    "x" * 5000,
    "\ud800",  # a lone surrogate (JSON "\\ud800")
    "\u2028\u2029",
    "a\x00b",
    "\U0001f600",
    [],
    {},
    [1, "a", None],
    {"op": "infer"},
    _deep(60),
)


def _paths(x: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _paths(v, (*prefix, i))


def _set(x: Any, path: Sequence[Any], value: Any, *, delete: bool = False) -> Any:
    if not path:
        return value
    parent = x
    for k in path[:-1]:
        parent = parent[k]
    if delete and isinstance(parent, dict):
        parent.pop(path[-1], None)
    elif delete and isinstance(parent, list):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return x


def _json_mutation(doc: Any, rng: np.random.Generator) -> Any:
    paths = list(_paths(doc))
    path = paths[int(rng.integers(len(paths)))]
    choice = rng.random()
    if choice < 0.15 and path:
        return _set(doc, path, None, delete=True)
    value = HOSTILE[int(rng.integers(len(HOSTILE)))]
    return _set(doc, path, value)


def _dumps(doc: Any) -> str:
    return json.dumps(doc, allow_nan=True)


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One damaging edit of ``data`` (JSON-aware when a line or the whole file parses)."""
    r = rng.random()
    text = data.decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    if r < 0.55:  # one JSON value of a line (or the whole document) replaced or deleted
        try:
            whole = json.loads(text)
        except (ValueError, RecursionError):
            whole = None
        if whole is not None and (len(lines) < 3 or rng.random() < 0.3):
            return _dumps(_json_mutation(whole, rng)).encode("utf-8", "surrogatepass")
        idx = [i for i, ln in enumerate(lines) if ln.strip()]
        if not idx:
            return data + b"{"
        i = idx[int(rng.integers(len(idx)))]
        try:
            doc = json.loads(lines[i])
        except (ValueError, RecursionError):
            return data[: len(data) // 2]
        lines[i] = _dumps(_json_mutation(doc, rng))
        return "\n".join(lines).encode("utf-8", "surrogatepass")
    if r < 0.7:  # lines duplicated, dropped or swapped
        if len(lines) < 2:
            return data * 2
        i, j = (int(x) for x in rng.integers(len(lines), size=2))
        how = rng.integers(3)
        if how == 0:
            lines.insert(j, lines[i])
        elif how == 1:
            del lines[i]
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines).encode("utf-8", "surrogateescape")
    if r < 0.8:  # truncated
        return data[: int(rng.integers(len(data) + 1))]
    if r < 0.9:  # bytes flipped or invalid UTF-8 inserted
        b = bytearray(data)
        if b and rng.random() < 0.5:
            k = int(rng.integers(len(b)))
            b[k] ^= 1 << int(rng.integers(8))
        else:
            k = int(rng.integers(len(b) + 1))
            b[k:k] = bytes([0xFF, 0xC3, 0x28, 0x00])
        return bytes(b)
    # a very long line, or deep nesting, appended
    extra = "[" * 100_000 if rng.random() < 0.5 else '{"op":"open","t":0,"ctx":"' + "c" * 200_000
    return data + extra.encode() + b"\n"


@attrs.frozen
class Campaign:
    inputs: int
    counts: dict[str, dict[str, int]]  # target -> outcome kind -> count
    failures: list[Outcome]  # crash, hang, left-output, mute-error (the first few per place)
    seconds: float


FAILURE_KINDS = frozenset({"crash", "hang", "left-output", "mute-error"})


def campaign(
    n: int,
    seed: int = 0,
    targets: Sequence[str] | None = None,
    *,
    max_mutations: int = 3,
    hang_seconds: float = HANG_SECONDS,
    keep: Path | None = None,
) -> Campaign:
    """``n`` mutated inputs, round-robin over ``targets``, each with 1..``max_mutations``
    mutations of one seed file; every random choice from one seeded generator."""
    rng = np.random.default_rng(seed)
    base = seeds()
    names = list(targets or TARGETS)
    counts: dict[str, dict[str, int]] = {t: {} for t in names}
    failures: list[Outcome] = []
    seen: set[tuple[str, str]] = set()
    t0 = time.perf_counter()
    for k in range(n):
        name = names[k % len(names)]
        pool = base[name]
        files = dict(pool[int(rng.integers(len(pool)))])
        victim = sorted(files)[int(rng.integers(len(files)))]
        for _ in range(1 + int(rng.integers(max_mutations))):
            files[victim] = mutate(files[victim], rng)
        o = run(TARGETS[name], files, hang_seconds=hang_seconds)
        counts[name][o.kind] = counts[name].get(o.kind, 0) + 1
        if o.kind in FAILURE_KINDS:
            place = (o.kind, o.detail.split(":")[0] if o.kind == "crash" else o.target)
            if place not in seen:
                seen.add(place)
                if keep is not None:  # the failing input, to reproduce
                    d = keep / f"{k}-{name}"
                    d.mkdir(parents=True, exist_ok=True)
                    for fname, data in files.items():
                        (d / fname).write_bytes(data)
                failures.append(attrs.evolve(o, detail=f"{o.detail} [input {k}]"))
    return Campaign(n, counts, failures, time.perf_counter() - t0)


# ---------------------------------------------------------------- command lines

#: per command: its arguments and options (an option is followed by a value drawn from
#: :data:`ARG_VALUES`, or not); ``{trace}`` etc. are the seed files, ``{out}`` the output
ARGV_GRAMMAR: dict[str, tuple[str, ...]] = {
    "replay": ("{trace}", "--policy", "--config", "--check", "--json", "--observations"),
    "oracle": ("{trace}", "{log}", "--policy", "--invariants-only", "--invariant", "--config"),
    "kv-events": ("{events}", "--json"),
    "generate": ("--seed", "--sessions", "--turns", "-o", "--preset"),
    "policies": ("--json",),
    "export-itf": ("{trace}", "--config", "--vars", "--ops", "-o", "--policy"),
    "view": ("{trace}", "--config", "--check", "--observations", "-o", "--policy"),
    "stats": ("{trace}", "--presets", "--fit"),
    "import": ("openai", "claude-code", "{trace}", "-o"),
}

#: values a hostile or careless user types
ARG_VALUES: tuple[str, ...] = (
    "0", "-1", "1e400", "nan", "inf", "abc", "", "999999999999", "{trace}", "{config}",
    "{out}", "/nonexistent/x", "/", "kvtether", "lru", "x:y", "checkers.search.mutants:Nope",
    "no-zombie-kv", "bogus,no-zombie-kv", "\udcff", "a" * 5000, "2",
)  # fmt: skip


def random_argv(rng: np.random.Generator) -> list[str]:
    """One command line of :data:`ARGV_GRAMMAR` with hostile values."""
    cmd = list(ARGV_GRAMMAR)[int(rng.integers(len(ARGV_GRAMMAR)))]
    argv = [cmd]
    words = ARGV_GRAMMAR[cmd]
    for _ in range(1 + int(rng.integers(4))):
        w = words[int(rng.integers(len(words)))]
        argv.append(w)
        if w.startswith("-") and rng.random() < 0.8:
            argv.append(ARG_VALUES[int(rng.integers(len(ARG_VALUES)))])
    return argv


def argv_campaign(n: int, seed: int = 0) -> Campaign:
    """``n`` random command lines (:func:`random_argv`) over valid seed files."""
    rng = np.random.default_rng(seed)
    base = seeds()
    files = {
        "trace": base["replay"][0]["trace"],
        "log": base["oracle"][0]["log"],
        "config": base["replay-check"][0]["config"],
        "events": base["kv-events"][0]["events"],
    }
    target = Target("argv", tuple(files), lambda f, o: [], writes=False)
    counts: dict[str, dict[str, int]] = {"argv": {}}
    failures: list[Outcome] = []
    t0 = time.perf_counter()
    for k in range(n):
        argv = random_argv(rng)
        o = run(target, files, argv=argv)
        counts["argv"][o.kind] = counts["argv"].get(o.kind, 0) + 1
        if o.kind in FAILURE_KINDS:
            failures.append(attrs.evolve(o, detail=f"{o.detail} [input {k}: {argv[:6]!r:.200}]"))
    return Campaign(n, counts, failures, time.perf_counter() - t0)
