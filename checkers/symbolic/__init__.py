"""The second floor: proofs (spec/invariants.md §Proofs).

``z3util`` -- solvers with a deterministic budget; ``z3rank`` -- rank-order proofs of a
declarative rank key; ``fragment`` -- the small fragment the symbolic model and the exhaustive
search share; ``transition`` -- its symbolic transition system; ``bmc`` -- bounded model checking
and k-induction (``kvmodel prove``; rungs expected in ``expected_proofs.toml``); ``selfcheck`` --
the symbolic transition checked against the executable model (``--self-check``); ``reach`` and
``statekey`` -- exhaustive explicit-state search of the executable model to a fixpoint
(``--reach``); ``optimal`` -- Z3 Optimize bounds for the offline policies.

Imports point down only: at :mod:`checkers.search`, :mod:`checkers.invariants` and
:mod:`kvmodel`.
"""

__all__: list[str] = []
