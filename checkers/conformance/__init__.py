"""The third floor: other implementations held to the reference.

``oracle`` -- is an implementation's observation log one the reference allows (with
``oracle_log``, the log's side, and ``oracle_invariants``, the invariants-only mode);
``lockstep`` -- an implementation driven beside the reference, searched and shrunk;
``adapters`` -- the kit for putting a third-party prefix cache under lockstep;
``vllm_pool`` -- vLLM's own ``BlockPool`` under test; ``kv_events`` -- vLLM KV-cache events as a
partial log; ``pytest_plugin`` -- the ``kvmodel_lockstep`` fixture (entry point ``pytest11``).

Imports point down only.
"""

__all__: list[str] = []
