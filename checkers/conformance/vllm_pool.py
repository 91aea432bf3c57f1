"""A real engine under test: vLLM v1's ``BlockPool``, driven by kvmodel traces.

No vLLM code is part of kvmodel. :func:`fetch_sources` downloads the vLLM wheel (``pip
download --no-deps --only-binary :all:``) into a cache directory and takes out the files this
package drives: ``vllm/v1/core/block_pool.py`` and ``vllm/v1/core/kv_cache_utils.py`` here, and
the offloading tier's (:data:`OFFLOAD_FILES`, :mod:`checkers.conformance.vllm_offload`).
:func:`load_block_pool` executes the first two with small stub modules of ours for their imports
(no torch, no vLLM config), optionally after a deliberate perturbation of the source
(:data:`PERTURBATIONS`).

:class:`VLLMBlockPool` is an :class:`~checkers.conformance.lockstep.Implementation`: it plays the
part of vLLM's KV cache manager for one request per ``infer`` op, with the block pool making every
caching decision:

1. the prompt is the context's logical sequence (:class:`kvmodel.logical.Sequences`), its tokens
   synthesised per message content key (equal keys, equal tokens), so vLLM's own chained block
   hashing (``hash_block_tokens``) applies;
2. lookup walks the prompt's full blocks through ``get_cached_block`` until the first miss; the
   request is refused (``reject``) if the blocks it needs exceed the pool's free blocks minus the
   hits that sit in the free queue (the scheduler's admission test);
3. hits are ``touch``-ed, new blocks come from ``get_new_blocks`` (a block popped with a hash is
   an eviction -- read from the pool's own ``BlockRemoved`` events), full blocks are registered
   by ``cache_full_blocks``, and the request's blocks are released tail-first by
   ``free_blocks``, as vLLM's manager does when a request finishes.

What it does is logged in the observation-log schema, blocks named by the spec's hash-chain keys
(the adapter maps each vLLM block hash to the key of the same block). One difference from the
real ``KVCacheManager`` is deliberate and documented in spec/policies.md §vllm-prefix: the
manager never hits the last token of a prompt (it recomputes it for the logits), so a fully
cached, block-aligned prompt hits one block less there; the adapter looks up every full prompt
block, as the model does.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from checkers.conformance.adapters import (
    Eviction,
    PrefixCacheAdapter,
    Request,
    comparable,
    load_module,
    stub_module,
)
from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError
from kvmodel.ids import BlockKey

__all__ = [
    "OFFLOAD_FILES",
    "PERTURBATIONS",
    "VLLM_VERSION",
    "BlockPoolModules",
    "PoolRequest",
    "VLLMBlockPool",
    "VLLMUnavailableError",
    "fetch_sources",
    "load_block_pool",
    "vllm_comparable",
    "vllm_sha256",
]

VLLM_VERSION = "0.33.0"
_POOL_FILES = ("vllm/v1/core/block_pool.py", "vllm/v1/core/kv_cache_utils.py")
#: the scheduler side of the offloading tier: its manager and every CPU replacement policy the
#: wheel ships (checkers.conformance.vllm_offload)
OFFLOAD_FILES = (
    "vllm/v1/kv_offload/base.py",
    "vllm/v1/kv_offload/cpu/common.py",
    "vllm/v1/kv_offload/cpu/policies/base.py",
    "vllm/v1/kv_offload/cpu/policies/lru.py",
    "vllm/v1/kv_offload/cpu/policies/arc.py",
    "vllm/v1/kv_offload/cpu/policies/factory.py",
    "vllm/v1/kv_offload/cpu/manager.py",
)
_FILES = (*_POOL_FILES, *OFFLOAD_FILES)

#: name -> (file, text, replacement): deliberate bugs planted in a copy of vLLM's source
PERTURBATIONS: dict[str, tuple[str, str, str]] = {
    # released cached blocks join the *front* of the free queue: it hands out the most
    # recently used first, and even before never-used free blocks
    "free-queue-reversed": (
        "block_pool.py",
        "self.free_block_queue.append_n(blocks_to_evict_last)",
        "self.free_block_queue.prepend_n(blocks_to_evict_last)",
    ),
    # a reused block forgets its hash but the hash table keeps pointing at it: stale hits
    "hash-kept-on-reuse": (
        "block_pool.py",
        "evicted_hashes = self._remove_cached_block_hashes(block)",
        "block.reset_hash(); evicted_hashes = []",
    ),
}


class VLLMUnavailableError(Exception):
    """The vLLM sources could not be fetched or loaded here (the reason is the message)."""


def _cache_dir() -> Path:
    env = os.environ.get("KVMODEL_VLLM_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "kvmodel"
    return base / f"vllm-{VLLM_VERSION}"


def fetch_sources(cache_dir: Path | None = None, *, timeout: float = 600.0) -> Path:
    """The directory holding the vLLM files this package drives (each at its path in the
    wheel), downloading the wheel once if needed."""
    target = cache_dir or _cache_dir()
    if all((target / f).is_file() for f in _FILES):
        return target
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--only-binary", ":all:", f"vllm=={VLLM_VERSION}", "-d", tmp,
        ]  # fmt: skip
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise VLLMUnavailableError(f"pip download of vllm=={VLLM_VERSION} failed: {e}") from e
        wheels = sorted(Path(tmp).glob("vllm-*.whl"))
        if done.returncode != 0 or not wheels:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise VLLMUnavailableError(
                f"pip download of vllm=={VLLM_VERSION} failed: " + " | ".join(tail)
            )
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for f in _FILES:
                (target / f).parent.mkdir(parents=True, exist_ok=True)
                part = target / (f + ".part")
                part.write_bytes(z.read(f))
                part.replace(target / f)  # atomic: no half-written file is ever used
    return target


# ---------------------------------------------------------------- loading with stub modules


class _Event:
    type = "KVCacheEvent"

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _BlockStored(_Event):
    type = "BlockStored"


class _BlockRemoved(_Event):
    type = "BlockRemoved"
    block_hashes: list[bytes]


class _AllBlocksCleared(_Event):
    type = "AllBlocksCleared"


def _stubs() -> dict[str, types.ModuleType]:
    envs = stub_module("vllm.envs", VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=False)
    return {
        "vllm": stub_module("vllm", envs=envs),
        "vllm.envs": envs,
        "vllm.config": stub_module("vllm.config"),
        "vllm.logger": stub_module("vllm.logger", init_logger=logging.getLogger),
        "vllm.multimodal": stub_module("vllm.multimodal"),
        "vllm.multimodal.utils": stub_module("vllm.multimodal.utils"),
        "vllm.utils": stub_module("vllm.utils"),
        "vllm.utils.hashing": stub_module("vllm.utils.hashing"),
        "vllm.utils.math_utils": stub_module("vllm.utils.math_utils", cdiv=lambda a, b: -(-a // b)),
        "vllm.distributed": stub_module("vllm.distributed"),
        "vllm.distributed.kv_events": stub_module(
            "vllm.distributed.kv_events",
            MEDIUM_GPU="GPU",
            KVCacheEvent=_Event,
            BlockStored=_BlockStored,
            BlockRemoved=_BlockRemoved,
            AllBlocksCleared=_AllBlocksCleared,
        ),
        "vllm.v1": stub_module("vllm.v1"),
        "vllm.v1.core": stub_module("vllm.v1.core"),
        "vllm.v1.core.kv_cache_metrics": stub_module("vllm.v1.core.kv_cache_metrics"),
        "vllm.v1.kv_cache_interface": stub_module("vllm.v1.kv_cache_interface"),
        "vllm.v1.kv_cache_spec_registry": stub_module("vllm.v1.kv_cache_spec_registry"),
        "vllm.v1.request": stub_module("vllm.v1.request"),
        "vllm.v1.utils": stub_module("vllm.v1.utils"),
    }


@attrs.frozen
class BlockPoolModules:
    block_pool: types.ModuleType
    kv_cache_utils: types.ModuleType
    perturbation: str | None


def load_block_pool(src: Path, perturbation: str | None = None) -> BlockPoolModules:
    """Execute vLLM's two files (perturbed if asked) against our stubs."""
    if perturbation is not None and perturbation not in PERTURBATIONS:
        raise ConfigError(
            f"unknown perturbation {perturbation!r}; known: {', '.join(PERTURBATIONS)}"
        )
    texts = {Path(f).name: (src / f).read_text() for f in _POOL_FILES}
    if perturbation is not None:
        file, old, new = PERTURBATIONS[perturbation]
        if texts[file].count(old) != 1:
            raise VLLMUnavailableError(f"perturbation {perturbation!r} no longer applies to {file}")
        texts[file] = texts[file].replace(old, new)
    try:
        loaded = load_module(
            [
                ("vllm.v1.core.kv_cache_utils", str(src / _POOL_FILES[1]),
                 texts["kv_cache_utils.py"]),
                ("vllm.v1.core.block_pool", str(src / _POOL_FILES[0]), texts["block_pool.py"]),
            ],
            _stubs(),
        )  # fmt: skip
    except ConfigError as e:
        raise VLLMUnavailableError(str(e)) from e
    return BlockPoolModules(
        loaded["vllm.v1.core.block_pool"], loaded["vllm.v1.core.kv_cache_utils"], perturbation
    )


# ---------------------------------------------------------------- the adapter


#: the trace within the part of the model vLLM's block pool implements (spec/policies.md
#: §vllm-prefix): :func:`checkers.conformance.adapters.comparable`
vllm_comparable = comparable


def vllm_sha256(obj: object) -> bytes:
    """The hash function handed to vLLM's ``hash_block_tokens`` (its ``sha256`` over a repr)."""
    return hashlib.sha256(repr(obj).encode()).digest()


class PoolRequest:
    """The fields of ``vllm.v1.request.Request`` the block pool reads."""

    lora_request = None
    cache_salt = None
    prompt_embeds = None
    session_id = None
    mm_features: list[Any] = []  # noqa: RUF012 -- read only

    def __init__(self, block_hashes: list[bytes], tokens: list[int]) -> None:
        self.block_hashes = block_hashes
        self.all_token_ids = tokens


class VLLMBlockPool(PrefixCacheAdapter):
    """vLLM's ``BlockPool`` as a lockstep implementation (one tier: the GPU pool), on the
    adapter kit: vLLM hashes the synthetic tokens with its own chained ``hash_block_tokens``,
    and every caching decision is the pool's."""

    def __init__(self, config: EngineConfig, modules: BlockPoolModules) -> None:
        super().__init__(config)
        utils = modules.kv_cache_utils
        utils.init_none_hash(vllm_sha256)
        self._hash_block: Callable[..., bytes] = utils.hash_block_tokens
        # vLLM keeps block 0 as its null block: one more slot for the same usable capacity
        self.pool = modules.block_pool.BlockPool(
            config.tiers[0].blocks + 1,
            enable_caching=True,
            hash_block_size=self.block_size,
            enable_kv_cache_events=True,
        )
        self.key_of: dict[bytes, BlockKey | None] = {}
        #: every KV event the pool published, as JSON (for checkers.conformance.kv_events)
        self.events: list[dict[str, Any]] = []
        self._hashes: list[bytes] = []
        self._blocks: list[Any] = []

    def _take_events(self) -> list[Any]:
        out = self.pool.take_events()
        for ev in out:
            rec: dict[str, Any] = {"type": ev.type}
            if hasattr(ev, "block_hashes"):
                rec["block_hashes"] = [h.hex() for h in ev.block_hashes]
            if getattr(ev, "parent_block_hash", None) is not None:
                rec["parent_block_hash"] = ev.parent_block_hash.hex()
            self.events.append(rec)
        return list(out)

    def lookup(self, r: Request) -> list[int]:
        """The request's block hashes, as vLLM's ``Request`` computes them; then
        ``get_cached_block`` over the prompt's full blocks until the first miss: the ids of the
        blocks the pool returned."""
        self._hashes = []
        for d in range(r.full_blocks):
            parent = self._hashes[-1] if self._hashes else None
            h = self._hash_block(vllm_sha256, parent, list(r.block_tokens(d)))
            self._hashes.append(h)
            self.key_of[h] = r.keys[d]
        self._blocks = []
        for d in range(r.prompt_blocks):
            found = self.pool.get_cached_block(self._hashes[d], [0])
            if found is None:
                break
            self._blocks.append(found[0])
        return [b.block_id for b in self._blocks]

    def available(self, r: Request, hits: int) -> int:
        """The scheduler's admission test: free blocks, less the hits sitting in the free queue
        (touching them takes them out of it)."""
        return int(self.pool.get_num_free_blocks()) - sum(1 for b in self._blocks if b.ref_cnt == 0)

    def make_room(self, r: Request, hits: int, need: int) -> list[Eviction] | None:
        if need > self.available(r, hits):
            return None
        self.pool.touch(self._blocks)
        self._blocks += self.pool.get_new_blocks(need) if need else []
        return [
            Eviction(self.key_of.get(h))
            for ev in self._take_events()
            if isinstance(ev, _BlockRemoved)
            for h in ev.block_hashes
        ]

    def insert(self, r: Request, hits: int) -> list[int | None]:
        """``cache_full_blocks``, then the request finishes: its blocks released tail-first.
        The blocks stored: each new full block the pool now holds under a hash."""
        blocks = self._blocks
        self.pool.cache_full_blocks(
            PoolRequest(self._hashes, list(r.tokens)), blocks, hits, len(self._hashes),
            self.block_size, 0,
        )  # fmt: skip
        self._take_events()
        stored = [
            b.block_id if b.block_hash is not None else None for b in blocks[hits : r.full_blocks]
        ]
        self.pool.free_blocks(reversed(blocks))
        return stored
