"""vLLM's real offloading tier (its ``CPUOffloadingManager`` and CPU policies) under its real GPU
``BlockPool`` (checkers.conformance.vllm_offload): it agrees with ``vllm-offload`` on every
decision -- GPU hits, writes and victims, loads, copies and the copies dropped for room -- and
deliberately perturbed copies are flagged.

The vLLM wheel is fetched at test time (never committed); where that is impossible the tests
skip with the reason."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from checkers.conformance.lockstep import differential, run_lockstep
from checkers.conformance.vllm_offload import (
    OffloadModules,
    VLLMOffloading,
    load_offload,
)
from checkers.conformance.vllm_pool import (
    BlockPoolModules,
    vllm_comparable,
)
from checkers.search.strategies import agent_traces
from kvmodel import EngineConfig, TierConfig
from kvmodel.errors import ConfigError
from kvmodel.ids import TierName
from kvmodel.workloads import AgenticParams, RandomParams, generate_agentic, random_trace


def _cfg(gpu: int, cpu: int, block_size: int = 4) -> EngineConfig:
    return EngineConfig(
        block_size,
        (TierConfig(TierName("hbm"), gpu), TierConfig(TierName("cpu"), cpu, copies_only=True)),
    )


@pytest.fixture(scope="module")
def offload(vllm_src: Path) -> OffloadModules:
    return load_offload(vllm_src)


#: the kvmodel policy that agrees with each CPU policy vLLM 0.33 registers
REFERENCE = {"lru": "vllm-offload", "arc": "vllm-offload-arc"}


def _same(impl: VLLMOffloading, _config: EngineConfig) -> VLLMOffloading:
    """The one implementation, whatever the configuration (it was built for the trace's)."""
    return impl


def _run(
    vllm_pool: BlockPoolModules,
    off: OffloadModules,
    seeds: range,
    *,
    cpu: tuple[int, int] = (4, 33),
    cpu_policy: str = "lru",
) -> tuple[Counter[str], Counter[str]]:
    """Verdicts over random traces with pressure in both tiers (GPU of 6-13 blocks, CPU of
    ``cpu`` chunks, drawn per seed), and what vLLM did there."""
    verdicts: Counter[str] = Counter()
    coverage: Counter[str] = Counter()
    for seed in seeds:
        rng = np.random.default_rng(seed)
        cfg = _cfg(int(rng.integers(6, 14)), int(rng.integers(*cpu)))
        cap = int(rng.integers(20, 48))
        tr = vllm_comparable(random_trace(RandomParams(seed=seed, ops=80, max_context_tokens=cap)))
        impl = VLLMOffloading(cfg, vllm_pool, off, cpu_policy.removesuffix("-as-lru"))
        v = run_lockstep(
            tr,
            functools.partial(_same, impl),
            REFERENCE.get(cpu_policy, "vllm-offload"),
            cfg,
            coverage,
        )
        verdicts[v.verdict] += 1
    return verdicts, coverage


#: the traces of the 10,000 the default run judges
SLICE = 400


@pytest.mark.parametrize("cpu_policy", sorted(REFERENCE))
def test_the_real_offloading_tier_agrees_with_its_reference(
    vllm_pool: BlockPoolModules, offload: OffloadModules, cpu_policy: str
) -> None:
    # a slice of the 10,000 (the rest run under -m slow)
    verdicts, cov = _run(vllm_pool, offload, range(SLICE), cpu_policy=cpu_policy)
    assert verdicts == Counter({"OK": SLICE})  # zero false alarms
    # pressure in both tiers: GPU evictions, CPU drops for room, loads back, failed stores
    assert cov["evict"] > 20 * SLICE
    assert cov["drop-copy"] > 10 * SLICE
    assert cov["load"] > SLICE
    assert cov["reject"] > SLICE


@pytest.mark.slow
@pytest.mark.parametrize("cpu_policy", sorted(REFERENCE))
def test_the_real_offloading_tier_agrees_on_ten_thousand_traces(
    vllm_pool: BlockPoolModules, offload: OffloadModules, cpu_policy: str
) -> None:
    verdicts, _ = _run(vllm_pool, offload, range(SLICE, 10_000), cpu_policy=cpu_policy)
    assert verdicts == Counter({"OK": 10_000 - SLICE})


def test_the_cpu_policies_differ_where_the_references_do(
    vllm_pool: BlockPoolModules, offload: OffloadModules
) -> None:
    """ARC judged against the LRU reference diverges (at a drop for room): the references are
    not interchangeable, so agreeing with each is a claim about that policy."""
    verdicts, _ = _run(vllm_pool, offload, range(100), cpu_policy="arc-as-lru")
    assert verdicts["ILLEGAL"] >= 50, verdicts


def test_agreement_on_agentic_workloads_and_searched_traces(
    vllm_pool: BlockPoolModules, offload: OffloadModules
) -> None:
    cfg = EngineConfig(
        16,
        (TierConfig(TierName("hbm"), 120), TierConfig(TierName("cpu"), 200, copies_only=True)),
    )
    loads = Counter[str]()
    for seed in range(3):
        tr = vllm_comparable(generate_agentic(AgenticParams(seed=seed, sessions=3, turns=4)))
        impl = VLLMOffloading(cfg, vllm_pool, offload)
        v = run_lockstep(tr, functools.partial(_same, impl), "vllm-offload", cfg, loads)
        assert v.verdict == "OK"
    res = differential(
        lambda c: VLLMOffloading(c, vllm_pool, offload),
        "vllm-offload",
        _cfg(6, 8),
        max_examples=150,
        traces=agent_traces().map(vllm_comparable),
    )
    assert res.ok, res.render()
    assert ", copy " in res.coverage_line()  # (a moving implementation's coverage says so)


@pytest.mark.parametrize(
    ("perturbation", "cpu", "cpu_policy", "search_cpu"),
    [
        ("lru-head-first", (16, 33), "lru", 6),
        ("store-evicts-own-offer", (3, 7), "lru", 3),
        ("arc-no-promotion", (6, 17), "arc", 6),
    ],
)
def test_perturbed_copies_are_flagged(
    vllm_src: Path,
    vllm_pool: BlockPoolModules,
    perturbation: str,
    cpu: tuple[int, int],
    cpu_policy: str,
    search_cpu: int,
) -> None:
    """Each planted bug is seen: a CPU LRU that refreshes a request head to tail (so the head
    leaves first) on a roomy tier; a store that forgets to protect its own offer on a small one
    (where a request's blocks fill the tier); an ARC that never promotes a reused copy."""
    off = load_offload(vllm_src, perturbation)
    verdicts, _ = _run(vllm_pool, off, range(100), cpu=cpu, cpu_policy=cpu_policy)
    assert verdicts["ILLEGAL"] >= 30, verdicts
    res = differential(
        lambda c: VLLMOffloading(c, vllm_pool, off, cpu_policy),
        REFERENCE[cpu_policy],
        _cfg(6, search_cpu),
        max_examples=300,
        traces=agent_traces().map(vllm_comparable),
    )
    assert not res.ok
    assert res.trace is not None
    assert len(res.trace.ops) <= 20


def test_bad_setups(vllm_src, vllm_pool: BlockPoolModules, offload: OffloadModules) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="two tiers"):
        VLLMOffloading(EngineConfig(4, (TierConfig(TierName("a"), 2),)), vllm_pool, offload)
    with pytest.raises(ConfigError, match="unknown CPU policy"):
        VLLMOffloading(_cfg(4, 4), vllm_pool, offload, "fifo")
    with pytest.raises(ConfigError, match="unknown perturbation"):
        load_offload(vllm_src, "no-such")
    assert sorted(offload.policies) == ["arc", "lru"]  # every policy the 0.33 wheel registers
    import sys

    assert "vllm" not in sys.modules  # the stubs are gone after loading
