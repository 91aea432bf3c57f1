"""Built-in placement/eviction policies, one module per family (spec/policies.md).

They are registered by name (``kvmodel policies``) and resolvable by import path exactly as a
third-party policy would be; importing this package is never required to use them.
"""

from __future__ import annotations

from policies.hbm_first import HBMFirst
from policies.kvtether import KVTether
from policies.lru import LRU

__all__ = ["LRU", "HBMFirst", "KVTether"]
