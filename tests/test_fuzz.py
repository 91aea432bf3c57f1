"""Every input gets a clean verdict (kvmodel issue 20): the mutation fuzzer of
checkers/search/fuzz.py over every input format, a Hypothesis search of hostile JSON values in
every field, and one regression test per crash class the fuzzer found. Allowed outcomes: exit 0, a
verdict (1 or 3), or a located error (exit 2, a message, no output file) -- never a traceback,
never a hang."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers.search.fuzz import (
    FAILURE_KINDS,
    TARGETS,
    Outcome,
    campaign,
    run,
    seeds,
)
from checkers.search.schema_inputs import from_schema, schema_traces

SEEDS = seeds()


def test_a_derandomized_campaign_finds_no_crash_and_reaches_every_outcome() -> None:
    c = campaign(500, seed=0)
    assert not c.failures, [f"{f.kind} {f.target}: {f.detail}" for f in c.failures]
    kinds = {k for per in c.counts.values() for k in per}
    assert {"ok", "error", "verdict"} <= kinds  # the slice is not all parse errors
    assert sum(sum(v.values()) for v in c.counts.values()) == 500


@pytest.mark.slow
def test_a_long_campaign_finds_no_crash() -> None:
    c = campaign(20_000, seed=1)
    assert not c.failures, [f"{f.kind} {f.target}: {f.detail}" for f in c.failures]


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    target=st.sampled_from(sorted(TARGETS)),
    pick=st.integers(min_value=0, max_value=10**6),
    value=_JSON,
    delete=st.booleans(),
)
def test_any_json_value_in_any_field_gets_a_clean_outcome(
    target: str, pick: int, value: Any, delete: bool
) -> None:
    files = dict(SEEDS[target][pick % len(SEEDS[target])])
    json_files = sorted(n for n in files if n != "config")  # the TOML config is fuzzed by bytes
    name = json_files[pick % len(json_files)]
    files[name] = _replace_field(files[name], pick, value, delete)
    o = run(TARGETS[target], files)
    assert o.kind not in FAILURE_KINDS, o


def _replace_field(data: bytes, pick: int, value: Any, delete: bool) -> bytes:
    """Field number ``pick`` (over all lines' top-level and nested keys) replaced or deleted."""
    text = data.decode()
    try:
        whole = json.loads(text)
        docs, joined = [whole], False
    except ValueError:
        docs, joined = [json.loads(ln) for ln in text.splitlines() if ln.strip()], True
    slots: list[tuple[Any, Any]] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k in list(x):
                slots.append((x, k))
                walk(x[k])
        elif isinstance(x, list):
            for i in range(len(x)):
                slots.append((x, i))
                walk(x[i])

    for d in docs:
        walk(d)
    if slots:
        parent, key = slots[pick % len(slots)]
        if delete and isinstance(parent, dict):
            del parent[key]
        else:
            parent[key] = value
    out = "\n".join(json.dumps(d) for d in docs) + "\n" if joined else json.dumps(docs[0])
    return out.encode()


# ------------------------------------------------------------- one test per crash class


def _trace(*ops: dict[str, Any]) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in ops).encode()


OPEN = {"op": "open", "t": 0, "ctx": "c", "session": "s", "agent": "main"}


def _append(**msg: Any) -> dict[str, Any]:
    m = {"id": "m", "role": "user", "kind": "user", "tokens": 8} | msg
    return {"op": "append", "t": 1, "ctx": "c", "messages": [m]}


def _located(o: Outcome, *words: str) -> None:
    assert o.kind == "error", o
    for w in words:
        assert w in o.detail, (w, o.detail)


def test_absurd_token_counts_are_an_error_not_a_hang() -> None:
    # 10^30 tokens: packing would run for ever
    o = run(TARGETS["replay"], {"trace": _trace(OPEN, _append(tokens=10**30))})
    _located(o, ":2:", "'append'", "messages[0].tokens", "1,000,000")


def test_a_lone_surrogate_is_an_error_not_an_encoding_crash() -> None:
    o = run(TARGETS["replay"], {"trace": _trace(OPEN, _append(id="\ud800"))})
    _located(o, "messages[0].id", "lone surrogate")
    o = run(TARGETS["replay"], {"trace": _trace(OPEN, _append(hash="a\ud800"))})
    _located(o, "messages[0].hash")


def test_nul_and_line_separators_are_faithful_text() -> None:
    o = run(TARGETS["replay"], {"trace": _trace(OPEN, _append(id="a\x00b\u2028c"))})
    assert o.kind == "ok", o


@pytest.mark.parametrize(
    ("field", "value"),
    [("own_blocks", "\U0001f600"), ("own_blocks", 1e308), ("key", {"a": 1}), ("depth", -3)],
)
def test_a_log_field_of_the_wrong_type_is_located(field: str, value: Any) -> None:
    trace, log = SEEDS["oracle"][0]["trace"], SEEDS["oracle"][0]["log"]
    lines = log.decode().splitlines()
    i = next(
        k
        for k, ln in enumerate(lines)
        if json.loads(ln)["kind"] == ("infer" if field == "own_blocks" else "alloc")
    )
    rec = json.loads(lines[i])
    rec[field] = value
    lines[i] = json.dumps(rec)
    bad = ("\n".join(lines) + "\n").encode()
    for target in ("oracle", "oracle-invariants"):
        o = run(TARGETS[target], {"trace": trace, "log": bad})
        _located(o, f":{i + 1}:", f"field '{field}'")


def test_a_deeply_nested_config_is_a_config_error() -> None:
    files = dict(SEEDS["replay-check"][0])
    files["config"] = b"x = " + b"[" * 100_000 + b"\n"
    o = run(TARGETS["replay-check"], files)
    _located(o, "nested too deeply")


def test_openai_usage_of_the_wrong_type_is_ignored_not_a_crash() -> None:
    data = (Path(__file__).parent / "data" / "openai" / "login_fixture.traj.json").read_text()
    assert '"prompt_tokens": ' in data
    for bad in ("1e400", '"many"', "-5", "true"):
        hostile = data.replace('"prompt_tokens": ', f'"prompt_tokens": {bad}, "x": ', 1)
        o = run(TARGETS["import-openai"], {"openai": hostile.encode()})
        assert o.kind == "ok", (bad, o)  # ignored: sizes fall back to characters


def test_the_schema_states_the_parsers_limits() -> None:
    # one definition: kvmodel.io.trace's constants; the schema repeats them and must agree
    from kvmodel.io.trace import MAX_INT, MAX_MESSAGE_TOKENS, MAX_STRING

    schema = json.loads((Path(__file__).parent.parent / "spec" / "trace.schema.json").read_text())
    found: dict[str, set[int]] = {"maximum": set(), "maxLength": set()}

    def walk(x: Any, name: str | None = None) -> None:
        if isinstance(x, dict):
            if "maximum" in x:
                want = MAX_MESSAGE_TOKENS if name == "tokens" else MAX_INT
                assert x["maximum"] == want, name
                found["maximum"].add(x["maximum"])
            if "maxLength" in x:
                assert x["maxLength"] == MAX_STRING, name
                found["maxLength"].add(x["maxLength"])
            for k, v in x.items():
                if k == "properties":
                    for pk, pv in v.items():
                        walk(pv, pk)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk({k: v for k, v in schema["$defs"].items() if k != "observation"})
    assert found == {"maximum": {MAX_INT, MAX_MESSAGE_TOKENS}, "maxLength": {MAX_STRING}}
    # and the parser enforces each: one over is a located error
    long = "x" * (MAX_STRING + 1)
    o = run(TARGETS["replay"], {"trace": _trace({**OPEN, "session": long})})
    _located(o, "field 'session'", "10,000 characters")
    o = run(TARGETS["replay"], {"trace": _trace(OPEN, _append(), {"op": "remove", "t": 2,
                                "ctx": "c", "index": 0, "count": MAX_INT + 1})})  # fmt: skip
    _located(o, "field 'count'", "10,000,000")


def test_claude_code_usage_of_the_wrong_type_is_ignored_not_a_rejected_trace() -> None:
    path = next((Path(__file__).parent / "data" / "claude_code").glob("*.jsonl"))
    data = path.read_text()
    assert '"input_tokens":' in data
    for bad in ("1e400", "10000000000000000000000000000000", '"many"', "-5"):
        hostile = data.replace('"input_tokens":', f'"input_tokens": {bad}, "x":', 1)
        o = run(TARGETS["import-claude-code"], {"transcript": hostile.encode()})
        assert o.kind == "ok", (bad, o)


def test_a_hostile_agent_id_never_names_a_file_outside_the_session() -> None:
    path = next((Path(__file__).parent / "data" / "claude_code").glob("*.jsonl"))
    data = path.read_text()
    assert '"agentId":' in data
    for bad in ("x" * 300, "../../etc/passwd", "a/b", "\u00e9t\u00e9"):
        hostile = data.replace('"agentId":', f'"agentId": {json.dumps(bad)}, "x":', 1)
        o = run(TARGETS["import-claude-code"], {"transcript": hostile.encode()})
        assert o.kind == "ok", (bad, o)  # no sub-agent file is looked up under that name
    from kvmodel.io.importers.claude_code import _agent_file_name

    assert _agent_file_name("a1b2-c3_d")
    assert not _agent_file_name("../x")
    assert not _agent_file_name("x" * 129)


def test_random_command_lines_get_a_clean_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from checkers.search.fuzz import argv_campaign

    monkeypatch.chdir(tmp_path)
    c = argv_campaign(300, seed=0)
    assert not c.failures, [f.detail for f in c.failures]
    assert {"ok", "error"} <= set(c.counts["argv"])
    # `generate -o 0` and the like write relative paths: into the run's own directory, never
    # into the caller's (they once landed, and were committed, in the repository's root)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--sessions", "999999999999"],  # was a hang
        ["generate", "-o", "/"],  # was a ValueError
        ["generate", "-o", "a" * 5000],  # was an OSError
    ],
)
def test_command_line_crash_classes(argv: list[str]) -> None:
    from checkers.search.fuzz import Target

    o = run(Target("argv", (), lambda f, out: []), {}, argv=argv)
    _located(o)
    assert o.seconds < 5


def test_a_transcript_line_that_is_not_an_object_is_skipped_with_its_line(tmp_path: Path) -> None:
    from kvmodel.io.importers.claude_code import import_claude_code

    src = next((Path(__file__).parent / "data" / "claude_code").glob("*.jsonl"))
    lines = src.read_text().splitlines()
    (tmp_path / "bad").mkdir()
    (tmp_path / "good").mkdir()
    p, q = tmp_path / "bad" / src.name, tmp_path / "good" / src.name
    p.write_text("\n".join([lines[0], "42", *lines[1:]]) + "\n")
    q.write_text("\n".join(lines) + "\n")
    trace, report = import_claude_code([p])
    clean, _ = import_claude_code([q])
    assert trace.ops == clean.ops  # skipping it changed nothing
    assert report.skipped == 1 + import_claude_code([q])[1].skipped
    assert any(f"{p.name}:2: not a JSON object" in w for w in report.warnings)


def test_a_context_never_grows_past_its_token_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # eleven lines of 1M-token messages would otherwise ask packing for 11M tokens of one context
    from kvmodel.cli import main
    from kvmodel.io.trace import MAX_CONTEXT_TOKENS, MAX_MESSAGE_TOKENS

    n = MAX_CONTEXT_TOKENS // MAX_MESSAGE_TOKENS + 1
    lines = ['{"op":"open","t":0,"ctx":"c","session":"s","agent":"main"}']
    lines += [
        json.dumps({"op": "append", "t": 0, "ctx": "c",
                    "messages": [{"id": f"m{i}", "role": "user", "kind": "user",
                                  "tokens": MAX_MESSAGE_TOKENS}]})
        for i in range(n)
    ]  # fmt: skip
    trace = tmp_path / "big.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(trace), "--policy", "lru"]) == 2
    err = capsys.readouterr().err
    assert f"big.jsonl:{n + 1}: op 'append', field 'tokens': context 'c' would hold" in err
    assert f"at most {MAX_CONTEXT_TOKENS:,}" in err


_SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "spec" / "trace.schema.json").read_text()
)


@settings(max_examples=150, suppress_health_check=list(HealthCheck), deadline=None)
@given(data=schema_traces(_SCHEMA), target=st.sampled_from(["replay", "replay-check"]))
def test_every_schema_valid_trace_gets_a_clean_outcome(data: bytes, target: str) -> None:
    # issue 20 item 1: traces generated from spec/trace.schema.json itself (one definition of
    # the format); a schema-valid line may still be refused by the model (an unknown context),
    # but only with a located error
    import jsonschema

    validator = jsonschema.Draft202012Validator(_SCHEMA)
    for line in data.decode().splitlines():
        validator.validate(json.loads(line))  # the generator is right about the schema
    files = {"trace": data}
    if target == "replay-check":
        files["config"] = SEEDS["replay-check"][0]["config"]
    o = run(TARGETS[target], files)
    assert o.kind not in FAILURE_KINDS, o


@settings(max_examples=100, suppress_health_check=list(HealthCheck), deadline=None)
@given(
    records=st.lists(from_schema(_SCHEMA["$defs"]["observation"], _SCHEMA), max_size=8),
    target=st.sampled_from(["oracle", "oracle-invariants"]),
)
def test_every_schema_valid_log_gets_a_clean_outcome(
    records: list[dict[str, Any]], target: str
) -> None:
    files = dict(SEEDS[target][0])
    files["log"] = "".join(json.dumps(r) + "\n" for r in records).encode()
    o = run(TARGETS[target], files)
    assert o.kind not in FAILURE_KINDS, o


def test_from_schema_refuses_what_it_cannot_honour() -> None:
    with pytest.raises(ValueError, match="does not know the keyword"):
        from_schema({"type": "string", "pattern": "^a"})
    with pytest.raises(ValueError, match="follows only"):
        from_schema({"$ref": "other.json#/x"})
