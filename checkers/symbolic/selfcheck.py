"""Symbolic <-> executable conformance: the BMC's transition relation checked step by step
against the executable model (``kvmodel prove POLICY --self-check``).

A proof over the symbolic model is worth what the model is worth. This walks the executable
model (the engine under the policy, with the invariant monitor) along seeded random action
sequences of the fragment and, at every step, binds the symbolic state before and after to the
engine's concrete states and asks Z3 three questions about :class:`checkers.symbolic.bmc.Step`:

1. **admitted** -- the engine's successor satisfies the transition relation;
2. **the only one** -- no other successor does (on what the state determines: open, pinned,
   version and suspension time of each open context, and for each block whether it is
   resident, with its times while resident and whether an old version is still held);
3. **same verdicts** -- for each fragment invariant, the symbolic step is forced to the verdict
   the monitor gave at that op (violated or not).

Any failure is a mismatch with the step, the action path and what differed: the symbolic model
does not describe this policy (or has a bug), and its proofs say nothing about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import z3

from checkers.invariants import Monitor
from checkers.invariants.replay import engine_for
from checkers.symbolic.bmc import profile
from checkers.symbolic.fragment import ACTIONS, FRAGMENT_INVARIANTS, Action, Fragment, Harness
from checkers.symbolic.transition import PolicyProfile, State, Step
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, ContextId
from kvmodel.io.observations import AllocObs
from kvmodel.policy import Policy, resolve_policy

__all__ = ["SelfCheck", "self_check"]


@attrs.frozen
class SelfCheck:
    policy: str
    walks: int
    steps: int  # transitions checked
    mismatches: tuple[str, ...]
    outside: str | None = None  # why the policy is outside the fragment (nothing checked)

    @property
    def ok(self) -> bool:
        return self.outside is None and not self.mismatches

    def render(self) -> str:
        if self.outside is not None:
            return f"self-check: not run ({self.policy} is outside the fragment: {self.outside})"
        head = (
            f"self-check: {self.steps} transitions of {self.walks} random walks, symbolic vs "
            f"executable: "
        )
        if not self.mismatches:
            return head + "every successor admitted and unique, every verdict agrees"
        return (
            head
            + f"{len(self.mismatches)} mismatches\n"
            + "\n".join(f"  {m}" for m in self.mismatches)
        )


def _bind(
    st: State, f: Fragment, engine: Engine, lg: Harness, now: int, where: dict[BlockId, Any]
) -> list[Any]:
    """Constraints fixing ``st`` to the engine's concrete state (on what the state determines)."""
    out: list[Any] = [st.now == now]
    resident = {where[b]: engine.view.block(b) for b in engine.view.resident() if b in where}
    for c in range(f.contexts):
        out += [st.open[c] == lg.open[c], st.pin[c] == lg.pinned[c], st.ver[c] == lg.ver[c]]
        ctx = engine.contexts[ContextId(f"c{c}")]
        if lg.open[c]:
            at = ctx.suspended_at
            out.append(st.st[c] == (-1 if at is None else round(at)))
        chain = set(engine.view.chain(ContextId(f"c{c}"))) if lg.open[c] else set()
        for v in range(f.edits + 1):
            info = resident.get((c, v))
            out.append(st.res[c][v] == (info is not None))
            if info is None:
                continue
            out += [st.la[c][v] == round(info.last_access), st.at[c][v] == round(info.alloc_time)]
            if lg.open[c] and v < lg.ver[c]:
                out.append(st.held[c][v] == (info.id in chain))
    return out


def _walk(
    pol: Policy,
    prof: PolicyProfile,
    f: Fragment,
    rng: np.random.Generator,
    steps: int,
    invariants: Sequence[str],
) -> tuple[int, list[str]]:
    engine = engine_for(pol, f.config)
    mon = Monitor(engine, invariants)
    for op in f.prelude():
        mon.apply(op)
    lg = Harness(f)
    where: dict[BlockId, tuple[int, int]] = {}
    p_state, s_state = State(f, 0, "p"), State(f, 1, "s")
    checked, out = 0, []
    path: list[Action] = []
    prev = _bind(p_state, f, engine, lg, 0, where)
    for d in range(1, steps + 1):
        enabled = lg.enabled()
        if not enabled:
            break
        a = enabled[int(rng.integers(len(enabled)))]
        path.append(a)
        op = lg.op(a, float(d))
        seen, n_viol = len(engine.log), len(mon.violations)
        if not mon.apply(op):
            out.append(f"step {d} ({_path(path)}): the engine refused a decision; not modelled")
            break
        for o in engine.log.since(seen):
            if isinstance(o, AllocObs):
                c = int(str(o.ctx)[1:])
                where[o.block] = (c, lg.ver[c])
        step = Step(f, p_state, s_state, 1, "x", prof)
        solver = z3.Solver()
        solver.add(step.cons, *prev)
        solver.add(step.kind == ACTIONS.index(a.kind), step.ctx == a.ctx)
        nxt = _bind(s_state, f, engine, lg, d, where)
        checked += 1
        if solver.check(*nxt) != z3.sat:
            out.append(f"step {d} ({_path(path)}): the engine's successor is not admitted")
            break
        if solver.check(z3.Not(z3.And(*nxt))) == z3.sat:
            m = solver.model()
            diff = [str(c) for c in nxt if z3.is_false(m.eval(c, model_completion=True))]
            out.append(
                f"step {d} ({_path(path)}): another successor is admitted too "
                f"(differs in {', '.join(diff[:3])})"
            )
            break
        now_viol = {v.invariant for v in mon.violations[n_viol:]}
        for inv in invariants:
            solver.push()
            solver.add(*nxt)
            can_fail = solver.check(step.violated(inv)) == z3.sat
            can_hold = solver.check(z3.Not(step.violated(inv))) == z3.sat
            solver.pop()
            if inv in now_viol and not can_fail:
                out.append(f"step {d} ({_path(path)}): {inv} violated, the symbolic step says not")
            elif inv not in now_viol and not can_hold:
                out.append(f"step {d} ({_path(path)}): {inv} holds, the symbolic step says not")
        if out:
            break
        # the next step's "before" is this step's "after", bound to the p-variables
        prev = _bind(p_state, f, engine, lg, d, where)
    return checked, out


def _path(path: Sequence[Action]) -> str:
    return " ; ".join(str(a) for a in path)


def self_check(
    policy: str | Policy,
    *,
    fragment: Fragment | None = None,
    walks: int = 20,
    steps: int = 10,
    seed: int = 0,
    invariants: Sequence[str] = FRAGMENT_INVARIANTS,
    prof: PolicyProfile | None = None,
) -> SelfCheck:
    """``walks`` seeded random walks of ``steps`` actions each (see the module docstring).
    ``prof`` overrides the policy's symbolic reading (the tests plant a wrong one)."""
    f = fragment or Fragment()
    pol = resolve_policy(policy)
    reading = prof or profile(policy, f)
    if reading.unsupported is not None:
        return SelfCheck(pol.name, 0, 0, (), reading.unsupported)
    total, found = 0, []
    for w in range(walks):
        rng = np.random.default_rng([seed, w])
        n, bad = _walk(resolve_policy(policy), reading, f, rng, steps, invariants)
        total += n
        found += [f"walk {w}: {m}" for m in bad]
    return SelfCheck(pol.name, walks, total, tuple(found))
