"""The paper-style comparison: KVTether vs LRU vs MORI vs Belady (cache), and Lachesis vs
Lachesis-det vs HBM-first vs OPT per GPU-memory split (placement), with the papers' reported
ranges printed beside the measured ratios. A mismatch in magnitude is reported, not tuned away.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from kvmodel.config import EngineConfig
from kvmodel.io.trace import Trace
from kvmodel.progress import bar
from kvmodel.replay import replay
from kvmodel.studies.metrics import Metrics, compute_metrics
from kvmodel.studies.presets import hardware_config
from kvmodel.studies.sweep import run_tasks

__all__ = ["CACHE_POLICIES", "PLACEMENT_POLICIES", "Comparison", "compare", "measure"]

CACHE_POLICIES = ("kvtether", "lru", "mori", "belady")
PLACEMENT_POLICIES = ("lachesis", "lachesis-det", "hbm-first", "opt-placement")

#: what the papers report, for the side-by-side lines
PAPER = {
    "kvtether_cost_vs_lru": "-40.0% on average (KVTether)",
    "kvtether_cost_vs_mori": "-33.2% on average (KVTether)",
    "lachesis_years_vs_hbm_first": "1.19-3.13x (Lachesis)",
}


@attrs.frozen
class Comparison:
    cache: dict[str, Metrics]
    placement: dict[str, dict[str, Metrics]]  # split -> policy -> metrics

    def ratios(self) -> dict[str, Any]:
        c = self.cache
        out: dict[str, Any] = {}
        for other in ("lru", "mori"):
            if {"kvtether", other} <= set(c):
                k, o = c["kvtether"], c[other]
                out[f"kvtether_cost_vs_{other}"] = k.cost_usd / o.cost_usd - 1
                # the policy-dependent part alone (spec E1): output dilutes the whole
                out[f"kvtether_input_cost_vs_{other}"] = k.input_cost_usd / o.input_cost_usd - 1
        years = {}
        for split, row in self.placement.items():
            a = row.get("lachesis") or row.get("lachesis-det")
            b = row.get("hbm-first")
            if a and b and a.device_years.get("hbf") and b.device_years.get("hbf"):
                years[split] = a.device_years["hbf"] / b.device_years["hbf"]  # type: ignore[operator]
        out["lachesis_years_vs_hbm_first"] = years
        return out

    def render(self) -> str:
        lines = [
            "cache policies (single workload):",
            f"  {'policy':<14}{'hit rate':>9}{'cost $':>10}{'input $':>10}{'rejected':>9}"
            f"{'TTFT ms':>9}{'queued':>9}{'regrets':>9}",
        ]
        for p, m in self.cache.items():
            lines.append(
                f"  {p:<14}{m.token_hit_rate:>9.1%}{m.cost_usd:>10.3f}{m.input_cost_usd:>10.3f}"
                f"{m.rejected:>9}{m.ttft_s_mean * 1000:>9.0f}"
                f"{m.queued_ttft_s_mean * 1000:>9.0f}{m.regretted_evictions:>9}"
            )
        if "belady" in self.cache:
            best = self.cache["belady"].token_hit_rate
            for p, m in self.cache.items():
                if p != "belady" and best:
                    lines.append(
                        f"  {p} achieves {m.token_hit_rate / best:.1%} of Belady's hit rate"
                    )
        lines.append("placement per split (HBF device-years; HBM share of block writes):")
        for split, row in self.placement.items():
            cells = []
            for p, m in row.items():
                y = m.device_years.get("hbf")
                share = m.writes.get("hbm", 0) / max(1, sum(m.writes.values()))
                cells.append(f"{p} {y:.3g}y/{share:.0%}" if y else f"{p} -")
            lines.append(f"  {split:<5} " + "  ".join(cells))
        r = self.ratios()
        lines.append("measured vs paper:")
        for other in ("lru", "mori"):
            k = f"kvtether_cost_vs_{other}"
            if k in r:
                share = self.cache[other].output_cost_usd / self.cache[other].cost_usd
                lines.append(
                    f"  {k}: {r[k]:+.1%}   (paper: {PAPER[k]}); input side alone "
                    f"{r[f'kvtether_input_cost_vs_{other}']:+.1%} (output is {share:.0%} of "
                    f"{other}'s cost here)"
                )
        ys = r.get("lachesis_years_vs_hbm_first") or {}
        if ys:
            lines.append(
                "  lachesis_years_vs_hbm_first: "
                + ", ".join(f"{s} {v:.2f}x" for s, v in ys.items())
                + f"   (paper: {PAPER['lachesis_years_vs_hbm_first']})"
            )
        return "\n".join(lines)

    def plot(self, out: Path) -> list[Path]:
        """Two PNG bar charts in the papers' style (needs matplotlib)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out.mkdir(parents=True, exist_ok=True)
        paths = []
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
        names = list(self.cache)
        ax[0].bar(names, [self.cache[p].cost_usd for p in names])
        ax[0].set_title("estimated task cost ($)")
        ax[1].bar(names, [self.cache[p].token_hit_rate for p in names])
        ax[1].set_title("token hit rate")
        fig.tight_layout()
        paths.append(out / "cache.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
        splits = list(self.placement)
        if splits:
            pols = list(self.placement[splits[0]])
            fig, ax = plt.subplots(figsize=(8, 3.2))
            w = 0.8 / max(1, len(pols))
            for i, p in enumerate(pols):
                ys = [self.placement[s][p].device_years.get("hbf") or 0.0 for s in splits]
                ax.bar([x + i * w for x in range(len(splits))], ys, width=w, label=p)
            ax.set_xticks([x + w * (len(pols) - 1) / 2 for x in range(len(splits))], splits)
            ax.set_ylabel("HBF device-years")
            ax.legend(fontsize=7)
            fig.tight_layout()
            paths.append(out / "placement.png")
            fig.savefig(paths[-1], dpi=120)
            plt.close(fig)
        return paths


def measure(trace: Trace, policy: str, config: EngineConfig) -> Metrics:
    """One cell of a comparison: the metrics of ``trace`` under ``policy`` on ``config``."""
    return compute_metrics(replay(trace, policy, config))


def compare(
    trace: Trace,
    cache_config: EngineConfig,
    *,
    splits: Sequence[str],
    model: str,
    scale: float,
    cache_policies: Sequence[str] = CACHE_POLICIES,
    placement_policies: Sequence[str] = PLACEMENT_POLICIES,
    progress: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
) -> Comparison:
    """Every cell is an independent task (:func:`kvmodel.studies.sweep.run_tasks`): serial by
    default, on a Dask cluster with ``workers`` or ``scheduler``; the same result either way.
    ``progress``: a bar on stderr (:mod:`kvmodel.progress`)."""
    tasks: list[tuple[str, EngineConfig]] = [(p, cache_config) for p in cache_policies]
    cells: list[tuple[str | None, str]] = [(None, p) for p in cache_policies]
    for s in splits:
        cfg = hardware_config(s, model, scale=scale)
        tasks += [(p, cfg) for p in placement_policies]
        cells += [(s, p) for p in placement_policies]
    with bar(len(tasks), "compare", on=progress) as done:
        results = run_tasks(
            measure,
            tasks,
            workers=workers,
            scheduler=scheduler,
            shared=(trace,),
            done=lambda k: done(" ".join(x for x in cells[k] if x)),
        )
    cache: dict[str, Metrics] = {}
    placement: dict[str, dict[str, Metrics]] = {s: {} for s in splits}
    for (split, policy), m in zip(cells, results, strict=True):
        if split is None:
            cache[policy] = m
        else:
            placement[split][policy] = m
    return Comparison(cache, placement)
