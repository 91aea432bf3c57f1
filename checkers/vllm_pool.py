"""A real engine under test: vLLM v1's ``BlockPool``, driven by kvmodel traces.

No vLLM code is part of kvmodel. :func:`fetch_sources` downloads the vLLM wheel (``pip
download --no-deps --only-binary :all:``) into a cache directory and takes out two files,
``vllm/v1/core/block_pool.py`` and ``vllm/v1/core/kv_cache_utils.py``. :func:`load_block_pool`
executes them with small stub modules of ours for their imports (no torch, no vLLM config),
optionally after a deliberate perturbation of the source (:data:`PERTURBATIONS`).

:class:`VLLMBlockPool` is an :class:`~checkers.lockstep.Implementation`: it plays the part of
vLLM's KV cache manager for one request per ``infer`` op, with the block pool making every
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError
from kvmodel.ids import BlockKey
from kvmodel.logical import Sequences
from kvmodel.trace import Infer, Op, Pin, Trace, Unpin

__all__ = [
    "PERTURBATIONS",
    "VLLM_VERSION",
    "BlockPoolModules",
    "VLLMBlockPool",
    "VLLMUnavailableError",
    "fetch_sources",
    "load_block_pool",
    "vllm_comparable",
]

VLLM_VERSION = "0.33.0"
_FILES = ("vllm/v1/core/block_pool.py", "vllm/v1/core/kv_cache_utils.py")

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
    """The directory holding the two vLLM files, downloading the wheel once if needed."""
    target = cache_dir or _cache_dir()
    if all((target / Path(f).name).is_file() for f in _FILES):
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
                part = target / (Path(f).name + ".part")
                part.write_bytes(z.read(f))
                part.replace(target / Path(f).name)  # atomic: no half-written file is ever used
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


def _stub(name: str, **members: Any) -> types.ModuleType:
    """A module whose unknown attributes are inert placeholder classes."""
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package, so submodules can be imported from it
    mod.__dict__.update(members)

    def missing(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (), {"__module__": name})

    mod.__getattr__ = missing  # type: ignore[method-assign]
    return mod


def _stubs() -> dict[str, types.ModuleType]:
    envs = _stub("vllm.envs", VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=False)
    return {
        "vllm": _stub("vllm", envs=envs),
        "vllm.envs": envs,
        "vllm.config": _stub("vllm.config"),
        "vllm.logger": _stub("vllm.logger", init_logger=logging.getLogger),
        "vllm.multimodal": _stub("vllm.multimodal"),
        "vllm.multimodal.utils": _stub("vllm.multimodal.utils"),
        "vllm.utils": _stub("vllm.utils"),
        "vllm.utils.hashing": _stub("vllm.utils.hashing"),
        "vllm.utils.math_utils": _stub("vllm.utils.math_utils", cdiv=lambda a, b: -(-a // b)),
        "vllm.distributed": _stub("vllm.distributed"),
        "vllm.distributed.kv_events": _stub(
            "vllm.distributed.kv_events",
            MEDIUM_GPU="GPU",
            KVCacheEvent=_Event,
            BlockStored=_BlockStored,
            BlockRemoved=_BlockRemoved,
            AllBlocksCleared=_AllBlocksCleared,
        ),
        "vllm.v1": _stub("vllm.v1"),
        "vllm.v1.core": _stub("vllm.v1.core"),
        "vllm.v1.core.kv_cache_metrics": _stub("vllm.v1.core.kv_cache_metrics"),
        "vllm.v1.kv_cache_interface": _stub("vllm.v1.kv_cache_interface"),
        "vllm.v1.kv_cache_spec_registry": _stub("vllm.v1.kv_cache_spec_registry"),
        "vllm.v1.request": _stub("vllm.v1.request"),
        "vllm.v1.utils": _stub("vllm.v1.utils"),
    }


@contextmanager
def _modules(extra: dict[str, types.ModuleType]) -> Iterator[None]:
    """Install modules in ``sys.modules`` for the duration; restore what was there."""
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    for k in saved:
        del sys.modules[k]
    sys.modules.update(extra)
    try:
        yield
    finally:
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        sys.modules.update(saved)


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
    texts = {Path(f).name: (src / Path(f).name).read_text() for f in _FILES}
    if perturbation is not None:
        file, old, new = PERTURBATIONS[perturbation]
        if texts[file].count(old) != 1:
            raise VLLMUnavailableError(f"perturbation {perturbation!r} no longer applies to {file}")
        texts[file] = texts[file].replace(old, new)
    stubs = _stubs()
    loaded: dict[str, types.ModuleType] = {}
    with _modules(stubs):
        for modname, file in (
            ("vllm.v1.core.kv_cache_utils", "kv_cache_utils.py"),
            ("vllm.v1.core.block_pool", "block_pool.py"),
        ):
            mod = types.ModuleType(modname)
            mod.__file__ = str(src / file)
            sys.modules[modname] = mod
            try:
                exec(compile(texts[file], str(src / file), "exec"), mod.__dict__)
            except Exception as e:
                raise VLLMUnavailableError(f"loading {file} with stub modules failed: {e!r}") from e
            loaded[file] = mod
    return BlockPoolModules(loaded["block_pool.py"], loaded["kv_cache_utils.py"], perturbation)


# ---------------------------------------------------------------- the adapter


def vllm_comparable(trace: Trace) -> Trace:
    """``trace`` within the part of the model vLLM's block pool implements (spec/policies.md
    §vllm-prefix): without pins (the pool has none) and with every output message's content
    fresh (decoding writes a new block even when an identical block is cached, where the model
    recomputes into the cached slot, B6.3)."""
    ops: list[Op] = []
    for op in trace.ops:
        if isinstance(op, Pin | Unpin):
            continue
        if isinstance(op, Infer) and any(m.hash is not None for m in op.output):
            op = attrs.evolve(op, output=tuple(attrs.evolve(m, hash=None) for m in op.output))
        ops.append(op)
    return Trace(trace.header, tuple(ops))


def _sha256(obj: object) -> bytes:
    return hashlib.sha256(repr(obj).encode()).digest()


class _Request:
    """The fields of ``vllm.v1.request.Request`` the block pool reads."""

    lora_request = None
    cache_salt = None
    prompt_embeds = None
    session_id = None
    mm_features: list[Any] = []  # noqa: RUF012 -- read only

    def __init__(self, block_hashes: list[bytes], tokens: list[int]) -> None:
        self.block_hashes = block_hashes
        self.all_token_ids = tokens


class VLLMBlockPool:
    """vLLM's ``BlockPool`` as a lockstep implementation (one tier: the GPU pool)."""

    def __init__(self, config: EngineConfig, modules: BlockPoolModules) -> None:
        if len(config.tiers) != 1:
            raise ConfigError("vLLM's block pool is one tier: give a single [[tiers]] entry")
        self.bs = config.block_size
        self.tier = config.tiers[0].name
        utils = modules.kv_cache_utils
        utils.init_none_hash(_sha256)
        self._hash_block: Callable[..., bytes] = utils.hash_block_tokens
        # vLLM keeps block 0 as its null block: one more slot for the same usable capacity
        self.pool = modules.block_pool.BlockPool(
            config.tiers[0].blocks + 1,
            enable_caching=True,
            hash_block_size=self.bs,
            enable_kv_cache_events=True,
        )
        self.seq = Sequences(self.bs)
        self.key_of: dict[bytes, BlockKey | None] = {}
        self._tokens: dict[str, list[int]] = {}
        #: every KV event the pool published, as JSON (for checkers.kv_events)
        self.events: list[dict[str, Any]] = []

    def _message_tokens(self, content_key: str, n: int) -> list[int]:
        toks = self._tokens.get(content_key)
        if toks is None or len(toks) < n:
            seed = int.from_bytes(hashlib.blake2b(content_key.encode(), digest_size=7).digest())
            toks = [(seed + j) % (1 << 62) for j in range(n)]
            self._tokens[content_key] = toks
        return toks[:n]

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

    def apply(self, index: int, op: Op) -> list[dict[str, Any]]:
        if not isinstance(op, Infer):
            self.seq.apply(op)
            return []
        try:
            return self._infer(index, op)
        finally:
            self.seq.apply(op)

    def _infer(self, index: int, op: Infer) -> list[dict[str, Any]]:
        bs, pool = self.bs, self.pool
        specs = self.seq.blocks(op.ctx, op.output)
        msgs = [*self.seq.messages(op.ctx), *op.output]
        tokens = [t for m in msgs for t in self._message_tokens(m.content_key, m.tokens)]
        prompt = sum(m.tokens for m in msgs) - sum(m.tokens for m in op.output)
        hashes: list[bytes] = []
        for s in specs:
            if s.key is None:
                break
            d = len(hashes)
            h = self._hash_block(
                _sha256, hashes[-1] if hashes else None, tokens[d * bs : (d + 1) * bs]
            )
            hashes.append(h)
            self.key_of[h] = s.key
        hits: list[Any] = []
        for d in range(min(prompt // bs, len(hashes))):
            found = pool.get_cached_block(hashes[d], [0])
            if found is None:
                break
            hits.append(found[0])
        base = {"t": op.t, "op": index}
        hit_tokens = min(len(hits) * bs, prompt)
        out: list[dict[str, Any]] = [
            {**base, "kind": "infer", "ctx": op.ctx, "prompt_tokens": prompt,
             "hit_tokens": hit_tokens, "miss_tokens": prompt - hit_tokens,
             "output_tokens": sum(m.tokens for m in op.output), "own_blocks": 0},
        ]  # fmt: skip
        out += [
            {**base, "kind": "hit", "ctx": op.ctx, "block": b.block_id, "depth": d,
             "key": self.key_of.get(hashes[d]), "tier": self.tier}
            for d, b in enumerate(hits)
        ]  # fmt: skip
        need = len(specs) - len(hits)
        available = pool.get_num_free_blocks() - sum(1 for b in hits if b.ref_cnt == 0)
        if need > available:
            return [
                *out,
                {**base, "kind": "reject", "ctx": op.ctx, "reason": "no room",
                 "needed": need, "available": available},
            ]  # fmt: skip
        pool.touch(hits)
        new = pool.get_new_blocks(need) if need else []
        for ev in self._take_events():
            if isinstance(ev, _BlockRemoved):
                out += [
                    {**base, "kind": "evict", "ctx": op.ctx, "key": self.key_of.get(h),
                     "tier": self.tier}
                    for h in ev.block_hashes
                ]  # fmt: skip
        for k, b in enumerate(new):
            d = len(hits) + k
            out.append(
                {**base, "kind": "alloc", "ctx": op.ctx, "block": b.block_id,
                 "key": specs[d].key, "tier": self.tier, "depth": d, "rewrite": False}
            )  # fmt: skip
        blocks = hits + new
        pool.cache_full_blocks(_Request(hashes, tokens), blocks, len(hits), len(hashes), bs, 0)
        self._take_events()
        pool.free_blocks(reversed(blocks))  # the request finishes: released tail-first
        if specs and specs[-1].key is None:
            out.append(
                {**base, "kind": "free", "block": blocks[-1].block_id, "key": None,
                 "tier": self.tier, "depth": len(specs) - 1, "reason": "partial"}
            )  # fmt: skip
        return out
