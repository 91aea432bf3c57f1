"""A real tiered engine under test: vLLM's offloading tier stacked under its GPU ``BlockPool``.

No vLLM code is part of kvmodel. The files come from the vLLM wheel fetched at test time
(:func:`checkers.conformance.vllm_pool.fetch_sources`): the scheduler side of the offloading
tier, ``vllm/v1/kv_offload/cpu/manager.py`` (``CPUOffloadingManager``) with every CPU
replacement policy the wheel ships (``cpu/policies/lru.py``, ``cpu/policies/arc.py``, registered
by its own ``CachePolicyFactory``), executed against stub modules of ours (no torch, no config),
optionally after a deliberate perturbation (:data:`PERTURBATIONS`).

:class:`VLLMOffloading` is an :class:`~checkers.conformance.lockstep.Implementation` for a
two-tier configuration (the GPU pool, then the CPU tier, whose ``blocks`` are the manager's
chunks). Per ``infer`` op it plays the part of vLLM's scheduler with the offloading connector,
one request run to completion, every caching decision made by vLLM's code:

1. the GPU lookup, admission and allocation of :class:`~checkers.conformance.vllm_pool.
   VLLMBlockPool` (the real ``BlockPool``);
2. the connector's lookup (``_maximal_prefix_lookup``): ``lookup`` of each full prompt block
   after the GPU hits, by the block's offload key, until the first ``MISS``; the hits are
   *loads*: they take GPU blocks as misses do (admission counts them), ``prepare_load`` pins
   them and ``complete_load`` releases them once the request is allocated -- a refused request
   loads nothing;
3. the store (``_build_store_jobs``, chunk-level, one block a chunk): the request's full
   blocks from its start when it loaded nothing, else from the end of its loads, offered to
   ``prepare_store`` at once; what it stores is completed (``complete_store``), what it evicts
   is logged, and the request is finished (``on_request_finished``).

Records are the model's (spec/movement.md MV8): a ``load`` per loaded block, a ``copy`` per
offered block (``written`` if stored, ``held`` if the tier had it ready, ``no-room`` if the store
failed), a ``drop-copy`` (``room``) per chunk the store evicted. The reference is
``vllm-offload`` (spec/movement.md MV13). Deliberate differences, as in ``vllm_pool``: every
full block is stored, the last token's included (vLLM stops one token short of a finished
request's end), and the GPU lookup may hit the prompt's last token.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from checkers.conformance.adapters import (
    Eviction,
    Request,
    _installed,
    load_module,
    stub_module,
)
from checkers.conformance.tiered import Stored, TieredCacheAdapter
from checkers.conformance.vllm_pool import (
    OFFLOAD_FILES,
    BlockPoolModules,
    VLLMBlockPool,
    VLLMUnavailableError,
    _stubs,
)
from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError

__all__ = [
    "CPU_POLICIES",
    "PERTURBATIONS",
    "OffloadModules",
    "VLLMOffloading",
    "load_offload",
]

#: the CPU replacement policies this adapter drives, by the name vLLM registers them under
CPU_POLICIES = ("lru", "arc")

#: name -> (file, text, replacement): deliberate bugs planted in a copy of vLLM's source
PERTURBATIONS: Mapping[str, tuple[str, str, str]] = {
    # the store's eviction forgets to protect the offered keys: a request can evict a copy it
    # is about to rely on as stored
    "store-evicts-own-offer": (
        "cpu/manager.py",
        "protected = set(keys)",
        "protected = set()",
    ),
    # the LRU policy refreshes a finished request's keys head to tail: the head leaves first
    "lru-head-first": (
        "cpu/policies/lru.py",
        "self._update_recency(reversed(order_request_keys(key_groups, req_context)))",
        "self._update_recency(order_request_keys(key_groups, req_context))",
    ),
    # ARC forgets to promote a reused copy from its recent list to its frequent one
    "arc-no-promotion": (
        "cpu/policies/arc.py",
        "if key in reused_keys and key in self.t1:",
        "if key in reused_keys and key in self.t1 and False:",
    ),
}

_PACKAGES = (
    "vllm.v1.kv_offload",
    "vllm.v1.kv_offload.cpu",
    "vllm.v1.kv_offload.cpu.policies",
    "vllm.v1.metrics",
    "vllm.distributed.kv_transfer",
    "vllm.distributed.kv_transfer.kv_connector",
    "vllm.distributed.kv_transfer.kv_connector.v1",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading",
)


def _offload_stubs() -> dict[str, Any]:
    stubs: dict[str, Any] = dict(_stubs())
    stubs["torch"] = stub_module("torch")
    stubs["vllm.v1.kv_hints"] = stub_module("vllm.v1.kv_hints")
    stubs["vllm.v1.kv_offload.config"] = stub_module("vllm.v1.kv_offload.config")
    stubs["vllm.v1.metrics.cache_hit_source"] = stub_module("vllm.v1.metrics.cache_hit_source")
    name = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics"
    stubs[name] = stub_module(name)
    for p in _PACKAGES:
        stubs[p] = stub_module(p)
    return stubs


def _module_name(file: str) -> str:
    return file.removesuffix(".py").replace("/", ".")


@attrs.frozen
class OffloadModules:
    """vLLM's offloading manager and its CPU policies, loaded (and perturbed if asked)."""

    manager: Any  #: the ``cpu/manager.py`` module
    base: Any  #: the ``kv_offload/base.py`` module (keys, results, request contexts)
    policies: Mapping[str, type]  #: each registered CPU policy's class, by its name
    perturbation: str | None


def load_offload(src: Path, perturbation: str | None = None) -> OffloadModules:
    """Execute vLLM's offloading files (perturbed if asked) against our stubs."""
    if perturbation is not None and perturbation not in PERTURBATIONS:
        raise ConfigError(
            f"unknown perturbation {perturbation!r}; known: {', '.join(PERTURBATIONS)}"
        )
    texts = {f: (src / f).read_text() for f in OFFLOAD_FILES}
    if perturbation is not None:
        rel, old, new = PERTURBATIONS[perturbation]
        f = f"vllm/v1/kv_offload/{rel}"
        if texts[f].count(old) != 1:
            raise VLLMUnavailableError(f"perturbation {perturbation!r} no longer applies to {f}")
        texts[f] = texts[f].replace(old, new)
    stubs = _offload_stubs()
    try:
        loaded = load_module(
            [(_module_name(f), str(src / f), texts[f]) for f in OFFLOAD_FILES], stubs
        )
    except ConfigError as e:
        raise VLLMUnavailableError(str(e)) from e
    # vLLM's factory imports a policy's module by name when a manager asks for it: resolve
    # each registered one now, against the modules just loaded, and keep the classes
    factory = loaded["vllm.v1.kv_offload.cpu.policies.factory"].CachePolicyFactory
    with _installed(("vllm", "torch"), {**stubs, **loaded}):
        classes = {name: loader() for name, loader in factory._registry.items()}
    factory._registry = {name: functools.partial(lambda c: c, c) for name, c in classes.items()}
    return OffloadModules(
        loaded["vllm.v1.kv_offload.cpu.manager"],
        loaded["vllm.v1.kv_offload.base"],
        classes,
        perturbation,
    )


class VLLMOffloading(TieredCacheAdapter):
    """vLLM's GPU ``BlockPool`` with its offloading tier (``CPUOffloadingManager`` under one of
    its CPU policies) as a lockstep implementation on the tiered kit: every decision is
    vLLM's. The top tier's hooks are :class:`~checkers.conformance.vllm_pool.VLLMBlockPool`'s;
    the four below drive the manager as the connector's scheduler side does."""

    def __init__(
        self,
        config: EngineConfig,
        pool: BlockPoolModules,
        offload: OffloadModules,
        cpu_policy: str = "lru",
    ) -> None:
        super().__init__(config)
        if cpu_policy not in offload.policies:
            raise ConfigError(
                f"unknown CPU policy {cpu_policy!r}; vLLM {list(offload.policies)} registered"
            )
        self.gpu = VLLMBlockPool(self.config, pool)
        self.base = offload.base
        self.manager = offload.manager.CPUOffloadingManager(
            self.lower_capacity, cache_policy=cpu_policy
        )
        self._requests = 0
        self._ctx: Any = None
        self._okeys: list[bytes] = []

    # ------------------------------------------------------------------ the top tier: vLLM's pool

    def lookup(self, r: Request) -> list[int]:
        return self.gpu.lookup(r)

    def available(self, r: Request, hits: int) -> int:
        return self.gpu.available(r, hits)

    def make_room(self, r: Request, hits: int, need: int) -> list[Eviction] | None:
        return self.gpu.make_room(r, hits, need)

    def insert(self, r: Request, hits: int) -> list[int | None]:
        return self.gpu.insert(r, hits)

    # ------------------------------------------------------------------ the tier below

    def lower_lookup(self, r: Request, start: int) -> int:
        """A new request (its ``ReqContext``, each offload key at its end token, as the
        scheduler's ``update_offload_keys`` records them), then the connector's prefix lookup
        (``_maximal_prefix_lookup``) from the GPU's hits until a ``MISS``."""
        m, base = self.manager, self.base
        self._okeys = [base.make_offload_key(h, 0) for h in self.gpu._hashes]
        self._requests += 1
        self._ctx = ctx = base.ReqContext(req_id=f"req-{self._requests}")
        for d, key in enumerate(self._okeys):
            ctx.set_offload_key_position(key, (d + 1) * r.block_size)
        m.on_new_request(ctx)
        n = 0
        for d in range(start, r.prompt_blocks):
            if m.lookup(self._okeys[d], ctx) is base.LookupResult.MISS:
                break
            n += 1
        return n

    def load(self, r: Request, start: int, n: int) -> None:
        keys = self._okeys[start : start + n]
        self.manager.prepare_load(keys, self._ctx)
        self.manager.complete_load(keys, self._ctx)

    def store(self, r: Request, hits: int, loads: int) -> Stored:
        """The connector's chunk-level store: the request's full blocks from its start when it
        loaded nothing, else from the end of its loads, offered to ``prepare_store`` at once."""
        m, base, ctx = self.manager, self.base, self._ctx
        first = hits + loads if loads else 0
        offer = list(self._okeys[first : r.full_blocks])
        if not offer:
            return Stored(first)
        ready = {k for k in offer if m.lookup(k, ctx) is base.LookupResult.HIT}
        out = m.prepare_store(offer, ctx)
        stored = set(out.keys_to_store) if out is not None else set()
        if out is not None and stored:
            m.complete_store(list(out.keys_to_store), ctx)
        results = ["held" if k in ready else "written" if k in stored else "no-room" for k in offer]
        dropped = list(out.evicted_keys) if out is not None else []
        return Stored(first, results, offer, dropped)

    def finish(self, r: Request) -> None:
        self.manager.on_request_finished(self._ctx)
