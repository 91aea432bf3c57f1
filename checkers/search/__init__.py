"""The first floor: searches of the executable model for a counterexample, and what they report.

``builder`` and ``strategies`` -- valid agent traces from abstract actions (Hypothesis);
``stateful`` -- the Hypothesis stateful machine; ``driver`` -- one policy's search (the
machine, walks and contract traces, then shrinking); ``walk`` -- the random-walk explorer;
``swarm`` -- swarm configurations; ``coverage`` -- what a search exercised;
``shrink`` -- delta debugging; ``bundle`` -- counterexample bundles that replay bit for bit;
``engine_check`` -- the engine against the contract model on random traces;
``metamorphic`` -- metamorphic relations; ``fuzz`` -- the command line's input fuzzer;
``mutants``, ``engine_mutants`` -- the broken policies and engines every checker must catch;
``controls`` -- correct but unusual policies on which no check may fire;
``report`` -- ``kvmodel check``: every (policy, invariant) searched, against the expected
verdicts (``expected_verdicts.toml``).

Imports point down only: at :mod:`checkers.invariants` and :mod:`kvmodel`.
"""

__all__: list[str] = []
