"""``kvmodel prove``: Z3 rank-order proofs, bounded model checking and k-induction over the
fragment, the exhaustive ``--reach`` search and the symbolic-executable ``--self-check``."""

from __future__ import annotations

import argparse
import json
import sys

import attrs

from checkers.invariants.registry import invariant_names
from kvmodel.cli.common import Subparsers, int_at_least, number_in
from kvmodel.errors import ConfigError
from kvmodel.policy import claimed_invariants, resolve_policy
from kvmodel.progress import bar, wanted

__all__ = ["add_prove"]


def _wide_spec(text: str) -> object:
    """An argparse type: ``--wide K=V,...`` -> a :class:`checkers.symbolic.reach.Wide`."""
    from checkers.symbolic.reach import parse_wide  # the symbolic floor loads Z3: lazily

    try:
        return parse_wide(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _cmd_prove(args: argparse.Namespace) -> int:
    """Z3: the rank's eviction-order properties for all feature values, then bounded model
    checking and k-induction of the invariants over the harness fragment."""
    from checkers.symbolic.bmc import prove, rank_counterexample
    from checkers.symbolic.fragment import FRAGMENT_INVARIANTS, Fragment
    from checkers.symbolic.z3rank import PROPERTIES, prove_policy

    policy = resolve_policy(args.policy)
    props = args.prop.split(",") if args.prop else None
    if props is not None and (bad := [p for p in props if p not in PROPERTIES]):
        raise ConfigError(f"unknown property {bad[0]!r}; known: {', '.join(PROPERTIES)}")
    names = invariant_names(args.invariant, among=FRAGMENT_INVARIANTS, scope="the fragment")
    if args.depth < 1:
        raise ConfigError(f"--depth must be >= 1 (got {args.depth})")
    for opt in ("contexts", "slots", "edits"):
        low = 0 if opt == "edits" else 1
        if getattr(args, opt) < low or getattr(args, opt) > 6:
            raise ConfigError(f"--{opt} must be in [{low}, 6] (got {getattr(args, opt)})")
    fragment = Fragment(args.contexts, args.slots, args.edits)
    from checkers.symbolic.z3util import RLIMIT

    rlimit = RLIMIT if args.rlimit is None else args.rlimit
    if rlimit < 1:
        raise ConfigError(f"--rlimit must be >= 1 (got {rlimit})")
    reaching = bool(args.reach or args.wide is not None)
    from checkers.symbolic.parametric import AXIOMS, prove_parametric

    # every size: the policy's claims (or the invariants named), each proved, shown not
    # inductive, or unknown with the reason (spec/invariants.md §Parametric proofs)
    every_size = (
        invariant_names(args.invariant) if args.invariant else sorted(claimed_invariants(policy))
    )
    with bar(4 if reaching else 3, "prove", on=wanted(args.quiet)) as done:
        try:
            proofs = prove_policy(policy, props, timeout_ms=int(args.timeout * 1000), rlimit=rlimit)
        except ValueError:
            proofs = []  # no declarative rank: only the fragment (which will say so) applies
        done("rank")
        answers = prove(
            args.policy,
            names,
            fragment=fragment,
            depth=args.depth,
            timeout_s=args.timeout,
            rlimit=rlimit,
        )
        done("fragment")
        parametric = prove_parametric(
            policy, every_size, rlimit=rlimit, timeout_ms=int(args.timeout * 1000)
        )
        done("every size")
        claims = set(claimed_invariants(policy))
        bad_claim = any(a.rung == "violated" and a.invariant in claims for a in answers)
        # what a proof here does not speak for: claims outside the fragment's invariants that
        # are not proved for all sizes either
        every = {a.invariant for a in parametric if a.rung == "proved"}
        uncovered = sorted(claims - set(FRAGMENT_INVARIANTS) - every)
        found = None
        offline = callable(getattr(policy, "prepare", None))
        if (args.reach or args.wide is not None) and offline:
            # it plans from a whole trace; the step-wise search has no trace to give it
            print(
                "--reach: not run: the policy plans from the whole trace (offline)",
                file=sys.stderr,
            )
        elif args.reach or args.wide is not None:
            from checkers.invariants import FINDINGS
            from checkers.symbolic.reach import REACH_INVARIANTS, Wide, reach

            found = reach(
                args.policy,
                args.wide if args.wide is not None else Wide(),
                max_states=args.max_states,
                max_seconds=args.reach_seconds,
            )
            bad_claim = bad_claim or any(n in claims or n in FINDINGS for n in found.failing)
            uncovered = sorted(set(uncovered) - set(REACH_INVARIANTS))
            done("reach")
    if args.json:
        out = {
            "rank": [
                {**attrs.asdict(p), "scope": "any two evictable blocks, all feature values"}
                for p in proofs
            ],
            "fragment": [
                {
                    **attrs.asdict(a),
                    "trace": [str(x) for x in a.trace],
                    "claimed": a.invariant in claims,
                    "structural": a.structural,
                    "scope": a.scope(fragment),
                    "method": a.method,
                }
                for a in answers
            ],
            "parametric": [
                {
                    **attrs.asdict(a),
                    "claimed": a.invariant in claims,
                    "scope": a.scope,
                    "method": a.method,
                    "structural": a.structural,
                }
                for a in parametric
            ],
            "axioms": dict(AXIOMS),
            "uncovered_claims": uncovered,
            "fragment_size": {
                "contexts": fragment.contexts,
                "slots": fragment.slots,
                "edits": fragment.edits,
            },
        }
        if found is not None:
            out["reach"] = {
                "fragment": attrs.asdict(found.wide),
                "states": found.states,
                "transitions": found.transitions,
                "depth": found.depth,
                "fixpoint": found.fixpoint,
                "exact": found.inexact is None,
                "inexact": found.inexact,
                "capped": found.capped,
                "seconds": round(found.seconds, 3),
                "levels": list(found.levels),
                "verdicts": [
                    {
                        "invariant": n,
                        "rung": found.verdict(n)[0],
                        "detail": found.verdict(n)[1],
                        "claimed": n in claims,
                        "trace": [str(x) for x in found.failing.get(n, (0, ()))[1]],
                    }
                    for n in (*found.invariants, *(f for f in found.failing if f in FINDINGS))
                ],
            }
        print(json.dumps(out, indent=2))
    else:
        print(f"rank-order properties of {policy.name} (all feature values):")
        if not proofs:
            print("  none claimed, or no declarative rank")
        for p in proofs:
            print(f"  {p.prop:<22} {p.rung:<9} {p.seconds * 1000:7.1f} ms")
            for blk, vals in (p.counterexample or {}).items():
                print(f"      {blk}: " + ", ".join(f"{k}={v}" for k, v in vals.items()))
            if p.rung == "violated":
                shown = rank_counterexample(args.policy, p.prop, depth=args.depth)
                if shown is not None:
                    print(f"      the wrong eviction ({shown[0]}) on a trace: "
                          + " ; ".join(str(a) for a in shown[1]))  # fmt: skip
        f = fragment
        print(
            f"invariants over the fragment ({f.contexts} contexts, {f.slots} slots, "
            f"{f.edits} edit each; BMC to depth {args.depth}, then k-induction; a proof holds "
            "at every depth of this fragment, not for all sizes):"
        )
        for a in answers:
            mark = "!" if a.rung == "violated" and a.invariant in claims else " "
            print(mark + " " + a.render())
        print(
            "for all sizes (the parametric model: any number of contexts, blocks, tiers and "
            "ops; 1-induction over a block sort, under axioms kvmodel check tests on every "
            "state -- finding symbolic-model):"
        )
        quiet = [pa.invariant for pa in parametric if pa.reason.startswith("not expressed")]
        for pa in parametric:
            if pa.invariant not in quiet:
                print("  " + pa.render().replace("\n", "\n  "))
        if quiet:
            print(
                "  not expressed by the parametric model (--json says why; the fragment, "
                f"--reach and kvmodel check test them): {', '.join(quiet)}"
            )
        if found is not None:
            print(found.render(claims))
        if uncovered:
            print(
                f"claims neither the parametric model nor the fragment"
                f"{'s cover' if found is not None else ' covers'} "
                f"(only kvmodel check tests them): {', '.join(uncovered)}"
                + ("" if found is not None else "; --reach covers all but endurance-budget")
            )
        print(
            "rungs cover every state a run reaches; a decision the engine refuses ends the run "
            "(a policy-protocol finding: kvmodel check searches for those, prove does not)"
        )
    mismatch = False
    if args.self_check:
        from checkers.symbolic.selfcheck import self_check

        sc = self_check(args.policy, fragment=fragment, walks=args.self_check_walks, steps=12)
        print(json.dumps(attrs.asdict(sc), indent=2) if args.json else sc.render())
        mismatch = bool(sc.mismatches)
    return 1 if bad_claim or mismatch or any(p.rung == "violated" for p in proofs) else 0


def add_prove(sub: Subparsers) -> None:
    pv = sub.add_parser(
        "prove", help="Z3: rank-order proofs, bounded model checking and k-induction"
    )
    pv.add_argument("policy", help="policy name or package.module:Name")
    pv.add_argument("--prop", help="comma-separated rank properties (default: those it claims)")
    pv.add_argument("--invariant", help="comma-separated fragment invariants (default: all)")
    pv.add_argument("--depth", type=int_at_least(1), default=8, help="BMC depth (default 8)")
    pv.add_argument("--contexts", type=int, default=3, help="fragment: open contexts (default 3)")
    pv.add_argument("--slots", type=int, default=2, help="fragment: HBM slots (default 2)")
    pv.add_argument("--edits", type=int, default=1, help="fragment: edits per context (default 1)")
    pv.add_argument(
        "--self-check",
        action="store_true",
        help="also check the symbolic transition relation against the executable model, step "
        "by step, on seeded random walks (exit 1 on a mismatch)",
    )
    pv.add_argument(
        "--self-check-walks",
        type=int_at_least(0),
        default=60,
        help="random walks of 12 steps (default 60)",
    )
    pv.add_argument(
        "--rlimit",
        type=int_at_least(1),
        default=None,
        help="Z3 resource units per query (default 50,000,000): the deterministic budget",
    )
    pv.add_argument(
        "--timeout",
        type=number_in(0.0, low_open=True),
        default=600.0,
        help="wall-clock seconds per query, a safety net above --rlimit (default 600)",
    )
    pv.add_argument(
        "--reach",
        action="store_true",
        help="also search the executable model exhaustively over the wide fragment (2-block "
        "chains, a temporary append, forks, two tiers) to a fixpoint: every invariant proved, "
        "violated with a shortest trace, or bounded",
    )
    pv.add_argument(
        "--wide",
        type=_wide_spec,
        default=None,
        metavar="K=V,...",
        help="the wide fragment: contexts, forks, hbm, hbf, edits, temporary (default "
        "contexts=1,forks=0,hbm=2,hbf=1,edits=1,temporary=yes); implies --reach",
    )
    pv.add_argument(
        "--max-states",
        type=int_at_least(1),
        default=200_000,
        help="--reach: stop (bounded, not proved) after this many states (default 200,000)",
    )
    pv.add_argument(
        "--reach-seconds",
        type=number_in(0.0, low_open=True),
        default=900.0,
        help="--reach: stop (bounded, not proved) after this many seconds (default 900)",
    )
    pv.add_argument("--json", action="store_true", help="print every verdict as JSON")
    pv.add_argument("--quiet", action="store_true", help="no progress bar (drawn only on a TTY)")
    pv.set_defaults(func=_cmd_prove)
