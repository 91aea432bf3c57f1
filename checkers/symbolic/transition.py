"""The symbolic transition system of the harness fragment (Z3), read by :mod:`checkers.symbolic.bmc`
(bounded model checking, k-induction) and :mod:`checkers.symbolic.selfcheck` (the self-check).

:class:`State` holds the Z3 variables of one state; :class:`Step` the transition between two
states with the policy inlined from its :class:`PolicyProfile` (declared rank and reclaim
rule), its observable events, and each fragment invariant's violation at that step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import z3

from checkers.invariants import BLOCK, ORDER
from checkers.symbolic.fragment import ACTIONS, FRAGMENT_INVARIANTS, Action, Fragment
from checkers.symbolic.z3rank import SymBlock, before
from checkers.symbolic.z3util import Z3_LOGIC
from kvmodel.lifecycle import BLOCK_CLASS_PRIORITY, BlockClass
from kvmodel.policy import RankTerm

__all__ = ["PolicyProfile", "State", "Step", "SymBlockTerms", "c_", "zombie"]

_CLS = list(BlockClass)
_PRIO = BLOCK_CLASS_PRIORITY


@attrs.frozen
class _OrderTerms:
    state: Any
    suspend_time: Any


@attrs.frozen
class SymBlockTerms:
    """checkers.invariants.BlockTerms over Z3 terms."""

    resident: Any = False
    state: Any = None
    was_dead: Any = False
    closing: Any = False
    removed: Any = False
    removed_state: Any = None
    reclaimed: Any = False
    written: Any = False
    written_state: Any = None
    bypassed: Any = False
    hit: Any = False
    temporary_kv: Any = False


def c_(x: BlockClass) -> Any:
    """The Z3 integer encoding of a block class."""
    return z3.IntVal(_CLS.index(x))


@attrs.frozen
class PolicyProfile:
    """What the symbolic model inlines of a policy; ``unsupported`` says why it cannot."""

    name: str
    rank: tuple[RankTerm, ...] = ()
    reclaims_dead: bool = False
    unsupported: str | None = None


def zombie(s: State) -> Any:
    """A dead block is resident in ``s`` (invariant no-zombie-kv's :data:`BLOCK` predicate)."""
    return z3.Or(
        *(
            BLOCK["no-zombie-kv"](SymBlockTerms(resident=s.res[c][v], state=s.cls(c, v)), Z3_LOGIC)
            for c, v in s.blocks()
        )
    )


class State:
    """Z3 variables of the state after step ``i``."""

    def __init__(self, f: Fragment, i: int, tag: str) -> None:
        p = f"{tag}{i}"
        nc, nv = f.contexts, f.edits + 1
        self.now = z3.Int(f"{p}.now")
        self.open = [z3.Bool(f"{p}.open{c}") for c in range(nc)]
        self.pin = [z3.Bool(f"{p}.pin{c}") for c in range(nc)]
        self.ver = [z3.Int(f"{p}.ver{c}") for c in range(nc)]
        self.st = [z3.Int(f"{p}.st{c}") for c in range(nc)]  # suspended_at; -1 = never
        self.held = [[z3.Bool(f"{p}.held{c}_{v}") for v in range(nv)] for c in range(nc)]
        self.res = [[z3.Bool(f"{p}.res{c}_{v}") for v in range(nv)] for c in range(nc)]
        self.la = [[z3.Int(f"{p}.la{c}_{v}") for v in range(nv)] for c in range(nc)]
        self.at = [[z3.Int(f"{p}.at{c}_{v}") for v in range(nv)] for c in range(nc)]
        self.f = f

    def blocks(self) -> list[tuple[int, int]]:
        return [(c, v) for c in range(self.f.contexts) for v in range(self.f.edits + 1)]

    def vector(self) -> list[Any]:
        out: list[Any] = [self.now, *self.open, *self.pin, *self.ver, *self.st]
        for c, v in self.blocks():
            out += [self.held[c][v], self.res[c][v], self.la[c][v], self.at[c][v]]
        return out

    def cls(self, c: int, v: int, *, dropped: Any = False) -> Any:
        """The block's lifecycle class (``dropped``: its context's old chain is gone)."""
        cur = self.ver[c] == v
        return z3.If(
            z3.Not(self.open[c]),
            c_(BlockClass.DEAD),
            z3.If(
                cur,
                z3.If(self.pin[c], c_(BlockClass.PINNED), c_(BlockClass.SUSPENDED)),
                z3.If(
                    z3.And(self.held[c][v], z3.Not(dropped)),
                    c_(BlockClass.EXPIRED),
                    c_(BlockClass.DEAD),
                ),
            ),
        )

    def sym(self, c: int, v: int, cls: Any) -> SymBlock:
        la = self.la[c][v]
        susp = z3.If(cls == c_(BlockClass.SUSPENDED), self.st[c], -1)
        holders = z3.If(cls == c_(BlockClass.DEAD), 0, 1)
        return SymBlock(
            f"b{c}_{v}",
            cls,
            la,
            la,
            susp,
            self.at[c][v],
            z3.IntVal(0),
            z3.IntVal(0),
            holders,
            z3.IntVal(0),
        )

    def used(self) -> Any:
        return z3.Sum([z3.If(self.res[c][v], 1, 0) for c, v in self.blocks()])

    def wellformed(self) -> Any:
        f = self.f
        out = [self.now >= 0, self.used() <= f.slots]
        for c in range(f.contexts):
            out += [self.ver[c] >= 0, self.ver[c] <= f.edits, z3.Implies(self.pin[c], self.open[c])]
            out += [self.st[c] >= -1, self.st[c] <= self.now]
            for v in range(f.edits + 1):
                out += [
                    z3.Implies(self.res[c][v], z3.And(v <= self.ver[c], self.la[c][v] <= self.now)),
                    z3.Implies(
                        self.res[c][v], z3.And(self.at[c][v] <= self.la[c][v], self.at[c][v] >= 1)
                    ),
                ]
        return z3.And(*out)

    def initial(self) -> Any:
        f = self.f
        out = [self.now == 0]
        for c in range(f.contexts):
            out += [self.open[c], z3.Not(self.pin[c]), self.ver[c] == 0, self.st[c] == -1]
            for v in range(f.edits + 1):
                out += [
                    z3.Not(self.res[c][v]),
                    z3.Not(self.held[c][v]),
                    self.la[c][v] == 0,
                    self.at[c][v] == 0,
                ]
        return z3.And(*out)


class Step:
    """The transition into state ``s`` from ``p`` and its observable events."""

    def __init__(
        self, f: Fragment, p: State, s: State, i: int, tag: str, prof: PolicyProfile
    ) -> None:
        nc = f.contexts
        self.kind = z3.Int(f"{tag}{i}.kind")
        self.ctx = z3.Int(f"{tag}{i}.ctx")
        self.evict = {b: z3.Bool(f"{tag}{i}.evict{b[0]}_{b[1]}") for b in p.blocks()}
        self.p, self.s, self.f = p, s, f
        k = {a: self.kind == ACTIONS.index(a) for a in ACTIONS}
        on = [self.ctx == c for c in range(nc)]
        t = s.now
        cons: list[Any] = [
            self.kind >= 0,
            self.kind < len(ACTIONS),
            self.ctx >= 0,
            self.ctx < nc,
            t == p.now + 1,
        ]
        # enabledness (as checkers.symbolic.fragment.Harness.enabled)
        for c in range(nc):
            cons.append(
                z3.Implies(
                    on[c],
                    z3.And(
                        p.open[c],
                        z3.Implies(k["edit"], z3.And(z3.Not(p.pin[c]), p.ver[c] < f.edits)),
                        z3.Implies(z3.Or(k["close"], k["pin"]), z3.Not(p.pin[c])),
                        z3.Implies(k["unpin"], p.pin[c]),
                    ),
                )
            )
        # the classes seen at eviction: the inferring context's old chain is already dropped
        self.mid = {(c, v): p.cls(c, v, dropped=z3.And(k["infer"], on[c])) for c, v in p.blocks()}
        cand = {
            b: z3.And(p.res[b[0]][b[1]], self.mid[b] != c_(BlockClass.PINNED)) for b in p.blocks()
        }
        need = z3.Or(
            *(
                z3.And(
                    on[c],
                    k["infer"],
                    *(z3.Implies(p.ver[c] == v, z3.Not(p.res[c][v])) for v in range(f.edits + 1)),
                )
                for c in range(nc)
            )
        )
        full = p.used() >= f.slots
        any_cand = z3.Or(*cand.values())
        self.evicted = z3.And(need, full, any_cand)
        self.rejected = z3.And(need, full, z3.Not(any_cand))
        written = z3.And(need, z3.Not(self.rejected))
        syms = {b: p.sym(b[0], b[1], self.mid[b]) for b in p.blocks()}
        # exactly one victim when evicting, none otherwise; it ranks no later than any candidate
        ev = list(self.evict.values())
        cons.append(
            z3.If(self.evicted, z3.PbEq([(x, 1) for x in ev], 1), z3.And(*(z3.Not(x) for x in ev)))
        )
        for b in p.blocks():
            cons.append(z3.Implies(self.evict[b], cand[b]))
            for o in p.blocks():
                if o != b:
                    cons.append(
                        z3.Implies(
                            z3.And(self.evict[b], cand[o]),
                            z3.Not(_strictly_before(prof.rank, syms[o], syms[b])),
                        )
                    )
        # the successor
        for c in range(nc):
            is_c = on[c]
            cons += [
                s.open[c] == z3.If(z3.And(is_c, k["close"]), False, p.open[c]),
                s.pin[c]
                == z3.If(
                    z3.And(is_c, k["pin"]), True, z3.If(z3.And(is_c, k["unpin"]), False, p.pin[c])
                ),
                s.ver[c] == z3.If(z3.And(is_c, k["edit"]), p.ver[c] + 1, p.ver[c]),
                s.st[c] == z3.If(z3.And(is_c, k["infer"]), t, p.st[c]),
            ]
            for v in range(f.edits + 1):
                cur = p.ver[c] == v
                touched = z3.And(is_c, k["infer"], cur, z3.Or(p.res[c][v], written))
                res_after_op = z3.And(
                    z3.Or(p.res[c][v], z3.And(is_c, cur, written)), z3.Not(self.evict[(c, v)])
                )
                held = z3.If(
                    z3.And(is_c, k["infer"]),
                    False,
                    z3.If(z3.And(is_c, k["edit"], cur), p.res[c][v], p.held[c][v]),
                )
                cons += [
                    s.held[c][v] == held,
                    s.la[c][v] == z3.If(touched, t, p.la[c][v]),
                    s.at[c][v] == z3.If(z3.And(is_c, k["infer"], cur, written), t, p.at[c][v]),
                ]
                dead_after = s.cls(c, v) == c_(BlockClass.DEAD)
                if prof.reclaims_dead:
                    cons.append(s.res[c][v] == z3.And(res_after_op, z3.Not(dead_after)))
                else:
                    cons.append(s.res[c][v] == res_after_op)
        self.cons = z3.And(*cons)
        self.syms, self.cand = syms, cand
        self.k, self.on = k, on

    def violated(self, name: str) -> Any:
        """The invariant fails at this step (an eviction property, or the state after it)."""
        p, s, f = self.p, self.s, self.f
        blocks = p.blocks()
        vic_cls = {b: self.mid[b] for b in blocks}

        def some_victim(pred: Callable[[tuple[int, int]], Any]) -> Any:
            return z3.Or(*(z3.And(self.evict[b], pred(b)) for b in blocks))

        if name == "no-zombie-kv":
            return zombie(s)
        if name in ORDER:
            # the invariant's one definition (checkers.invariants.ORDER) over this step's terms:
            # a candidate ``o`` that had to go before the victim ``b``
            terms = {o: _OrderTerms(self.mid[o], p.st[o[0]]) for o in blocks}
            return some_victim(
                lambda b: z3.Or(
                    *(
                        z3.And(self.cand[o], ORDER[name](terms[o], terms[b], Z3_LOGIC))
                        for o in blocks
                        if o != b
                    )
                )
            )
        if name == "pinned-never-evicted":
            # the fragment's only removals a policy chooses are evictions (its declared reclaim
            # frees Dead blocks only)
            return z3.Or(
                *(
                    BLOCK[name](
                        SymBlockTerms(removed=self.evict[b], removed_state=vic_cls[b]), Z3_LOGIC
                    )
                    for b in blocks
                )
            )
        if name == "accounting":
            return s.used() > f.slots
        if name == "free-at-boundary":
            dead = c_(BlockClass.DEAD)
            return z3.Or(
                *(
                    BLOCK[name](
                        SymBlockTerms(
                            resident=s.res[c][v],
                            state=s.cls(c, v),
                            was_dead=z3.And(p.res[c][v], p.cls(c, v) == dead),
                            closing=self.k["close"],  # the fragment's only closing action
                        ),
                        Z3_LOGIC,
                    )
                    for c, v in blocks
                )
            )
        raise ValueError(
            f"invariant {name!r} is not in the fragment; known: {', '.join(FRAGMENT_INVARIANTS)}"
        )

    def action(self, m: z3.ModelRef) -> Action:
        return Action(ACTIONS[m.eval(self.kind).as_long()], m.eval(self.ctx).as_long())


def _strictly_before(rank: Sequence[RankTerm], a: SymBlock, b: SymBlock) -> Any:
    """``a``'s rank key is smaller than ``b``'s without the id tie-break (ties are free)."""
    same_id = attrs.evolve(a, id=b.id)
    return before(rank, same_id, b)
