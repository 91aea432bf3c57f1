"""Trace inputs generated from the trace format's JSON Schema (spec/trace-format.md, T3).

:func:`from_schema` turns the subset of JSON Schema that ``spec/trace.schema.json`` uses into a
Hypothesis strategy of valid JSON values, and :func:`schema_traces` builds whole trace files of
schema-valid lines from it. ``tests/test_fuzz.py`` feeds them to the command line next to the
mutation fuzzer's damaged inputs (:mod:`checkers.search.fuzz`): a line the schema accepts must be
judged by the model or refused with a located error, never crash it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = ["SCHEMA_NAMES", "from_schema", "schema_traces"]

#: per property name, the values its strings are drawn from besides arbitrary text: a trace of
#: arbitrary strings names no context twice and stops at its second line; small pools reach
#: the model
SCHEMA_NAMES: Mapping[str, tuple[str, ...]] = {
    **dict.fromkeys(("ctx", "src", "into", "parent"), ("c0", "c1", "c2", "c3")),
    "session": ("s0", "s1"),
    "id": ("m0", "m1", "m2", "m3"),
    "hash": ("h0", "h1"),
}


def from_schema(
    schema: Mapping[str, Any], root: Mapping[str, Any] | None = None, key: str | None = None
) -> st.SearchStrategy[Any]:
    """A Hypothesis strategy of JSON values valid against ``schema`` (the subset of JSON Schema
    that spec/trace.schema.json uses: ``$ref`` to ``#/$defs/...``, ``oneOf``, ``const``,
    ``enum``, ``type`` (one or a list of null/object/array/string/integer/number/boolean) with
    ``properties``, ``required``, ``additionalProperties`` (false, or absent: a few extra keys),
    ``items``, ``minItems``, ``minLength``, ``maxLength``, ``minimum``, ``maximum``,
    ``exclusiveMinimum``). Any other keyword is an
    error, not a silently wider strategy. Small values and :data:`SCHEMA_NAMES` (by the
    property ``key`` a value is for) are preferred so that generated traces get past their
    first line; every bound is still reached."""
    root = schema if root is None else root
    known = {
        "$ref", "oneOf", "const", "enum", "type", "properties", "required",
        "additionalProperties", "items", "minItems", "minLength", "maxLength", "minimum",
        "maximum", "exclusiveMinimum", "description", "title", "$schema", "$id", "$defs",
    }  # fmt: skip
    unknown = set(schema) - known
    if unknown:
        raise ValueError(f"from_schema does not know the keyword(s) {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"from_schema follows only '#/$defs/...' references (got {ref!r})")
        return st.deferred(lambda: from_schema(root["$defs"][ref[len("#/$defs/") :]], root, key))
    if "oneOf" in schema:
        return st.one_of([from_schema(s, root, key) for s in schema["oneOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    typ = schema.get("type")
    if isinstance(typ, list):  # one of several types, the other keywords applying to each
        return st.one_of([from_schema({**schema, "type": t}, root, key) for t in typ])
    if typ == "null":
        return st.none()
    if typ == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        listed = st.fixed_dictionaries(
            {k: from_schema(v, root, k) for k, v in props.items() if k in required},
            optional={k: from_schema(v, root, k) for k, v in props.items() if k not in required},
        )
        if schema.get("additionalProperties", True) is False:
            return listed
        extra = st.dictionaries(  # an open object (the header): a few more keys of any JSON
            st.text(max_size=8).filter(lambda k: k not in props),
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            max_size=2,
        )
        return st.tuples(listed, extra).map(lambda p: {**p[1], **p[0]})
    if typ == "array":
        lo = int(schema.get("minItems", 0))
        items = from_schema(schema.get("items", {}), root, key)
        return st.lists(items, min_size=lo, max_size=lo + 3)
    if typ == "string":
        lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
        text = st.text(min_size=lo, max_size=min(hi, lo + 12) if hi is not None else lo + 12)
        edge = st.just("x" * hi) if hi is not None else st.nothing()
        pool = [n for n in SCHEMA_NAMES.get(key or "", ()) if lo <= len(n)]
        other = text | edge
        return st.one_of(st.sampled_from(pool), st.sampled_from(pool), other) if pool else other
    if typ == "integer":
        lo = int(schema.get("minimum", 0))
        hi = schema.get("maximum")
        small = st.integers(lo, lo + 40 if hi is None else min(hi, lo + 40))
        edges = st.sampled_from([lo] if hi is None else [lo, hi])
        return small | edges | st.integers(lo, hi if hi is not None else lo + 10**9)
    if typ == "number":
        flo = float(schema.get("exclusiveMinimum", schema.get("minimum", 0.0)))
        open_lo = "exclusiveMinimum" in schema
        return st.floats(
            min_value=flo, max_value=1e9, exclude_min=open_lo, allow_nan=False
        ) | st.integers(int(flo) + (1 if open_lo else 0), 50).map(float)
    if typ == "boolean":
        return st.booleans()
    raise ValueError(f"from_schema: no strategy for {dict(schema)!r}")


def schema_traces(schema: Mapping[str, Any]) -> st.SearchStrategy[bytes]:
    """Trace files of schema-valid lines: an optional header, then ops. Half of them have their
    times made non-decreasing and begin by opening ``c0``..``c2`` (themselves schema-valid ops),
    so that they are judged by the model, not only by the first reference to a context."""
    ops = st.lists(from_schema(schema["$defs"]["op"], schema), min_size=1, max_size=12)
    header = st.none() | from_schema(schema["$defs"]["header"], schema)

    def build(args: tuple[Any, list[dict[str, Any]], bool]) -> bytes:
        head, lines, ordered = args
        if ordered:
            opens = [
                {"op": "open", "t": 0.0, "ctx": f"c{i}", "session": f"s{i % 2}", "agent": "main"}
                for i in range(3)
            ]
            lines = [{**op, "t": float(i)} for i, op in enumerate(opens + lines)]
        docs = ([head] if head is not None else []) + lines
        return "".join(json.dumps(d) + "\n" for d in docs).encode()

    return st.tuples(header, ops, st.booleans()).map(build)
