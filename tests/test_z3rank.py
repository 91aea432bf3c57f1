"""Z3 rank-order proofs: claimed properties are proved; violations come with feature values that
the executable rank (``rank_key``) orders the same wrong way."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction

import pytest

from checkers.symbolic.z3rank import PROPERTIES, PROPERTY_OF_CLAIM, prove_policy, prove_rank
from kvmodel.ids import BlockId, ContextId, TierName
from kvmodel.lifecycle import BlockClass
from kvmodel.messages import AgentKind
from kvmodel.policy import (
    BasePolicy,
    claimed_invariants,
    declared_rank,
    rank_key,
    registered_policies,
    resolve_policy,
)
from kvmodel.view import BlockInfo, ModelView
from policies.kvtether import KVTether

RANKED = [
    p
    for p in sorted(registered_policies())
    if isinstance(pol := resolve_policy(p), BasePolicy)
    and pol.rank
    and type(pol).eviction_order is BasePolicy.eviction_order
]


@pytest.mark.parametrize("policy", RANKED)
def test_every_claimed_order_property_is_proved(policy: str) -> None:
    pol = resolve_policy(policy)
    claimed = {PROPERTY_OF_CLAIM[c] for c in claimed_invariants(pol) if c in PROPERTY_OF_CLAIM}
    proofs = prove_policy(pol)
    assert {p.prop for p in proofs} == claimed
    assert all(p.rung == "proved" for p in proofs), proofs


def _info(vals: dict[str, str]) -> BlockInfo:
    def num(k: str) -> float:
        return float(Fraction(vals[k]))

    return BlockInfo(
        BlockId(int(vals["id"])),
        None,
        TierName("hbm"),
        int(vals["tier"]),
        int(vals["depth"]),
        BlockClass(vals["state"]),
        num("last_access"),
        int(vals["last_op"]),
        num("suspend_time"),
        num("alloc_time"),
        tuple(ContextId(f"c{i}") for i in range(int(vals["holders"]))),
        ContextId("w"),
        AgentKind.MAIN,
        frozenset(),
        True,
    )


@pytest.mark.parametrize(
    ("policy", "prop"),
    [
        ("lru", "dead-before-live"),
        ("lru", "mru-within-suspended"),
        ("vllm-prefix", "class-priority"),
        ("lachesis-det", "mru-within-suspended"),
        ("checkers.search.mutants:MRUInverted", "mru-within-suspended"),
        ("checkers.search.mutants:LateDeadReclaim", "dead-before-live"),
    ],
)
def test_violations_replay_in_the_executable_rank(policy: str, prop: str) -> None:
    rank = resolve_policy(policy).rank  # type: ignore[attr-defined]
    proof = prove_rank(rank, prop)
    assert proof.rung == "violated"
    assert proof.counterexample is not None
    a, b = _info(proof.counterexample["a"]), _info(proof.counterexample["b"])
    # the premise says a must go first; the executable rank puts b first, as Z3 said
    assert rank_key(rank, b) < rank_key(rank, a)


def test_properties_are_the_documented_ones() -> None:
    assert set(PROPERTIES) == set(PROPERTY_OF_CLAIM.values())


def test_a_rank_the_policy_does_not_follow_is_not_proved() -> None:
    # a policy that declares KVTether's rank but evicts by its own code: the rank's
    # properties say nothing about what it evicts (kvmodel issue 13)
    class OwnOrder(KVTether):
        def eviction_order(
            self, view: ModelView, candidates: Sequence[BlockInfo]
        ) -> Iterable[BlockId]:
            return sorted(b.id for b in candidates)

    assert declared_rank(OwnOrder()) is None
    assert declared_rank(KVTether()) == KVTether.rank
    with pytest.raises(ValueError, match="its eviction order is code"):
        prove_policy(OwnOrder())
