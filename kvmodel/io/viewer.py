"""A trace, op by op, as one self-contained HTML page (``kvmodel view``, bundles' ``index.html``).

The page holds its data and code inline -- no network, no CDN -- and shows, at each step: the op
(its index, name and time), what it did (hits, writes, evictions, reclaims, rejections, from the
observation records), every context (open or closed, phase, its materialized chain as cells
coloured by lifecycle class, and its logical sequence: each message with its kind, tokens and
state) and every tier's resident blocks coloured by class
(hover for key, depth and holders). A violation, if one is given, is announced at the top and
its op highlighted. A slider, buttons and the keyboard (arrows, Home, End, ``v`` for the
violation) move between steps.

The data are the ITF states of :mod:`kvmodel.io.itf` (one definition of a state). A trace is hostile
input: its strings reach the page only as JSON inside ``<script type="application/json">`` with
``<``, ``>``, ``&`` and the line separators escaped, and the script writes them with
``textContent``, never as markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from kvmodel.config import EngineConfig
from kvmodel.io.itf import itf_trace
from kvmodel.io.trace import Op
from kvmodel.policy import Policy

__all__ = ["Finding", "viewer_html"]


@attrs.frozen
class Finding:
    """A violation to show: the op it happened at (None: not tied to an op, e.g. found at the
    end of the trace), the invariant and its message."""

    op: int | None
    invariant: str
    message: str


def _embed(data: Any) -> str:
    """JSON safe inside a ``<script>`` element: nothing in it can close the element or start
    markup, whatever the strings hold."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _kind(r: Mapping[str, Any]) -> dict[str, str]:
    """What the page counts of an implementation's record (its kind, a reclaim told apart)."""
    reason = r.get("reason")
    return {"kind": str(r.get("kind")), "reason": reason if isinstance(reason, str) else ""}


def viewer_html(
    ops: Sequence[Op],
    policy: str | Policy,
    config: EngineConfig,
    *,
    finding: Finding | None = None,
    title: str = "kvmodel trace",
    observed: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
) -> str:
    """The page for ``ops`` replayed under ``policy`` on ``config``. ``observed``: another
    implementation's observation records by op (spec T4), counted beside the model's at each
    step, a step where the counts differ marked."""
    itf = itf_trace(ops, policy, config)
    data = {
        "title": title,
        "policy": itf["#meta"]["policy"],
        "stopped": itf["#meta"].get("stopped", ""),
        "tiers": [[t.name, t.blocks] for t in config.tiers],
        "finding": attrs.asdict(finding) if finding is not None else None,
        "observed": None
        if observed is None
        else {str(op): [_kind(r) for r in recs] for op, recs in observed.items()},
        "states": itf["states"],
    }
    return _PAGE.replace("/*DATA*/", _embed(data))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>kvmodel trace</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1em 2em; color: #222; }
h1 { font-size: 1.2em; margin: 0 0 .3em 0; }
#violation { background: #fde2e1; border: 1px solid #c0392b; padding: .4em .6em; margin: .5em 0; }
#violation[hidden] { display: none; }
#nav { display: flex; gap: .5em; align-items: center; margin: .6em 0; }
#step { flex: 1; }
#op-line { font-family: ui-monospace, monospace; padding: .3em .5em; background: #f4f4f4; }
#op-line.violation { background: #c0392b; color: #fff; }
#counts span, #observed-counts span { display: inline-block; margin-right: 1em; }
#observed-counts.differs { background: #fde2e1; }
table { border-collapse: collapse; margin: .5em 0; }
td, th { border-bottom: 1px solid #ddd; padding: .2em .6em; text-align: left; vertical-align: top; }
.cells { display: flex; flex-wrap: wrap; gap: 2px; max-width: 60em; }
.block { width: 14px; height: 14px; border-radius: 2px; border: 1px solid #0002; }
.block.free { background: #fff; }
.block[data-state="active"] { background: #2e86de; }
.block[data-state="suspended"] { background: #82ccdd; }
.block[data-state="pinned"] { background: #8e44ad; }
.block[data-state="temporary"] { background: #f6b93b; }
.block[data-state="expired"] { background: #b2bec3; }
.block[data-state="dead"] { background: #e55039; }
.legend .block { display: inline-block; vertical-align: middle; margin: 0 .2em 0 .8em; }
.tier { margin: .4em 0; }
.msg { display: inline-block; margin: 1px 3px; padding: 0 4px; border-radius: 3px;
  font: 12px ui-monospace, monospace; background: #eee; border-left: 4px solid #999; }
.msg[data-state="active"] { border-color: #2e86de; }
.msg[data-state="suspended"] { border-color: #82ccdd; }
.msg[data-state="pinned"] { border-color: #8e44ad; }
.msg[data-state="temporary"] { border-color: #f6b93b; }
.msg[data-state="expired"] { border-color: #b2bec3; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div id="meta"></div>
<div id="violation" hidden></div>
<div id="nav">
 <button id="first" title="Home">|&#x25C0;</button>
 <button id="prev" title="Left arrow">&#x25C0;</button>
 <input id="step" type="range" min="0" value="0" aria-label="step">
 <button id="next" title="Right arrow">&#x25B6;</button>
 <button id="last" title="End">&#x25B6;|</button>
 <button id="to-violation" title="v" hidden>violation</button>
</div>
<div id="op-line"></div>
<div id="counts"></div>
<div id="observed-counts" hidden></div>
<div class="legend" id="legend"></div>
<h2>Tiers</h2>
<div id="tiers"></div>
<h2>Contexts</h2>
<table id="contexts"><thead><tr><th>context</th><th>open</th><th>phase</th><th>messages</th>
<th>tokens</th><th>valid</th><th>chain (materialized)</th><th>logical sequence</th></tr></thead>
<tbody></tbody></table>
<script id="data" type="application/json">/*DATA*/</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const S = D.states;
const CLASSES = ["active", "suspended", "pinned", "temporary", "expired", "dead"];
const $ = (id) => document.getElementById(id);
function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}
function entries(m) { return m["#map"]; }
function cell(state, title) {
  return el("span", null, {"class": "block", "data-state": state, "title": title});
}
$("title").textContent = D.title;
$("meta").textContent = "policy " + D.policy + ", " + (S.length - 1) + " ops" +
  (D.stopped ? " (stopped: " + D.stopped + ")" : "");
for (const c of CLASSES) { $("legend").append(cell(c, c), el("span", c)); }
const slider = $("step");
slider.max = String(S.length - 1);
const AT = D.finding && D.finding.op !== null ? D.finding.op : null;
if (D.finding) {
  const v = $("violation");
  v.hidden = false;
  v.textContent = "violated " + D.finding.invariant +
    (AT !== null ? " at op " + AT : " at the end") + ": " + D.finding.message;
  $("to-violation").hidden = AT === null;
}
function show(i) {
  i = Math.max(0, Math.min(S.length - 1, i));
  slider.value = String(i);
  const s = S[i];
  const line = $("op-line");
  line.textContent = "step " + i + "/" + (S.length - 1) + "  op " + s.op_index + "  " +
    s.action + "  t=" + Number(Number(s.t).toPrecision(9));
  const bad = AT !== null && s.op_index === AT;
  line.classList.toggle("violation", bad);
  document.body.classList.toggle("at-violation", bad);
  const names = {hit: "hits", alloc: "writes", evict: "evictions", reclaim: "reclaims",
                 reject: "rejections"};
  function tally(records) {
    const n = {hit: 0, alloc: 0, evict: 0, reclaim: 0, reject: 0};
    for (const r of records) {
      if (r.kind === "free" && r.reason === "reclaim") n.reclaim++;
      else if (r.kind in n) n[r.kind]++;
    }
    return n;
  }
  function render(box, prefix, n) {
    box.replaceChildren();
    if (prefix) box.append(el("span", prefix));
    for (const k of Object.keys(n)) {
      box.append(el("span", names[k] + " " + n[k], {"data-kind": k, "data-count": n[k]}));
    }
  }
  const n = tally(s.records);
  render($("counts"), D.observed ? "model:" : "", n);
  if (D.observed) {
    const box = $("observed-counts");
    box.hidden = false;
    const m = tally(D.observed[String(s.op_index)] || []);
    render(box, "implementation:", m);
    const differs = s.op_index >= 0 && Object.keys(n).some((k) => n[k] !== m[k]);
    box.classList.toggle("differs", differs);
  }
  const free = Object.fromEntries(entries(s.free));
  const tiers = $("tiers");
  tiers.replaceChildren();
  for (const [name, size] of D.tiers) {
    const row = el("div", null, {"class": "tier", "data-tier": name});
    const used = entries(s.blocks).filter(([, b]) => b.tier === name);
    row.append(el("div", name + ": " + used.length + " resident, " + free[name] + " free of " +
      size));
    const cells = el("div", null, {"class": "cells"});
    for (const [key, b] of used) {
      cells.append(cell(b.state, key + " depth " + b.depth + " slot " + b.slot + " held by " +
        (b.holders["#set"].join(", ") || "nobody")));
    }
    for (let k = 0; k < free[name]; k++) {
      cells.append(el("span", null, {"class": "block free"}));
    }
    row.append(cells);
    tiers.append(row);
  }
  const byKey = Object.fromEntries(entries(s.blocks));
  const body = $("contexts").tBodies[0];
  body.replaceChildren();
  for (const [cid, c] of entries(s.contexts)) {
    const tr = el("tr", null, {"data-ctx": cid});
    for (const v of [cid, c.open, c.phase, c.messages, c.tokens, c.valid]) tr.append(el("td", v));
    const chain = el("td");
    const cells = el("div", null, {"class": "cells"});
    c.chain.forEach((key, depth) => {
      const b = byKey[key];
      cells.append(cell(b ? b.state : "dead", key + " depth " + depth));
    });
    chain.append(cells);
    tr.append(chain);
    const seq = el("td", null, {"class": "sequence"});
    for (const m of c.sequence) {
      seq.append(el("span", m.id + " " + m.kind + " " + m.tokens,
        {"class": "msg", "data-state": m.state, "title": m.state}));
    }
    tr.append(seq);
    body.append(tr);
  }
}
slider.addEventListener("input", () => show(Number(slider.value)));
$("first").onclick = () => show(0);
$("prev").onclick = () => show(Number(slider.value) - 1);
$("next").onclick = () => show(Number(slider.value) + 1);
$("last").onclick = () => show(S.length - 1);
$("to-violation").onclick = () => show(AT + 1);
document.addEventListener("keydown", (e) => {
  const i = Number(slider.value);
  if (e.key === "ArrowRight") show(i + 1);
  else if (e.key === "ArrowLeft") show(i - 1);
  else if (e.key === "Home") show(0);
  else if (e.key === "End") show(S.length - 1);
  else if (e.key === "v" && AT !== null) show(AT + 1);
});
show(AT !== null ? AT + 1 : 0);
</script>
</body>
</html>
"""
