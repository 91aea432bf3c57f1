"""The policy protocol, declarative rank keys, and policy resolution (spec PP1-PP4).

A policy answers three questions, each from a read-only :class:`~kvmodel.view.ModelView`:

* ``place(view, block)`` -- where may this new block go? A :class:`Placement`: an ordered tuple of
  tiers, and whether to *bypass* the reuse store (the block serves its inference, is never
  indexed, and is freed after it);
* ``eviction_order(view, candidates)`` -- the evictable blocks, victims first;
* ``on_op(view, op)`` -- after each trace op: blocks to free now (boundary reclaim).

A :class:`BasePolicy` states its reclaim rule as data (:class:`Reclaim`, read by the engine
through ``BasePolicy.on_op`` and by the model checkers alike) and learns from ops in
:meth:`BasePolicy.observe`; it overrides ``on_op`` only for a rule that is not data.

Most policies state eviction as a **declarative rank**: a lexicographic key over named block
features (:class:`RankTerm`). The engine sorts by it, and the same data can be translated to Z3,
so one definition is both run and proved. Ties are broken by ascending block id, always.
"""

from __future__ import annotations

import enum
import functools
import heapq
import importlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import attrs

from kvmodel.copies import DEFAULT_COPY_RULES, CopyRules
from kvmodel.errors import (
    KVModelError,
    PolicyDefinitionError,
    PolicyNotFoundError,
    is_interrupt,
)
from kvmodel.ids import BlockId, TierName
from kvmodel.io.trace import Op
from kvmodel.lifecycle import BlockClass
from kvmodel.view import BlockInfo, Featured, ModelView, NewBlock

__all__ = [
    "BUILTIN_POLICIES",
    "ENTRY_POINT_GROUP",
    "FEATURES",
    "FIXED_BY_CONTEXTS",
    "RAISED_BY_CONTEXTS",
    "STRUCTURAL_CLAIMS",
    "BasePolicy",
    "Placement",
    "Policy",
    "RankTerm",
    "Reclaim",
    "claimed_invariants",
    "copy_rules",
    "declared_bypass",
    "declared_rank",
    "declared_reclaim",
    "fixed_key_function",
    "fixed_positions",
    "key_function",
    "key_source",
    "moves",
    "next_tier",
    "raised_by_contexts",
    "rank_key",
    "registered_policies",
    "resolve_policy",
    "separable_by_contexts",
    "term_function",
]

ENTRY_POINT_GROUP = "kvmodel.policies"

#: Built-in names and the import paths they resolve to. ``kvmodel`` does not import ``policies``:
#: they are found exactly as a third-party ``package.module:Name`` would be.
BUILTIN_POLICIES: Mapping[str, str] = {
    "belady": "policies.offline:Belady",
    "discovered": "policies.discovered:Discovered",
    "hbm-first": "policies.hbm_first:HBMFirst",
    "hbm-first-static": "policies.hbm_first:HBMFirstStatic",
    "kvtether": "policies.kvtether:KVTether",
    "kvtether-offload": "policies.offload:KVTetherOffload",
    "lachesis": "policies.lachesis:Lachesis",
    "lachesis-det": "policies.lachesis:LachesisDet",
    "lru": "policies.lru:LRU",
    "lru-demote": "policies.offload:LRUDemote",
    "lru-offload": "policies.offload:LRUOffload",
    "mori": "policies.prediction:MORI",
    "opt-placement": "policies.offline:OptPlacement",
    "tether-lachesis": "policies.tether_lachesis:TetherLachesis",
    "ttl": "policies.prediction:TTL",
    "vllm-prefix": "policies.vllm_prefix:VLLMPrefix",
    "vllm-offload": "policies.offload:VLLMOffload",
    "vllm-offload-arc": "policies.offload:VLLMOffloadARC",
}


#: Invariants every policy claims: they hold by the engine's construction whatever the policy
#: decides within the protocol (spec/invariants.md, structural).
STRUCTURAL_CLAIMS: frozenset[str] = frozenset(
    {
        "accounting",
        "chains",
        "legal-transitions",
        "no-eviction-in-flight",
        "no-stale-hit",
        "pinned-never-evicted",
    }
)


@attrs.frozen(slots=True)
class Placement:
    """Where a new block goes: ``tiers`` in order of preference (the first with a free slot,
    or room made by eviction, wins); ``bypass``: the block serves its inference, is never
    indexed and is freed right after it (spec PP2, P8)."""

    tiers: tuple[TierName, ...]
    bypass: bool = False


@runtime_checkable
class Policy(Protocol):
    """What the engine asks a policy (spec PP1): ``place`` each new block, order the
    ``eviction_order`` candidates when room is needed, and reclaim blocks ``on_op`` after
    each op. Subclass :class:`BasePolicy` for the defaults and declarative ranks."""

    @property
    def name(self) -> str: ...

    def place(self, view: ModelView, block: NewBlock) -> Placement: ...

    def eviction_order(
        self, view: ModelView, candidates: Sequence[BlockInfo]
    ) -> Iterable[BlockId]: ...

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]: ...


#: Numeric block features a rank term may name, each as the Python expression that reads it from
#: a block ``b`` (a :class:`~kvmodel.view.Featured`). The one definition of each: :data:`FEATURES`
#: and the compiled rank keys (:func:`key_function`) are both made from these texts.
FEATURE_EXPRESSIONS: Mapping[str, str] = {
    "last_access": "b.last_access",
    "last_op": "float(b.last_op)",
    "suspend_time": "b.suspend_time",
    "alloc_time": "b.alloc_time",
    "depth": "float(b.depth)",
    "tier": "float(b.tier_index)",
    "holders": "float(len(b.holders))",
}


def _lambda(body: str, names: Mapping[str, object] | None = None) -> Any:
    """``lambda b: <body>``, compiled (``names``: what the body may call besides builtins). The
    body is made here from :data:`FEATURE_EXPRESSIONS` and term indices, never from input."""
    return eval(f"lambda b: {body}", dict(names or {}))


#: Numeric block features a rank term may name. ``None`` sorts as -inf.
FEATURES: Mapping[str, Callable[[Featured], float | None]] = {
    name: _lambda(expr) for name, expr in FEATURE_EXPRESSIONS.items()
}

#: The features that may be None (:class:`~kvmodel.view.Featured`: a block not Suspended has no
#: suspension time); every other one is always a number.
MAY_BE_NONE: frozenset[str] = frozenset({"suspend_time"})

#: How a change to a block's holding contexts alone -- one that does not bump the block itself
#: (a holder joining or leaving, a write, a hit do) -- can move each feature (spec PP3,
#: performance note): ``depth``, ``tier``, ``alloc_time`` and ``holders`` not at all;
#: ``last_access`` and ``last_op`` only up (a holder's last inference only moves forward); the
#: class and ``suspend_time`` either way.
RAISED_BY_CONTEXTS: frozenset[str] = frozenset({"last_access", "last_op"})
FIXED_BY_CONTEXTS: frozenset[str] = frozenset({"depth", "tier", "alloc_time", "holders"})


def raised_by_contexts(terms: Sequence[RankTerm]) -> bool:
    """True when no change to a block's holding contexts can lower its key under ``terms``:
    every term reads a feature such changes leave alone, or raise and the term sorts
    ascending. The rank index then re-keys such a block when it is about to be evicted, not
    at every change of a context that holds it."""
    return all(
        t.only is None
        and (
            t.feature in FIXED_BY_CONTEXTS or (t.feature in RAISED_BY_CONTEXTS and not t.descending)
        )
        for t in terms
    )


@attrs.frozen(slots=True, cache_hash=True)  # hashed once: term_function looks terms up
class RankTerm:
    """One component of a lexicographic eviction key; smaller keys are evicted first.

    * ``feature`` -- a name in :data:`FEATURES`, or ``"state"`` with an explicit ``order`` (the
      classes listed first are evicted first; a class not listed sorts last);
    * ``descending`` -- larger values first (e.g. MRU on ``suspend_time``);
    * ``only`` -- the term applies only to blocks in these classes and is 0 for the others, so
      one key can say "MRU within Suspended, LRU within Active".
    """

    feature: str
    descending: bool = False
    order: tuple[BlockClass, ...] = ()
    only: frozenset[BlockClass] | None = None

    def __attrs_post_init__(self) -> None:
        if self.feature == "state":
            if not self.order:
                raise ValueError("RankTerm('state') needs an order of BlockClass values")
        elif self.feature not in FEATURES:
            raise ValueError(
                f"unknown rank feature {self.feature!r}; known: state, "
                + ", ".join(sorted(FEATURES))
            )

    def value(self, b: Featured) -> float:
        """The term's value for ``b`` (the term's compiled function: :func:`term_function`)."""
        return term_function(self)(b)


_TERM_FUNCTIONS: dict[RankTerm, Callable[[Featured], float]] = {}


def term_function(t: RankTerm) -> Callable[[Featured], float]:
    """``t``'s value as a function of a block, built once per term: the one definition of what a
    term means, read by :meth:`RankTerm.value`, :func:`rank_key` and :func:`key_function`.

    ``None`` sorts as -inf; ``descending`` negates; a state term is the class's first position
    in ``order`` (a class not listed: after all listed); ``only`` makes it 0 for other classes.
    """
    fn = _TERM_FUNCTIONS.get(t)
    if fn is None:
        fn = _TERM_FUNCTIONS[t] = _compile_term(t)
    return fn


def _compile_term(t: RankTerm) -> Callable[[Featured], float]:
    only, descending = t.only, t.descending
    if t.feature == "state":
        pos: dict[BlockClass, float] = {}
        for i, c in enumerate(t.order):
            pos.setdefault(c, float(i))
        unlisted = float(len(t.order))

        def state_term(b: Featured) -> float:
            if only is not None and b.state not in only:
                return 0.0
            x = pos.get(b.state, unlisted)
            return -x if descending else x

        return state_term
    get = FEATURES[t.feature]
    if only is None and t.feature not in MAY_BE_NONE:
        # the common term, compiled to one call fewer (a key is built for every block keyed)
        num = cast(Callable[[Featured], float], get)  # (never None: see MAY_BE_NONE)
        if not descending:
            return num

        def negated(b: Featured) -> float:
            return -num(b)

        return negated

    def feature_term(b: Featured) -> float:
        if only is not None and b.state not in only:
            return 0.0
        v = get(b)
        x = -math.inf if v is None else v
        return -x if descending else x

    return feature_term


#: compiled keys of the rank tuples :func:`rank_key` has seen, by identity (a tuple of frozen
#: terms cannot change; the entry holds it, so its id is not reused while the entry lives)
_KEY_FUNCTIONS: dict[int, tuple[tuple[RankTerm, ...], Callable[[Featured], tuple[float, ...]]]] = {}


def rank_key(terms: Sequence[RankTerm], b: Featured) -> tuple[float, ...]:
    """The full sort key: the terms, then the block id (the universal tie-break)."""
    if not isinstance(terms, tuple):  # a list may change between calls: nothing is cached
        return (*[term_function(t)(b) for t in terms], float(b.id))
    hit = _KEY_FUNCTIONS.get(id(terms))
    if hit is None or hit[0] is not terms:
        if len(_KEY_FUNCTIONS) >= 256:
            _KEY_FUNCTIONS.clear()
        hit = _KEY_FUNCTIONS[id(terms)] = (terms, key_function(terms))
    return hit[1](b)


def key_function(terms: Sequence[RankTerm]) -> Callable[[Featured], tuple[float, ...]]:
    """``rank_key(terms, ·)`` as one function, for a caller that keys many blocks by one rank
    (the engine's rank index)."""
    return _compile_key(tuple(terms))


@functools.lru_cache(maxsize=256)
def _compile_key(terms: tuple[RankTerm, ...]) -> Callable[[Featured], tuple[float, ...]]:
    """The terms' values, then the block id, as one compiled ``lambda``: a plain numeric term is
    its feature's expression inlined (negated if descending), any other term a call of its
    :func:`term_function` -- the same values, without a call per term (a key is built for every
    block the rank index keys). Cached by the terms (frozen, so hashable): the search builds an
    engine, and so a rank index, per example, and compiling costs more than many keys."""
    parts: list[str] = []
    names: dict[str, object] = {}
    for i, t in enumerate(terms):
        expr = _inline(t)
        if expr is None:
            names[f"_t{i}"] = term_function(t)
            expr = f"_t{i}(b)"
        parts.append(expr)
    parts.append("float(b.id)")
    return cast(Callable[[Featured], tuple[float, ...]], _lambda(f"({', '.join(parts)},)", names))


def _inline(t: RankTerm) -> str | None:
    """A plain numeric term's value as an expression over a :class:`~kvmodel.view.Featured`
    ``b`` (negated if descending); None for a term read by a call (the class, a condition, a
    feature that may be None)."""
    if t.feature == "state" or t.only is not None or t.feature in MAY_BE_NONE:
        return None
    expr = FEATURE_EXPRESSIONS[t.feature]
    return f"-{expr}" if t.descending else expr


def key_source(terms: Sequence[RankTerm]) -> str | None:
    """``rank_key(terms, b)``'s values as Python expressions, comma-separated, over a
    :class:`~kvmodel.view.Featured` ``b`` whose features they read only as ``b.<feature>``, when
    every term is a plain numeric one; None when a term needs a call. For a caller that reads
    the features from elsewhere (the rank index's one-holder entries)."""
    parts = [_inline(t) for t in terms]
    if any(p is None for p in parts):
        return None
    return ", ".join([*cast(list[str], parts), "float(b.id)"])


def separable_by_contexts(terms: Sequence[RankTerm]) -> bool:
    """True when, among blocks that share every feature a holding context sets (class, recency,
    suspension: all but :data:`FIXED_BY_CONTEXTS`), the order is the order of the terms on fixed
    features alone, whatever those shared values are: no term on a fixed feature is
    conditioned on the class (``only``). The rank index then keys such blocks of one context
    as a group: a change to the context re-keys the group's first block, not every block (spec
    PP3, performance note)."""
    return all(t.only is None for t in terms if t.feature in FIXED_BY_CONTEXTS)


def fixed_key_function(terms: Sequence[RankTerm]) -> Callable[[Featured], tuple[float, ...]]:
    """The part of ``rank_key(terms, ·)`` no change to a block's holding contexts can move: the
    terms on :data:`FIXED_BY_CONTEXTS` features, in rank order, then the block id. Between two
    blocks whose context-set features are equal, and under a rank that is
    :func:`separable_by_contexts`, it orders them as the whole key does."""
    return _compile_key(tuple(terms[i] for i in fixed_positions(terms)[:-1]))


def fixed_positions(terms: Sequence[RankTerm]) -> tuple[int, ...]:
    """Where :func:`fixed_key_function`'s values sit in ``rank_key(terms, ·)``, in its order
    (the last, the block id, at the key's end)."""
    return (*(i for i, t in enumerate(terms) if t.feature in FIXED_BY_CONTEXTS), len(terms))


class Reclaim(enum.Enum):
    """A policy's reclaim rule as data (spec/policies.md §Declared reclaim): what
    ``BasePolicy.on_op`` frees after every op, and what the model checkers inline. The engine
    and the checkers read the same attribute, so the rule a proof assumes is the rule that runs;
    a policy that needs another rule writes ``on_op`` and is outside the symbolic fragment."""

    NONE = "none"  #: frees nothing
    DEAD = "dead"  #: after every op, exactly the Dead blocks (eager no-zombie-KV)


class BasePolicy:
    """Defaults: place in configuration order, rank by :attr:`rank`, reclaim by :attr:`reclaim`.

    Subclass and set ``name``, ``rank`` and ``reclaim``; learn from ops in :meth:`observe`;
    override a method only where a rule is not data. A class whose ``on_op`` is code has no
    declared rule (:func:`declared_reclaim` is None; an inherited ``reclaim`` only says what
    ``super().on_op`` does), and a class that declares ``reclaim`` in its own body while its
    ``on_op`` is code is refused when it is defined -- the declaration would be a claim about
    code that nothing enforces (kvmodel issue 13: such a claim was trusted by ``kvmodel
    prove``); so is ``reclaim = None`` without an ``on_op``. Both raise
    :class:`~kvmodel.errors.PolicyDefinitionError`.
    """

    name: ClassVar[str] = "base"
    rank: ClassVar[tuple[RankTerm, ...]] = ()
    #: Invariants (spec names) the policy claims to satisfy; checked by ``checkers``.
    claims: ClassVar[frozenset[str]] = frozenset()
    #: The reclaim rule ``BasePolicy.on_op`` applies, as data (None: the class's on_op is code)
    reclaim: ClassVar[Reclaim | None] = Reclaim.NONE
    #: The policy's code (``place``, beyond the declared rank and reclaim) reads times only to
    #: compare them, never to measure a duration or compare with a constant: its decisions do
    #: not change under a strictly increasing re-timing of the trace. Declared, not inferred;
    #: the exhaustive search (checkers.symbolic.reach) relies on it and the ``retiming`` relation
    #: (checkers.search.metamorphic) tests it. It speaks for the ``place`` of the class that sets
    #: it: a subclass overriding ``place`` declares again.
    compares_times_only: ClassVar[bool] = False
    #: The classes of new blocks whose ``place`` bypasses the reuse store (spec PP2, declared
    #: bypass), as data the engine enforces: it refuses a Placement whose ``bypass`` disagrees
    #: (a ``bad-placement`` PolicyError), so the model checkers may inline it at every depth.
    #: None: bypass is code the engine does not check. It speaks for the ``place`` of the class
    #: that sets it (:func:`declared_bypass`): a subclass overriding ``place`` declares again.
    bypasses: ClassVar[frozenset[BlockClass] | None] = frozenset()
    #: Movement (spec/movement.md MV2), as data: a victim of one of these classes is *demoted*
    #: (a copy kept in the next tier below its own) when it is evicted ...
    demotes: ClassVar[frozenset[BlockClass]] = frozenset()
    #: ... and a block of one of these classes that an inference wrote into its chain is
    #: *offloaded* (a copy written through to the next tier below) when the inference commits.
    offloads: ClassVar[frozenset[BlockClass]] = frozenset()
    #: How the copies are kept (spec/movement.md MV5, MV13): which leaves a tier for room
    #: first, whether an inference's offloads are one store, what it offers. Read by the
    #: engine's copy store, the contract model and the oracle; meaningful only for a policy
    #: that moves.
    copy_rules: ClassVar[CopyRules] = DEFAULT_COPY_RULES

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.on_op is BasePolicy.on_op:
            if cls.reclaim is None:
                raise PolicyDefinitionError(
                    f"policy class {cls.__qualname__}: reclaim = None says the rule is code, but "
                    "the class does not override on_op (declare Reclaim.NONE or Reclaim.DEAD)"
                )
        elif vars(cls).get("reclaim") is not None:
            raise PolicyDefinitionError(
                f"policy class {cls.__qualname__} declares reclaim = {vars(cls)['reclaim']} "
                "while its on_op is code: the declaration would not be what runs. Keep the "
                "declaration and move what on_op observes into observe(), or keep on_op and "
                "drop the declaration"
            )

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        """Every tier in the configured order; the reuse store bypassed exactly for the classes
        :attr:`bypasses` declares (spec PP2): a policy declares its bypass rule as data and
        writes no ``place`` for it."""
        by = self.bypasses
        return Placement(view.tier_names(), bypass=by is not None and block.state in by)

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        """Candidates by ascending :func:`rank_key`, produced lazily from a heap.

        O(n) to build plus O(log n) per victim taken; a block's key is recomputed only when the
        view hands over a new ``BlockInfo`` for it (unchanged blocks keep the same object).
        """
        terms = self.rank
        cache = self._rank_cache()
        heap: list[tuple[tuple[float, ...], BlockId]] = []
        for b in candidates:
            hit = cache.get(b.id)
            if hit is None or hit[0] is not b:
                hit = (b, rank_key(terms, b))
                cache[b.id] = hit
            heap.append((hit[1], b.id))
        heapq.heapify(heap)
        while heap:
            yield heapq.heappop(heap)[1]

    def _rank_cache(self) -> dict[BlockId, tuple[BlockInfo, tuple[float, ...]]]:
        cache: dict[BlockId, tuple[BlockInfo, tuple[float, ...]]] | None = getattr(
            self, "_kvmodel_rank_cache", None
        )
        if cache is None:
            cache = {}
            self._kvmodel_rank_cache = cache
        return cache

    def demote_to(self, view: ModelView, victim: BlockInfo) -> TierName | None:
        """The tier to keep a copy of ``victim`` in as it is evicted, or None to drop it
        (MV2): by default the next tier below the victim's when its class is in
        :attr:`demotes`."""
        return next_tier(view, victim.tier) if victim.state in self.demotes else None

    def offload_to(self, view: ModelView, block: BlockInfo) -> TierName | None:
        """The tier to write a copy of ``block`` through to as its inference commits, or None
        (MV2): by default the next tier below its own when its class is in :attr:`offloads`."""
        return next_tier(view, block.tier) if block.state in self.offloads else None

    def observe(self, view: ModelView, op: Op) -> None:
        """Learn from the op just applied (a predictor's or tracker's update); frees nothing.
        Called by ``BasePolicy.on_op`` after every op, before the rule's reclaim."""

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        """:meth:`observe`, then the declared :attr:`reclaim` rule's blocks (spec PP4)."""
        self.observe(view, op)
        if self.reclaim is Reclaim.DEAD:
            return view.dead()
        return ()


def next_tier(view: ModelView, tier: TierName) -> TierName | None:
    """The tier after ``tier`` in configuration order (the next slower), or None."""
    names = view.tier_names()
    i = names.index(tier) + 1
    return names[i] if i < len(names) else None


def copy_rules(policy: object) -> CopyRules:
    """The rules ``policy``'s copies are kept by (spec/movement.md MV13): its declared
    ``copy_rules``, the defaults for a policy that declares none."""
    rules = getattr(policy, "copy_rules", None)
    return rules if isinstance(rules, CopyRules) else DEFAULT_COPY_RULES


def moves(policy: object) -> bool:
    """True when ``policy`` may move KV between tiers (spec/movement.md MV2, MV9): it declares
    ``demotes`` or ``offloads``, or its ``demote_to`` / ``offload_to`` is code of its own (or it
    is not a :class:`BasePolicy` and has either). The engine tracks copies only for such a
    policy, and the symbolic rungs answer ``unknown`` for it."""
    if not isinstance(policy, BasePolicy):
        return callable(getattr(policy, "demote_to", None)) or callable(
            getattr(policy, "offload_to", None)
        )
    cls = type(policy)
    inst = getattr(policy, "__dict__", {})
    return bool(
        policy.demotes
        or policy.offloads
        or cls.demote_to is not BasePolicy.demote_to
        or cls.offload_to is not BasePolicy.offload_to
        or "demote_to" in inst
        or "offload_to" in inst
    )


def claimed_invariants(policy: object) -> frozenset[str]:
    """The invariants (spec names) ``policy`` claims to satisfy: its ``claims``, or none for a
    policy without the attribute (the :class:`Policy` protocol does not require it). The one
    reading of a claim: the checkers, ``kvmodel prove`` and ``kvmodel policies`` all ask here."""
    return frozenset(getattr(policy, "claims", ()))


def declared_reclaim(policy: object) -> Reclaim | None:
    """The policy's reclaim rule as data, or None when it is code (``on_op`` overridden, on the
    class or the instance, or not a :class:`BasePolicy`). A declared rule is what the engine
    runs: ``BasePolicy.on_op`` reads the same attribute, so the model checkers may inline it
    for every depth."""
    if not isinstance(policy, BasePolicy):
        return None
    if type(policy).on_op is not BasePolicy.on_op or "on_op" in getattr(policy, "__dict__", {}):
        return None
    return policy.reclaim


def declared_bypass(policy: object) -> frozenset[BlockClass] | None:
    """The classes the policy's ``place`` bypasses, as a declaration the engine enforces, or
    None when bypass is code: ``place`` overridden below the class that declared
    :attr:`BasePolicy.bypasses`, set on an instance, or not a :class:`BasePolicy`."""
    if not isinstance(policy, BasePolicy) or "place" in getattr(policy, "__dict__", {}):
        return None
    mro = type(policy).__mro__
    place_owner = next(c for c in mro if "place" in vars(c))
    owner = next(c for c in mro if "bypasses" in vars(c))
    if not issubclass(owner, place_owner):
        return None
    return policy.bypasses


def declared_rank(policy: object) -> tuple[RankTerm, ...] | None:
    """The declarative rank that *is* the policy's eviction order, or None when it orders
    blocks its own way (an overridden ``eviction_order``) or has no rank. The one test of "a
    rank policy": the engine's fast path, the oracle, the Z3 rank proofs and the bounded
    model checker all ask it, so none of them judges a rank the policy does not follow."""
    if not isinstance(policy, BasePolicy):
        return None
    method: object = type(policy).eviction_order
    if method is not BasePolicy.eviction_order or not policy.rank:
        return None
    return policy.rank


def _load(path: str) -> Any:
    mod_name, _, attr = path.partition(":")
    if not mod_name or not attr:
        raise PolicyNotFoundError(f"expected 'package.module:Name' (got {path!r})")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise PolicyNotFoundError(
            f"cannot import module {mod_name!r} for policy {path!r}: {e}"
        ) from e
    except KVModelError:
        raise  # (a PolicyDefinitionError names the class and what it contradicts)
    except BaseException as e:  # a module that raises (even SystemExit) on import: not a pass
        if is_interrupt(e):
            raise
        raise PolicyNotFoundError(
            f"importing module {mod_name!r} for policy {path!r} raised {type(e).__name__}: {e}"
        ) from e
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PolicyNotFoundError(f"module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _registered() -> dict[str, str]:
    found = dict(BUILTIN_POLICIES)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def registered_policies() -> Mapping[str, str]:
    """Every policy name known by built-in table or entry point, with its import path."""
    return dict(sorted(_registered().items()))


def resolve_policy(spec: str | Policy) -> Policy:
    """A fresh policy instance from a name (``"lru"``) or an import path (``"pkg.mod:Name"``).

    A class is instantiated with no arguments; a factory function is called; an instance is used
    as is. Policies hold no global state, so every replay gets its own instance.
    """
    if not isinstance(spec, str):
        return spec
    # a built-in name wins over an entry point of the same name (see _registered), so it is
    # resolved without scanning the installed distributions' entry points (milliseconds a call)
    path = spec if ":" in spec else BUILTIN_POLICIES.get(spec) or _registered().get(spec)
    if path is None:
        raise PolicyNotFoundError(
            f"unknown policy {spec!r}; known: {', '.join(sorted(_registered()))}, or give "
            "'package.module:Name'"
        )
    obj = _load(path)
    try:
        inst = obj() if callable(obj) else obj
    except TypeError as e:
        raise PolicyNotFoundError(f"{path!r} cannot be instantiated without arguments: {e}") from e
    except KVModelError:
        raise
    except BaseException as e:  # ``sys:exit`` is callable: SystemExit must not read as a pass
        if is_interrupt(e):
            raise
        raise PolicyNotFoundError(
            f"{path!r} raised {type(e).__name__} when called to make a policy: {e!r}"
        ) from e
    if not isinstance(inst, Policy):
        raise PolicyNotFoundError(
            f"{path!r} does not provide a policy (needs name, place, eviction_order, on_op)"
        )
    return inst
