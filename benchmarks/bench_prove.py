"""Per-query Z3 times: rank-order proofs, BMC at depths 4, 8 and 12, k-induction; and with
``--reach 10,60`` the BMC depth reached within each time budget per policy and invariant (the
incremental solver goes one depth deeper while the budget lasts; kvmodel issue 13's goal is depth
12 on the default fragment within 10 s); with ``--wide`` the exhaustive search of the executable
model (checkers.symbolic.reach) per policy over a ladder of wide fragments: states, transitions, the
fixpoint depth and seconds. Prints figures; asserts nothing.

    python benchmarks/bench_prove.py [--depths 4,8,12] [--reach 10,60] [--max-depth 40]
    python benchmarks/bench_prove.py --wide [--policies kvtether,tether-lachesis] [--seconds 600]
"""

from __future__ import annotations

import argparse
import time

import attrs
import z3

from checkers.symbolic.bmc import PolicyProfile, bmc, induction, profile
from checkers.symbolic.fragment import FRAGMENT_INVARIANTS, Fragment
from checkers.symbolic.reach import Wide
from checkers.symbolic.reach import reach as explore_wide
from checkers.symbolic.transition import State, Step
from checkers.symbolic.z3rank import prove_policy
from kvmodel.policy import resolve_policy

POLICIES = ["lru", "vllm-prefix", "hbm-first", "kvtether", "lachesis-det", "tether-lachesis"]


def reach(
    prof: PolicyProfile, f: Fragment, invariant: str, seconds: float, max_depth: int
) -> tuple[int, str]:
    """The deepest depth whose BMC query finished within ``seconds`` (wall clock, from the
    start), and how the run ended: "violated" at that depth, "budget" or "max"."""
    t0 = time.perf_counter()
    solver = z3.Solver()
    states = [State(f, 0, "s")]
    solver.add(states[0].initial())
    done = 0
    for d in range(1, max_depth + 1):
        left = seconds - (time.perf_counter() - t0)
        if left <= 0:
            return done, "budget"
        solver.set("timeout", max(1, int(left * 1000)))
        states.append(State(f, d, "s"))
        step = Step(f, states[d - 1], states[d], d, "a", prof)
        solver.add(step.cons)
        lit = z3.Bool(f"check{d}")
        solver.add(z3.Implies(lit, step.violated(invariant)))
        r = solver.check(lit)
        if r == z3.unknown:
            return done, "budget"
        done = d
        if r == z3.sat:
            return done, "violated"
        solver.add(z3.Not(step.violated(invariant)))
    return done, "max"


#: wide fragments, smallest first (checkers.symbolic.reach.Wide fields)
LADDER = [
    Wide(),
    Wide(contexts=1, forks=1, hbm=2, hbf=0, edits=0, temporary=False),
    Wide(contexts=1, forks=1, hbm=1, hbf=1, edits=0, temporary=True),
    Wide(contexts=2, forks=0, hbm=2, hbf=1, edits=1, temporary=True),
]


def wide_ladder(policies: list[str], seconds: float) -> None:
    print("exhaustive search of the executable model (checkers.symbolic.reach), per wide fragment")
    print(f"  {'policy':<16} {'fragment':<58} {'states':>8} {'trans':>9} {'depth':>5}  verdict")
    for w in LADDER:
        desc = ",".join(f"{k}={v}" for k, v in attrs.asdict(w).items())
        for p in policies:
            r = explore_wide(p, w, max_states=2_000_000, max_seconds=seconds)
            how = (
                "fixpoint (exact: a proof)"
                if r.proves
                else "fixpoint, inexact"
                if r.fixpoint
                else f"bounded ({r.capped})"
            )
            claims: frozenset[str] = getattr(resolve_policy(p), "claims", frozenset())
            bad = ",".join(sorted(n for n in r.failing if n in claims))
            print(
                f"  {p:<16} {desc:<58} {r.states:>8} {r.transitions:>9} {r.depth:>5}  {how}"
                f"{'  claims violated: ' + bad if bad else ''}  {r.seconds:.1f} s",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depths", default="4,8,12")
    ap.add_argument("--reach", help="comma-separated budgets in seconds, e.g. 10,60")
    ap.add_argument("--max-depth", type=int, default=40)
    ap.add_argument("--wide", action="store_true", help="the exhaustive search's ladder")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--seconds", type=float, default=600.0, help="--wide: cap per search")
    a = ap.parse_args()
    if a.wide:
        wide_ladder(a.policies.split(","), a.seconds)
        return
    depths = [int(x) for x in a.depths.split(",")]
    f = Fragment()
    if a.reach:
        budgets = [float(x) for x in a.reach.split(",")]
        print(f"BMC depth reached per budget (fragment: {f.contexts} contexts, {f.slots} slots)")
        print(f"  {'policy':<16} {'invariant':<38}" + "".join(f"  {b:>6g}s" for b in budgets))
        for p in POLICIES:
            prof = profile(p, f)
            for inv in FRAGMENT_INVARIANTS:
                cells = []
                for b in budgets:
                    d, how = reach(prof, f, inv, b, a.max_depth)
                    mark = {"violated": "V", "max": "+"}.get(how, " ")
                    cells.append(f"{d:>3} {mark}")
                print(f"  {p:<16} {inv:<38}" + "".join(f"  {c:>7}" for c in cells), flush=True)
        print("  V: violated at that depth (shortest); +: reached --max-depth within the budget")
        return
    print("rank-order proofs (claimed properties, all feature values):")
    for p in POLICIES:
        t0 = time.perf_counter()
        proofs = prove_policy(resolve_policy(p))
        dt = time.perf_counter() - t0
        print(f"  {p:<16} {len(proofs)} properties  {dt * 1000:8.1f} ms")
    print(f"fragment: {f.contexts} contexts, {f.slots} slots, {f.edits} edit each")
    head = "".join(f"  BMC d={d:<3}" for d in depths)
    print(f"  {'policy':<16} {'invariant':<38}{head}  1-induction")
    for p in POLICIES:
        prof = profile(p, f)
        for inv in FRAGMENT_INVARIANTS:
            cells = []
            for d in depths:
                t0 = time.perf_counter()
                rung, at, _, _ = bmc(prof, f, inv, d)
                dt = time.perf_counter() - t0
                mark = f"V{at}" if rung == "violated" else ("ok" if rung == "bounded" else "?")
                cells.append(f"{dt:6.2f}s {mark:<3}")
            t0 = time.perf_counter()
            ind = induction(prof, f, inv, 1)
            dt = time.perf_counter() - t0
            print(f"  {p:<16} {inv:<38}" + "".join(f"  {c}" for c in cells) + f"  {dt:6.2f}s {ind}")


if __name__ == "__main__":
    main()
