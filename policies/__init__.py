"""Built-in placement/eviction policies. Each module is one policy family (spec/policies.md)."""

from __future__ import annotations
