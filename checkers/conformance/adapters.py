"""An adapter kit: put a third-party prefix cache under the oracle in about fifty lines.

A cache under test sees requests (token lists), not trace ops; the oracle reads observation
records naming blocks by the spec's hash-chain keys (spec/invariants.md §Oracle). This module
is what sits between, written once:

* :class:`TokenSynth` -- deterministic synthetic tokens per message content (equal content keys,
  equal tokens), so the cache's own prefix matching and hashing apply;
* :class:`Request` and :func:`requests` -- each ``infer`` op as the cache sees it: its tokens,
  the prompt length, and per block the spec's key (``None`` for a partial tail block);
* :class:`Records` -- builders for one op's observation records;
* :class:`PrefixCacheAdapter` -- an :class:`~checkers.conformance.lockstep.Implementation` for a
  one-tier prefix cache: subclass it and write :meth:`~PrefixCacheAdapter.lookup`,
  :meth:`~PrefixCacheAdapter.make_room` and :meth:`~PrefixCacheAdapter.insert`; it turns what
  they answer into records (infer, hits, evictions with their groups, writes, the partial tail
  freed, a rejection);
* :func:`load_module` -- execute a module's source against stub modules for its imports (no
  torch, no framework config), with an injected clock;
* :func:`comparable` -- a trace restricted to what a plain prefix cache implements.

``examples/radix_cache.py`` is a worked example: a small radix-tree cache that frees whole tree
nodes, checked with ``allow=("extra-victims",)``. :mod:`checkers.conformance.vllm_pool` is built on
the same kit.
"""

from __future__ import annotations

import hashlib
import sys
import types
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, ClassVar

import attrs

from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError
from kvmodel.ids import BlockKey, TierName
from kvmodel.io.ops import OP_NAMES, op_name
from kvmodel.io.trace import Infer, Op, Trace
from kvmodel.logical import Sequences

__all__ = [
    "CAPABILITIES",
    "OUTPUT_HASH",
    "PREFIX_CACHE_OPS",
    "Eviction",
    "PrefixCacheAdapter",
    "Records",
    "Request",
    "TokenSynth",
    "UnsupportedOpError",
    "check_declared",
    "comparable",
    "load_module",
    "refuse_undeclared",
    "request",
    "stub_module",
    "undeclared",
    "within",
]


#: a trace feature beyond the op kinds: an inference's output message carries a ``hash`` (its
#: content is already cached elsewhere), which the model recomputes into the cached slot (B6.3)
#: where a prefix cache decodes into new pages and may drop them at insert
OUTPUT_HASH = "output-hash"
#: what an implementation may declare it implements: every op kind and the trace features
CAPABILITIES: Mapping[str, str] = MappingProxyType(
    {
        **{name: f"the {name!r} op" for name in OP_NAMES},
        OUTPUT_HASH: "output messages whose content is already cached (their 'hash')",
    }
)
#: what a plain one-tier prefix cache implements: every op but pins (it has none) -- their
#: logical effect on the sequences is the kit's, the cache sees requests -- and no output hash
PREFIX_CACHE_OPS: frozenset[str] = frozenset(OP_NAMES) - {"pin", "unpin"}


class UnsupportedOpError(ConfigError):
    """An op (or trace feature) the implementation does not declare it implements reached it:
    refused loudly, never ignored (an ignored pin made the reference protect blocks the
    implementation never heard of, and the divergence blamed the engine)."""


class TokenSynth:
    """Synthetic token ids per message content key: deterministic, equal keys give equal tokens,
    distinct keys (almost surely) distinct ones."""

    def __init__(self) -> None:
        self._tokens: dict[str, list[int]] = {}

    def __call__(self, content_key: str, n: int) -> list[int]:
        toks = self._tokens.get(content_key)
        if toks is None or len(toks) < n:
            seed = int.from_bytes(hashlib.blake2b(content_key.encode(), digest_size=7).digest())
            toks = [(seed + j) % (1 << 62) for j in range(n)]
            self._tokens[content_key] = toks
        return toks[:n]


@attrs.frozen
class Request:
    """One ``infer`` op as a prefix cache sees it."""

    index: int  #: the op's index in the trace
    ctx: str
    tokens: tuple[int, ...]  #: prompt and output, in order
    prompt_tokens: int
    #: per block of ``tokens`` (block size of the config): the spec's key; None for the
    #: partial tail block
    keys: tuple[BlockKey | None, ...]
    block_size: int

    @property
    def output_tokens(self) -> int:
        return len(self.tokens) - self.prompt_tokens

    @property
    def full_blocks(self) -> int:
        return sum(1 for k in self.keys if k is not None)

    @property
    def prompt_blocks(self) -> int:
        """Full blocks inside the prompt: the ones a lookup may find."""
        return min(self.prompt_tokens // self.block_size, self.full_blocks)

    def block_tokens(self, depth: int) -> tuple[int, ...]:
        return self.tokens[depth * self.block_size : (depth + 1) * self.block_size]


def request(seq: Sequences, synth: TokenSynth, index: int, op: Infer) -> Request:
    """The request of ``op`` given the logical state ``seq`` before it."""
    msgs = [*seq.messages(op.ctx), *op.output]
    tokens = tuple(t for m in msgs for t in synth(m.content_key, m.tokens))
    prompt = len(tokens) - sum(m.tokens for m in op.output)
    keys = tuple(s.key for s in seq.blocks(op.ctx, op.output))
    return Request(index, op.ctx, tokens, prompt, keys, seq.block_size)


@attrs.frozen
class Eviction:
    """A block the cache evicted: its key, or the page it freed (the kit names the page by the
    block it stored there), and the group of blocks freed with it (a tree node, say: any JSON
    value; None for a block freed alone)."""

    key: BlockKey | None = None
    group: object = None
    page: Hashable | None = None


class Records:
    """Observation records of one op (spec T4: the fields the oracle reads)."""

    def __init__(self, index: int, tier: TierName, t: float = 0.0) -> None:
        self.index, self.tier, self.t = index, tier, t
        self.out: list[dict[str, Any]] = []

    def _add(self, kind: str, **fields: Any) -> None:
        self.out.append({"t": self.t, "op": self.index, "kind": kind, **fields})

    def infer(self, r: Request, hit_blocks: int) -> None:
        hit = min(hit_blocks * r.block_size, r.prompt_tokens)
        self._add(
            "infer", ctx=r.ctx, prompt_tokens=r.prompt_tokens, hit_tokens=hit,
            miss_tokens=r.prompt_tokens - hit, output_tokens=r.output_tokens, own_blocks=0,
        )  # fmt: skip

    def hit(self, r: Request, depth: int, key: object = None) -> None:
        """A hit at ``depth``; ``key``: the block the cache returned there (default: the
        request's own key, i.e. the cache is trusted to return the right page)."""
        key = r.keys[depth] if key is None else key
        self._add("hit", ctx=r.ctx, key=key, tier=self.tier, depth=depth)

    def touch(self, r: Request, key: object) -> None:
        """The lookup refreshed the recency of block ``key`` without reusing it (variant
        ``split-refreshes-tail``)."""
        self._add("touch", ctx=r.ctx, key=key, tier=self.tier)

    def evict(self, r: Request, e: Eviction) -> None:
        rec: dict[str, Any] = {"ctx": r.ctx, "key": e.key, "tier": self.tier}
        if e.group is not None:
            rec["group"] = e.group
        self._add("evict", **rec)

    def alloc(self, r: Request, depth: int) -> None:
        self._add("alloc", ctx=r.ctx, key=r.keys[depth], tier=self.tier, depth=depth, rewrite=False)

    def free_partial(self, r: Request, depth: int) -> None:
        self._add("free", key=None, tier=self.tier, depth=depth, reason="partial")

    def reject(self, r: Request, needed: int, available: int) -> None:
        self._add("reject", ctx=r.ctx, reason="no room", needed=needed, available=available)

    # the movement records (spec/movement.md MV8), for a cache with a tier below
    # (checkers.conformance.tiered)

    def load(self, r: Request, depth: int, from_tier: TierName) -> None:
        self._add(
            "load", ctx=r.ctx, block=None, key=r.keys[depth], depth=depth,
            from_tier=from_tier, tier=self.tier,
        )  # fmt: skip

    def copy(self, r: Request, depth: int, tier: TierName, result: str) -> None:
        self._add(
            "copy", ctx=r.ctx, key=r.keys[depth], depth=depth, from_tier=self.tier, tier=tier,
            reason="offload", result=result,
        )  # fmt: skip

    def drop_copy(self, key: object, tier: TierName) -> None:
        self._add("drop-copy", key=key, tier=tier, reason="room")


class PrefixCacheAdapter:
    """A one-tier prefix cache as a lockstep :class:`~checkers.conformance.lockstep.Implementation`.

    Per ``infer`` op, :meth:`apply` builds the :class:`Request` and asks the three hooks:

    1. :meth:`lookup` -- the pages the cache returned for the leading full prompt blocks, in
       order (keep them from eviction until :meth:`insert`); a page is the cache's own handle
       for a stored block (a page index, a block id: anything hashable);
    2. :meth:`make_room` -- make room for ``need`` new blocks: the victims, in the order taken
       (with their groups), or None to refuse the request (nothing evicted);
    3. :meth:`insert` -- store the request's full blocks after the hits and release the
       request: the page each now lives in, None for one the cache did not store (or, when it
       was refused, :meth:`refuse` -- release what :meth:`lookup` kept).

    The adapter writes the records from what the hooks *answered*: each hit names the block
    that the cache stored in the page it returned (so a cache that returns the wrong page is
    seen), a write for each page :meth:`insert` stored (so one that drops a block is seen), the
    evictions, the partial tail block freed, or the rejection; and a ``touch`` for each page in
    :attr:`touched` (a lookup that refreshed a page it did not return: a radix cache splitting
    a node it stamped, variant ``split-refreshes-tail``). Every other op of :attr:`implements`
    only updates the logical state; any op outside it is refused.
    """

    #: the ops (and trace features, :data:`CAPABILITIES`) this adapter implements: the search
    #: generates within it (:func:`within`) and :meth:`apply` refuses anything else. A subclass
    #: whose cache has pins adds ``"pin"`` and ``"unpin"`` and handles them in :meth:`apply`
    implements: ClassVar[frozenset[str]] = PREFIX_CACHE_OPS

    def __init__(self, config: EngineConfig) -> None:
        check_declared(self.implements, type(self).__name__)
        if len(config.tiers) != 1:
            raise ConfigError("a prefix cache adapter is one tier: give a single [[tiers]] entry")
        self.config = config
        self.block_size = config.block_size
        self.capacity = config.tiers[0].blocks
        self.tier = config.tiers[0].name
        self.seq = Sequences(config.block_size)
        self.synth = TokenSynth()
        #: each page the cache stored a block in (what :meth:`insert` answered), by the spec key
        #: of that block: how a page :meth:`lookup` returns is named in the hit records
        self.page_keys: dict[Hashable, BlockKey] = {}
        #: pages whose recency :meth:`lookup` refreshed without returning them: filled by the
        #: hook, recorded as ``touch`` records, emptied for each request
        self.touched: list[Hashable] = []

    # ------------------------------------------------------------------ the hooks

    def lookup(self, r: Request) -> Sequence[Hashable]:
        """The pages the cache returned for the request's leading full prompt blocks."""
        raise NotImplementedError

    def make_room(self, r: Request, hits: int, need: int) -> Sequence[Eviction] | None:
        raise NotImplementedError

    def insert(self, r: Request, hits: int) -> Sequence[Hashable | None]:
        """Store the full blocks from depth ``hits`` on (``r.full_blocks - hits`` of them) and
        release the request: for each, the page it was stored in, or None if it was not."""
        raise NotImplementedError

    def refuse(self, r: Request, hits: int) -> None:
        """The request was refused (:meth:`make_room` returned None): release what
        :meth:`lookup` kept for it. Nothing by default."""

    # ------------------------------------------------------------------ driving

    def apply(self, index: int, op: Op) -> list[dict[str, Any]]:
        if (what := undeclared(op, self.implements)) is not None:
            raise UnsupportedOpError(
                f"op {index} ({op_name(op)}): {type(self).__name__} does not implement "
                f"{CAPABILITIES[what]}; restrict the trace to what it declares "
                "(checkers.conformance.adapters.within)"
            )
        if not isinstance(op, Infer):
            self.seq.apply(op)
            return []
        try:
            return self._infer(request(self.seq, self.synth, index, op), op.t)
        finally:
            self.seq.apply(op)

    def _infer(self, r: Request, t: float) -> list[dict[str, Any]]:
        rec = Records(r.index, self.tier, t)
        self.touched = []
        pages = self.lookup(r)
        if isinstance(pages, int):  # (the kit's hook returned a count before issue 57)
            raise TypeError(
                f"{type(self).__name__}.lookup returned a count; it returns the pages the cache "
                "returned, so that a cache returning the wrong page is seen"
            )
        hits = len(pages)
        loads = self._below_lookup(r, hits)
        rec.infer(r, hits)
        for d, page in enumerate(pages):
            rec.hit(r, d, self._named(page))
        for page in self.touched:
            rec.touch(r, self._named(page))
        need = len(r.keys) - hits
        victims = self.make_room(r, hits, need)
        if victims is None:
            rec.reject(r, need, self.available(r, hits))
            self.refuse(r, hits)
            self._below_finish(r)
            return rec.out
        for e in victims:
            rec.evict(
                r, e if e.page is None else attrs.evolve(e, key=BlockKey(self._named(e.page)))
            )
        self._below_load(r, hits, loads)
        self._writes(rec, r, hits)
        self._below_store(rec, r, hits, loads)
        self._below_finish(r)
        return rec.out

    # a tier below (checkers.conformance.tiered): none here

    def _below_lookup(self, r: Request, hits: int) -> int:
        return 0

    def _below_load(self, r: Request, hits: int, loads: int) -> None:
        pass

    def _below_store(self, rec: Records, r: Request, hits: int, loads: int) -> None:
        pass

    def _below_finish(self, r: Request) -> None:
        pass

    def _writes(self, rec: Records, r: Request, hits: int) -> None:
        """:meth:`insert`, and the records of the writes it made, after it made them."""
        stored = list(self.insert(r, hits))
        new = range(hits, r.full_blocks)
        if len(stored) != len(new):
            raise ValueError(
                f"{type(self).__name__}.insert answered {len(stored)} pages for the "
                f"{len(new)} full blocks from depth {hits} (None for a block not stored)"
            )
        for d, page in zip(new, stored, strict=True):  # the writes it made, after it made them
            if page is not None:
                self.page_keys[page] = r.keys[d]  # type: ignore[assignment]
                rec.alloc(r, d)
        if r.keys and r.keys[-1] is None:
            rec.alloc(r, len(r.keys) - 1)
            rec.free_partial(r, len(r.keys) - 1)

    def _named(self, page: Hashable) -> str:
        """The key of the block the cache stored in ``page``; a page it never stored is named
        as such (it cannot match any key, so the oracle reports the reuse)."""
        key = self.page_keys.get(page)
        return str(key) if key is not None else f"(page {page!r}: nothing stored there)"

    def available(self, r: Request, hits: int) -> int:
        """For a rejection record: the blocks the cache could have given (override to report
        it; the oracle does not compare it)."""
        return 0


def check_declared(implements: Iterable[str], who: str = "the implementation") -> frozenset[str]:
    """``implements`` as a set, every name in :data:`CAPABILITIES` (a :class:`ConfigError`
    naming the unknown one otherwise)."""
    got = frozenset(implements)
    if bad := sorted(got - CAPABILITIES.keys()):
        raise ConfigError(
            f"{who} declares {bad[0]!r}, which is not an op or a trace feature; "
            f"known: {', '.join(CAPABILITIES)}"
        )
    return got


def undeclared(op: Op, implements: frozenset[str]) -> str | None:
    """What of ``op`` lies outside ``implements`` (an op name or a trace feature), or None."""
    name = op_name(op)
    if name not in implements:
        return name
    if (
        isinstance(op, Infer)
        and OUTPUT_HASH not in implements
        and any(m.hash is not None for m in op.output)
    ):
        return OUTPUT_HASH
    return None


def refuse_undeclared(trace: Trace, implements: Iterable[str], *, file: str | None = None) -> None:
    """Raise :class:`UnsupportedOpError` naming the first op of ``trace`` outside
    ``implements`` (and ``file``, the trace's, if given)."""
    have = check_declared(implements)
    for i, op in enumerate(trace.ops):
        if (what := undeclared(op, have)) is not None:
            where = f"{file}: " if file is not None else ""
            raise UnsupportedOpError(
                f"{where}op {i} ({op_name(op)}): the implementation does not implement "
                f"{CAPABILITIES[what]} (it declares {', '.join(sorted(have))}); give traces "
                "within it (checkers.conformance.adapters.within)"
            )


def within(trace: Trace, implements: Iterable[str]) -> Trace:
    """``trace`` restricted to what an implementation declares it implements: the ops it does
    not implement dropped, and (without :data:`OUTPUT_HASH`) every output message's content made
    fresh; an op that dropping made bad input (an ``append`` to a context whose ``fork`` went)
    is dropped too, as the contract model judges it, so the result is always valid input. The
    search generates within a declaration this way; it never lets an undeclared op reach an
    implementation, which would ignore it and be blamed for what followed."""
    from checkers.invariants.nversion import validity_model

    have = check_declared(implements)
    shadow = validity_model()
    ops: list[Op] = []
    for op in trace.ops:
        if op_name(op) not in have:
            continue
        if undeclared(op, have) == OUTPUT_HASH:
            assert isinstance(op, Infer)
            op = attrs.evolve(op, output=tuple(attrs.evolve(m, hash=None) for m in op.output))
        if shadow.refusal(op) is not None:
            continue
        shadow.apply(op)
        ops.append(op)
    return Trace(trace.header, tuple(ops))


def comparable(trace: Trace) -> Trace:
    """``trace`` within what a plain prefix cache implements (:data:`PREFIX_CACHE_OPS`): no
    pins, and every output message's content fresh (decoding writes new blocks even when
    identical content is cached, where the model recomputes into the cached slot, B6.3)."""
    return within(trace, PREFIX_CACHE_OPS)


# ---------------------------------------------------------------- loading third-party source


def _use_clock(mod: types.ModuleType, fake: types.SimpleNamespace) -> None:
    """Point a loaded module's ``time`` (``import time``) and its imported clock functions
    (``from time import monotonic``) at ``fake``."""
    import time as real

    for name, value in list(mod.__dict__.items()):
        if value is real:
            mod.__dict__[name] = fake
        else:
            for fn in ("time", "monotonic", "perf_counter", "time_ns", "monotonic_ns"):
                if value is getattr(real, fn):
                    mod.__dict__[name] = getattr(fake, fn)


def stub_module(name: str, **members: Any) -> types.ModuleType:
    """A module (and package) with ``members``, whose other attributes are inert placeholder
    classes: what a framework import the code under test never really uses needs."""
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package, so submodules can be imported from it
    mod.__dict__.update(members)

    def missing(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (), {"__module__": name})

    mod.__getattr__ = missing  # type: ignore[method-assign]
    return mod


@contextmanager
def _installed(prefixes: Sequence[str], extra: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """``extra`` in ``sys.modules`` for the duration, every module under ``prefixes`` that was
    there before put back after."""

    def ours(k: str) -> bool:
        return any(k == p or k.startswith(p + ".") for p in prefixes)

    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.modules.update(extra)
    try:
        yield
    finally:
        for k in [k for k in sys.modules if ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


def load_module(
    sources: Sequence[tuple[str, str, str]],
    stubs: Mapping[str, types.ModuleType],
    *,
    clock: Callable[[], float] | None = None,
) -> dict[str, types.ModuleType]:
    """Execute ``(module name, file name, source)`` in order against ``stubs`` (each module sees
    the ones before it and the stubs as imports); the modules by name. ``clock``: every module's
    ``time`` is a stand-in whose ``time``, ``monotonic`` and ``perf_counter`` (and ``_ns``
    forms) read it, so a cache that stamps recency with the wall clock is deterministic.
    A failure is a :class:`ConfigError` naming the file."""
    prefixes = sorted({n.split(".")[0] for n in [*stubs, *(s[0] for s in sources)]})
    loaded: dict[str, types.ModuleType] = {}
    extra = dict(stubs)
    if clock is not None:
        tick = clock
        fake = types.SimpleNamespace(
            time=tick, monotonic=tick, perf_counter=tick,
            time_ns=lambda: int(tick() * 1e9), monotonic_ns=lambda: int(tick() * 1e9),
            perf_counter_ns=lambda: int(tick() * 1e9),
        )  # fmt: skip
    with _installed(prefixes, extra):
        for modname, file, text in sources:
            mod = types.ModuleType(modname)
            mod.__file__ = file
            sys.modules[modname] = mod
            try:
                exec(compile(text, file, "exec"), mod.__dict__)
            except Exception as e:
                raise ConfigError(f"loading {file} with stub modules failed: {e!r}") from e
            if clock is not None:
                _use_clock(mod, fake)
            loaded[modname] = mod
    return loaded
