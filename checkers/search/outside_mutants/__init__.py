"""Mutants written after the search was, the way an outside author porting KVTether would err.

The zoo in :mod:`checkers.search.mutants` was planted by the people who wrote the search; these
two were written afterwards, to test the search on bugs it was not shaped for. Both are KVTether
with its eviction order written as code (so the engine takes the general path, not the rank
index) and the "most recently suspended first" rule read differently for a block that more than
one context holds, or that another context wrote:

* :class:`LatestHolderMRU` takes the *latest* suspension among a block's holders, where the
  contract (spec PP3, ``suspend_time``) takes the earliest: the holder that resumes soonest
  decides how near the block's reuse is. (Its engine-side twin, an engine whose features do
  this, is ``engine_mutants.LatestSuspension``, caught by the contract comparison; a policy's
  own order can only be caught by the invariant);
* :class:`WriterMRU` takes the suspension of the context that *wrote* the block, which a shared
  system prompt or a fork's prefix outlives.

Both break ``suspended-mru`` only when a Suspended block's holders (or its writer) disagree
with another Suspended candidate's time: about one random walk in 100. Before walks were capped
to the engine's capacity and drew shared system prompts (spec/invariants.md, swarm testing)
``kvmodel check`` at the ci profile passed both.

Written later still (2026-12-03), by the same rule -- the bug first, the search run after:

* :class:`LastAccessMRU` reads "most recently suspended" as "most recently used": a context
  suspends when its inference ends, so the two agree unless inferences run for different
  times, which the harness's clock lets them (spec/invariants.md);
* :class:`ReclaimAtInfer` frees dead KV when an inference needs memory, i.e. at ``infer`` ops
  only: the KV a ``close`` kills stays resident until the next inference.

A third, KVTether with Temporary ranked ahead of Expired ("scratch KV goes first"), passed
``kvmodel check``, rightly: no evictable block is ever Temporary (spec lifecycle.md L5.4), so it
is KVTether under another name -- an equivalent mutant, which tests/test_lifecycle.py pins
instead (it replays to KVTether's log).

And engines, the way an outside engine's author errs (the users of ``kvmodel oracle``), each
run as KVTether on it (``engine_class``):

* :class:`PinEndsLate` ends a TTL pin after its deadline instead of at it (``<`` for ``<=``,
  spec P6): wrong for exactly the ops at a deadline. It passed ``kvmodel check`` until the
  machine drew TTL pins as often as untimed ones and could wait for a deadline, and the
  contract comparison looked at message states on every op (spec/invariants.md);
* :class:`ForkKeepsInvalidTail` reads the source's chain length where it should read its valid
  count (P5): a fork taken after an edit, before the next inference, holds stale KV as valid;
* :class:`SuspendAtStart` takes an inference's start for its context's suspension time, not its
  end (``t + duration``, P7.6);
* :class:`ForkCopiesPins` lets a fork inherit the source's pins (L6 says they are not);
* :class:`RefusesEmptyPin` refuses, as bad input, a pin whose range covers no message ("pinning
  nothing is the caller's bug"), where the trace format has it pin nothing (``start <= stop``).
  Before the monitor asked the reference whether refused input was bad (spec/invariants.md,
  Findings), ``kvmodel check`` stopped on it with exit status 2, as if its own input were bad;
* :class:`LastPinWins` lets a pin over a message already pinned set its deadline anew ("the
  last pin wins"), where overlapping pins keep the longer protection (L6; no TTL is the
  longest): a message pinned for 10 and then for 0.5 is unpinned after 0.5. It shows only
  after a second, shorter pin over the same message and before the first one's deadline: the
  ci profile's walks catch it (seed 0), the dev profile's 50 do not, 200 do.

Written 2026-12-04, the bug first, the search run after; the contract model did not check an
inference's admission then, and now does (M4.4; spec/invariants.md, Self-checks of the engine):

* :class:`CountsFreeOnly` admits an inference only if its writes fit in the *free* slots,
  forgetting the blocks it could evict: a full cache rejects instead of evicting. It passed
  ``kvmodel check`` at the ci profile: it never evicts, so the eviction invariants had nothing
  to judge, and a rejection was a recorded result nothing checked (the run's coverage line said
  "evictions 0", and its warnings that no eviction invariant was exercised);
* :class:`OptimisticAdmission` skips the pre-check and writes until a block finds no slot, then
  rolls the request back (P7.7's mid-allocation path): it evicts KV for a request it then
  refuses. Before, the ci profile caught it only by a side effect, ``temporary-bypass`` (a
  bypassed block rolled back is freed as a rejection's, not as a bypass), and under a policy
  that bypasses nothing not at all;
* :class:`EvictsBeforeSpilling` keeps KV in fast memory: while anything is evictable, its
  free-slot lookup sees only the first tier's free slots, so a full HBM evicts where M4 writes
  into the next preferred tier's free slot. Every invariant held at the ci profile under LRU
  and KVTether; the contract model now checks, at each eviction, that every tier the allocation
  could take was full;
* :class:`SpillsToLastTier` sends what a full first tier cannot take to the *last* tier with a
  free slot, not the next (capacity tiers as the overflow): with HBM full, a block goes to SSD
  while HBF has room. It evicts nothing it should not and rejects nothing, and no invariant a
  policy without a placement rule claims reads a tier; the contract model now checks that each
  new block takes the first of its placement's tiers with a free slot.

Written 2026-12-05, the same way: fifteen more policies, all caught by ``kvmodel check`` at the
ci profile and not kept, since each repeats a bug class the zoo has (docs/checking-a-policy.md,
How much the search finds), and this one, which is kept:

* :class:`AgentWeightTable` weighs candidates by the agent kind that wrote them, from a table
  that has no reviewer: its ``eviction_order`` raises ``KeyError`` in the middle of an
  admission. It was caught (``policy-protocol``), but at the dev profile it was also reported
  ``nondeterministic``: the machine went on applying a rule's later ops after the run had
  stopped mid-op, and a find made on that state did not replay. A stopped run now stays
  stopped (spec/invariants.md, Findings).
* :class:`HourClockLRU` orders by recency in whole seconds modulo an hour. The ci profile
  passed it, because no walk of the default length ran its clock past an hour (a 64 s wrap is
  caught at once). Walks of up to 2,000 ops caught it (``kvmodel check --walk-ops``): the zoo's
  first mutant outside the default search's scope, kept with the walk length it needed
  (:data:`SCOPE_NEEDED`), until walks were drawn at a clock scale (below).
* :class:`WindowedLRU` bounds its eviction scan, as an engine written for speed might: it sorts
  the first 64 candidates and leaves the rest in the order given. No engine then drawn held
  more than 48 blocks, so the default search could not reach it; walks on tiers of up to 128
  blocks (``kvmodel check --tier-blocks 128``) caught it at the default walk length.
* :class:`WindowedTether` is KVTether with the same bounded scan over 32 candidates. Engines
  held up to 48 blocks, yet the default search passed it too: no eviction of its walks or
  examples chose among more than 37 blocks (the coverage line's widest choice), and none
  reached past the window. ``--tier-blocks 128`` caught it.

Since then one random walk in four is *wide* by default, on tiers of up to 128 blocks, and the
default search catches both. Beyond the wide walks' reach, kept for the scope it needs:

* :class:`ByteDepthLRU` keeps depth in an 8-bit field for its tie-break. Its bug needs a
  context of more than 256 blocks in memory, which no default walk builds; wide walks on tiers
  of up to 512 blocks (``kvmodel check --tier-blocks 512``) catch it.

Written 2026-12-05, the bug first, the search run after:

* :class:`BigContextFirstTether` sends the blocks of contexts over 8,192 tokens first, ahead of
  dead KV. ``kvmodel check`` passed it: no walk or example had made a prompt of 8,192 tokens
  (messages of at most 48, contexts at most the engine's capacity), and the coverage line did
  not say how large prompts grew. Now two walks in three are drawn at a token scale (16 or 256
  tokens for each one drawn, blocks as many times larger: the same walk block for block), the
  coverage line gives the largest prompt, and the default search catches it.

Written 2026-12-06, the bug first, the search run after:

* :class:`IdleDayTether` sends KV suspended for over a day ahead of dead KV. ``kvmodel check``
  passed it: walk clocks ran for minutes (at most 417 s over the ci profile's walks), the
  coverage line said so, and no scope option reached a day. Now two walks in three are drawn at
  a clock scale (64 or 4,096 seconds for each one drawn, a power of two: the same walk op for
  op), and the default search catches it, and :class:`HourClockLRU` with it.
* :class:`SlotTableTether` keeps each agent's suspension time in a table of 32 slots. It passed:
  walks opened at most 6 contexts at once and the machine 26, and the coverage line did not
  say so. Now the line gives the most contexts open at once, one walk in eight draws a crowd of
  40 background agents waiting on their tools, and the default search catches it.
* :class:`WideSlotTableTether` is the same table with 128 slots, sized for a serving engine's
  batch. A crowd of 40 cannot reach it; the crowd's size is a scope option (``kvmodel check
  --crowd 160`` catches it), and it is kept for the scope it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from checkers.search.outside_mutants.engine_bugs import (
    CountsFreeOnly,
    CountsFreeOnlyTether,
    EvictsBeforeSpilling,
    EvictsBeforeSpillingTether,
    ForkCopiesPins,
    ForkCopiesPinsTether,
    ForkKeepsInvalidTail,
    ForkKeepsInvalidTailTether,
    LastPinWins,
    LastPinWinsTether,
    OptimisticAdmission,
    OptimisticAdmissionTether,
    PinEndsLate,
    PinEndsLateTether,
    RefusesEmptyPin,
    RefusesEmptyPinTether,
    SpillsToLastTier,
    SpillsToLastTierTether,
    SuspendAtStart,
    SuspendAtStartTether,
)
from checkers.search.outside_mutants.policy_bugs import (
    AgentWeightTable,
    BigContextFirstTether,
    IdleDayTether,
    LastAccessMRU,
    LatestHolderMRU,
    ReclaimAtInfer,
    SlotTableTether,
    WideSlotTableTether,
    WriterMRU,
)
from checkers.search.outside_mutants.scope_bugs import (
    ByteDepthLRU,
    HourClockLRU,
    WindowedLRU,
    WindowedTether,
)
from checkers.search.scope import WalkScope

__all__ = [
    "OUTSIDE_MUTANTS",
    "SCOPE_NEEDED",
    "AgentWeightTable",
    "BigContextFirstTether",
    "ByteDepthLRU",
    "CountsFreeOnly",
    "CountsFreeOnlyTether",
    "EvictsBeforeSpilling",
    "EvictsBeforeSpillingTether",
    "ForkCopiesPins",
    "ForkCopiesPinsTether",
    "ForkKeepsInvalidTail",
    "ForkKeepsInvalidTailTether",
    "HourClockLRU",
    "IdleDayTether",
    "LastAccessMRU",
    "LastPinWins",
    "LastPinWinsTether",
    "LatestHolderMRU",
    "OptimisticAdmission",
    "OptimisticAdmissionTether",
    "PinEndsLate",
    "PinEndsLateTether",
    "ReclaimAtInfer",
    "RefusesEmptyPin",
    "RefusesEmptyPinTether",
    "SlotTableTether",
    "SpillsToLastTier",
    "SpillsToLastTierTether",
    "SuspendAtStart",
    "SuspendAtStartTether",
    "WideSlotTableTether",
    "WindowedLRU",
    "WindowedTether",
    "WriterMRU",
]

#: import path -> the invariant it must be caught breaking
OUTSIDE_MUTANTS: Mapping[str, str] = MappingProxyType(
    {
        "checkers.search.outside_mutants:LatestHolderMRU": "suspended-mru",
        "checkers.search.outside_mutants:WriterMRU": "suspended-mru",
        "checkers.search.outside_mutants:LastAccessMRU": "suspended-mru",
        "checkers.search.outside_mutants:ReclaimAtInfer": "free-at-boundary",
        "checkers.search.outside_mutants:PinEndsLateTether": "engine-contract",
        "checkers.search.outside_mutants:ForkKeepsInvalidTailTether": "no-stale-hit",
        "checkers.search.outside_mutants:SuspendAtStartTether": "engine-contract",
        "checkers.search.outside_mutants:ForkCopiesPinsTether": "engine-contract",
        "checkers.search.outside_mutants:RefusesEmptyPinTether": "engine-internal",
        "checkers.search.outside_mutants:LastPinWinsTether": "engine-contract",
        "checkers.search.outside_mutants:CountsFreeOnlyTether": "engine-contract",
        "checkers.search.outside_mutants:OptimisticAdmissionTether": "engine-contract",
        "checkers.search.outside_mutants:EvictsBeforeSpillingTether": "engine-contract",
        "checkers.search.outside_mutants:SpillsToLastTierTether": "engine-contract",
        "checkers.search.outside_mutants:AgentWeightTable": "policy-protocol",
        "checkers.search.outside_mutants:HourClockLRU": "prefix-closed-residency",
        "checkers.search.outside_mutants:WindowedLRU": "prefix-closed-residency",
        "checkers.search.outside_mutants:WindowedTether": "no-live-eviction-before-dead-reclaim",
        "checkers.search.outside_mutants:ByteDepthLRU": "prefix-closed-residency",
        "checkers.search.outside_mutants:BigContextFirstTether": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.outside_mutants:IdleDayTether": "no-live-eviction-before-dead-reclaim",
        "checkers.search.outside_mutants:SlotTableTether": "suspended-mru",
        "checkers.search.outside_mutants:WideSlotTableTether": "suspended-mru",
    }
)

#: mutants whose bug lies outside the default search's scope, and the walks (``kvmodel check
#: --walk-ops``, ``--tier-blocks``, ``--crowd``) that bring it in (spec/invariants.md,
#: Counterexamples)
SCOPE_NEEDED: Mapping[str, WalkScope] = MappingProxyType(
    {
        "checkers.search.outside_mutants:ByteDepthLRU": WalkScope(tier_blocks=512),
        "checkers.search.outside_mutants:WideSlotTableTether": WalkScope(crowd=160),
    }
)
