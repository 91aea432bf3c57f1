"""The rank index's cost and the conditions that make its shortcuts sound (spec PP3, performance
note). Its answers are pinned against sorting by the differential tests in test_properties.py;
here, what an inference costs it (counted, not timed), mutants of the index that those
differential comparisons catch, and the monitor's check that every victim is the declared rank's
first (spec/invariants.md, Self-checks of the engine), which catches them in any search."""

from __future__ import annotations

import heapq
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvmodel._rank_index
from checkers.invariants.predicates import evict_rank_first
from checkers.invariants.replay import check_ops
from checkers.search.mutants import _HeadsOnlyIndex
from kvmodel._rank_index import RankIndex, _Queue, one_holder_entry
from kvmodel._resident import ResidentBlock
from kvmodel.blocks import BlockSpec
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import InternalError, KVModelError
from kvmodel.ids import BlockId, BlockKey, ContextId, MessageId, SessionId, TierName
from kvmodel.io.trace import Append, Infer, Op, Open
from kvmodel.lifecycle import BlockClass
from kvmodel.memory import TierConfig
from kvmodel.messages import AgentKind, Message, MessageKind, Role
from kvmodel.policy import (
    BasePolicy,
    Policy,
    RankTerm,
    declared_rank,
    fixed_key_function,
    fixed_positions,
    key_function,
    raised_by_contexts,
    resolve_policy,
    separable_by_contexts,
)
from kvmodel.view import BlockInfo
from kvmodel.workloads import AgenticParams, RandomParams, generate_agentic, random_trace

_C = BlockClass
RANKED = ("lru", "vllm-prefix", "hbm-first", "hbm-first-static", "kvtether", "lachesis",
          "lachesis-det", "tether-lachesis", "discovered")  # fmt: skip


def _log(ops: list[Op], cfg: EngineConfig, policy: Policy | str, *, fast: bool) -> str:
    pol = resolve_policy(policy) if isinstance(policy, str) else policy
    engine = Engine(cfg, pol, fast=fast)
    for op in ops:
        try:
            engine.apply(op)
        except KVModelError:
            break
    return engine.log.to_jsonl()


def _features_per_inference(policy: str, tokens: int, steps: int = 24) -> float:
    """Two contexts of ``tokens`` tokens take turns (append 16 tokens, infer) with memory full,
    so every inference evicts; how many blocks the rank index keys per inference (its
    ``keyed`` count: from their features, or straight from a one-holder block), after four
    warm-up inferences (the first look keys all of memory once)."""
    n = 0

    def msg(size: int) -> Message:
        nonlocal n
        n += 1
        return Message(MessageId(f"m{n}"), Role.USER, MessageKind.OBSERVATION, size)

    filler = 2 * steps + 64
    cfg = EngineConfig(16, (TierConfig(TierName("hbm"), 2 * (tokens // 16) + filler + 1),))
    engine = Engine(cfg, resolve_policy(policy))
    index = engine.victims
    assert isinstance(index, RankIndex)
    cold, ctxs = ContextId("cold"), (ContextId("c0"), ContextId("c1"))
    ops: list[Op] = [
        Open(0.0, cold, SessionId("cold"), AgentKind.MAIN),
        Append(0.0, cold, (msg(filler * 16 + 1),)),
        Infer(0.0, cold, ()),
    ]
    for k, c in enumerate(ctxs):
        ops += [Open(0.0, c, SessionId(f"s{k}"), AgentKind.MAIN)]
        ops += [Append(0.0, c, (msg(tokens),)), Infer(0.0, c, ())]
    for i in range(4 + steps):
        c = ctxs[i % 2]
        ops += [Append(float(i + 1), c, (msg(16),)), Infer(float(i + 1), c, ())]
    warm = len(ops) - 2 * steps
    for i, op in enumerate(ops):
        if i == warm:
            start, evicted = index.keyed, sum(engine.stats.evictions.values())
        engine.apply(op)
    assert sum(engine.stats.evictions.values()) > evicted  # the order was consulted
    assert engine.stats.rejected == 0
    return (index.keyed - start) / steps


@pytest.mark.parametrize(
    "policy", ["kvtether", "lachesis", "tether-lachesis", "lru", "vllm-prefix"]
)
def test_an_inference_keys_as_many_blocks_at_16k_tokens_as_at_1k(policy: str) -> None:
    # per-inference work proportional to new blocks, not context length (issue 18 item 2):
    # before grouped keying, kvtether computed 76 blocks' features per inference at 1k tokens
    # and 1,036 at 16k (its whole chain on every change to a context)
    short = _features_per_inference(policy, 1_024)
    long = _features_per_inference(policy, 16_384)
    assert long <= 2 * short + 2, (short, long)


def test_a_one_holder_entry_carries_the_key_of_the_blocks_features() -> None:
    # the rank index keys a one-holder block straight from ONE_HOLDER, its features unbuilt:
    # the entry it makes must carry the rank's key of the block's features, for every rank it
    # does so for (every term a plain numeric one: each feature, ascending and descending,
    # below) on every one-holder block after every op of random traces on small memories
    every = tuple(
        RankTerm(f, descending=d)
        for f in ("tier", "last_access", "last_op", "alloc_time", "depth", "holders")
        for d in (True, False)
    )
    ranks = [every, every[::-1], *(r for p in RANKED if (r := declared_rank(resolve_policy(p))))]
    assert one_holder_entry(declared_rank(resolve_policy("kvtether")) or ()) is None  # (state)
    cfg = EngineConfig(2, (TierConfig(TierName("hbm"), 6), TierConfig(TierName("hbf"), 9)))
    compared = 0
    for seed in range(12):
        engine = Engine(cfg, resolve_policy("lru"))
        index = engine.victims
        assert isinstance(index, RankIndex)
        for op in random_trace(RandomParams(seed=seed, ops=80)).ops:
            try:
                engine.apply(op)
            except KVModelError:
                break
            for terms in ranks:
                entry, key = one_holder_entry(tuple(terms)), key_function(terms)
                if entry is None:
                    continue
                for b in engine.blocks.values():
                    if len(b.holders) == 1:
                        c = engine.contexts[next(iter(b.holders))]
                        got = entry(b, c, c.block_class(b.depth), engine.tier_index, 5, 9)
                        assert got == (*key(index.features(b)), b.id, 5, 9), (terms, b.id)
                        compared += 1
    assert compared > 5_000, compared


def test_which_ranks_the_index_keys_by_group() -> None:
    grouped = {
        n
        for n in RANKED
        if not raised_by_contexts(rank := declared_rank(resolve_policy(n)) or ())
        and separable_by_contexts(rank)
    }
    assert grouped == {"kvtether", "lachesis", "lachesis-det", "tether-lachesis", "discovered"}
    # a term on a fixed feature conditioned on the class orders a group differently as its
    # context's class changes: no grouping
    assert not separable_by_contexts((RankTerm("depth", only=frozenset({_C.SUSPENDED})),))
    assert separable_by_contexts((RankTerm("suspend_time", only=frozenset({_C.SUSPENDED})),))


def test_a_spliced_key_is_the_key() -> None:
    # the index keys a group's next head from the evicted head's key and its own fixed part;
    # for two blocks that share the context's features that is exactly the key
    terms = declared_rank(resolve_policy("kvtether"))
    assert terms is not None
    key, fixed, at = key_function(terms), fixed_key_function(terms), fixed_positions(terms)

    def block(bid: int, depth: int, alloc: float) -> BlockInfo:
        c = ContextId("c")
        return BlockInfo(
            BlockId(bid), None, TierName("hbm"), 0, depth, _C.SUSPENDED, 7.0, 3, 5.0, alloc,
            (c,), c, AgentKind.MAIN, frozenset(), True,
        )  # fmt: skip

    a, b = block(4, 9, 1.0), block(11, 2, 3.0)
    spliced = list(key(a))
    for i, p in enumerate(at):
        spliced[p] = fixed(b)[i]
    assert tuple(spliced) == key(b)


class _DepthWhenSuspended(BasePolicy):
    """Dead first, then deepest-first among Suspended blocks only, then least recently used: a
    fixed feature conditioned on the class, so the order within one context's blocks changes
    when the context is suspended."""

    name: ClassVar[str] = "depth-when-suspended"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("state", order=(_C.DEAD, _C.EXPIRED, _C.TEMPORARY)),
        RankTerm("depth", descending=True, only=frozenset({_C.SUSPENDED})),
        RankTerm("last_access"),
    )


def _diverges(policy: Policy | str, seeds: range) -> bool:
    cfgs = [
        EngineConfig(16, (TierConfig(TierName("hbm"), 96), TierConfig(TierName("hbf"), 160))),
        EngineConfig(16, (TierConfig(TierName("hbm"), 48), TierConfig(TierName("hbf"), 64))),
    ]
    for seed in seeds:
        tr = generate_agentic(AgenticParams(seed=seed, sessions=3, turns=2))
        for cfg in cfgs:
            if _log(list(tr.ops), cfg, policy, fast=True) != _log(
                list(tr.ops), cfg, policy, fast=False
            ):
                return True
    return False


def test_grouping_a_rank_that_is_not_separable_diverges(monkeypatch: pytest.MonkeyPatch) -> None:
    # the condition is what makes grouping sound: forced on a rank whose order within a group
    # depends on the group's class, the index's victims leave the sorted order's
    pol = _DepthWhenSuspended()
    assert not _diverges(pol, range(3))  # honest: eager keying
    monkeypatch.setattr(kvmodel._rank_index, "separable_by_contexts", lambda terms: True)
    assert _diverges(pol, range(3))


def test_an_index_that_keeps_members_a_context_change_made_unplain_diverges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the two ways a change to a context makes its plain blocks unplain -- an edit cuts its
    # valid prefix (the blocks after it are Expired), a pin covers them (Pinned) -- must take
    # them out of the group; an index that only re-keys the head (the zoo's StaleGroupIndex)
    # evicts live KV before the expired KV, or pinned KV, and the differential comparison sees it
    cfgs = [
        EngineConfig(bs, (TierConfig(TierName("hbm"), a), TierConfig(TierName("hbf"), b)))
        for bs, a, b in ((4, 3, 5), (2, 8, 4), (1, 20, 30))
    ]
    traces = [random_trace(RandomParams(seed=s, ops=90)) for s in range(40)]

    def any_diverges() -> bool:
        return any(
            _log(list(tr.ops), cfg, "kvtether", fast=True)
            != _log(list(tr.ops), cfg, "kvtether", fast=False)
            for tr in traces
            for cfg in cfgs
        )

    assert not any_diverges()
    monkeypatch.setattr(RankIndex, "_context_changed", _HeadsOnlyIndex._context_changed)
    assert any_diverges()


def test_grouped_keying_agrees_with_sorting_on_agentic_workloads() -> None:
    # (every grouped built-in; the property test in test_properties.py covers random traces)
    assert not any(_diverges(p, range(4)) for p in ("lachesis", "tether-lachesis", "discovered"))


def test_the_rank_order_predicate_names_the_block_the_rank_puts_first() -> None:
    terms = declared_rank(resolve_policy("kvtether"))
    assert terms is not None
    c = ContextId("c")

    def block(bid: int, state: BlockClass, suspend: float | None) -> BlockInfo:
        return BlockInfo(
            BlockId(bid), None, TierName("hbm"), 0, 1, state, 2.0, 1, suspend, 0.0,
            (c,), c, AgentKind.MAIN, frozenset(), True,
        )  # fmt: skip

    old, new = block(1, _C.SUSPENDED, 3.0), block(2, _C.SUSPENDED, 5.0)
    active = block(3, _C.ACTIVE, None)
    assert evict_rank_first(terms, new, [old, active]) is None  # MRU: the later suspension
    msg = evict_rank_first(terms, old, [new, active])
    assert msg is not None
    assert "block 2" in msg
    assert "orders it first" in msg
    assert evict_rank_first(terms, active, []) is None


def test_the_monitor_holds_every_victim_to_the_declared_rank() -> None:
    # the engine's self-check (spec/invariants.md, Self-checks of the engine): the victim is the
    # rank's first among the contract model's candidates -- silent on the reference engine
    # under every rank policy, and it catches the rank index's mutants on the traces where
    # the differential comparison sees them
    cfg = EngineConfig(16, (TierConfig(TierName("hbm"), 96), TierConfig(TierName("hbf"), 160)))
    traces = [generate_agentic(AgenticParams(seed=s, sessions=3, turns=2)) for s in range(3)]
    for policy in ("kvtether", "lachesis", "tether-lachesis", "lru", "vllm-prefix", "hbm-first"):
        for tr in traces:
            monitor = check_ops(list(tr.ops), policy, cfg, ())
            assert sum(monitor.engine.stats.evictions.values())
            assert monitor.first("engine-contract") is None, policy
    for mutant in ("StaleGroupIndex", "LazyIndexUnderMRU"):
        found = [
            check_ops(list(tr.ops), f"checkers.search.mutants:{mutant}", cfg, ()).first(
                "engine-contract"
            )
            for tr in traces
        ]
        assert any(v is not None and "declared rank orders it first" in v.message for v in found)


queue_ops = st.lists(
    st.tuples(st.sampled_from(["push", "batch", "pop", "keep"]), st.lists(st.integers(0, 9))),
    max_size=40,
)


@given(queue_ops)
def test_the_queue_pops_what_a_heap_pops(ops: list[tuple[str, list[int]]]) -> None:
    """The index's queue (a heap and an ascending run beside it) against a plain heap: single
    pushes, sorted batches, pops and compactions in any order, with keys rising, falling or
    tied (entries stay distinct by a seq, as the index's do)."""
    q, ref = _Queue(), list[tuple[Any, ...]]()
    seq = 0
    for kind, keys in ops:
        if kind == "pop":
            for _ in keys[:3]:
                if ref:
                    assert q.pop() == heapq.heappop(ref)
            continue
        if kind == "keep":
            q.keep(lambda x: x[0] % 3 != 0)
            ref = [x for x in ref if x[0] % 3 != 0]
            heapq.heapify(ref)
            continue
        entries: list[tuple[Any, ...]] = [(k + 2 * seq // 3, seq + i) for i, k in enumerate(keys)]
        seq += len(keys)
        for x in entries:
            heapq.heappush(ref, x)
        if kind == "batch":
            q.push_sorted(entries)
        else:
            for x in entries:
                q.push(x)
        assert len(q) == len(ref)
    assert [q.pop() for _ in range(len(ref))] == sorted(ref)


def test_a_renewed_record_is_a_new_blocks_record() -> None:
    # an eviction for room hands the victim's record to the block written to its slot
    # (ResidentBlock.renew): every field but the slot's must then be the new block's, as a
    # record built afresh has it -- whatever the victim's were
    spec = BlockSpec(BlockKey("k2"), BlockKey("k1"), 2, (), (3,), frozenset(), 4)
    old = ResidentBlock(BlockId(7), spec, TierName("hbf"), 1.0, ContextId("a"), AgentKind.MAIN,
                        BlockClass.SUSPENDED)  # fmt: skip
    old.indexed, old.touch, old.touch_op, old.version = True, 9.0, 12, 40
    new_spec = attrs.evolve(spec, key=BlockKey("k9"), depth=5)
    args = (new_spec, 3.0, ContextId("b"), AgentKind.WORKER, BlockClass.ACTIVE)
    old.renew(*args)
    fresh = ResidentBlock(BlockId(7), args[0], TierName("hbf"), *args[1:])
    assert {f: getattr(old, f) for f in ResidentBlock.__slots__} == {
        f: getattr(fresh, f) for f in ResidentBlock.__slots__
    }
    old.holders.add(ContextId("b"))
    with pytest.raises(InternalError, match="renewed while a chain holds it"):
        old.renew(*args)
