"""Engine configuration and its TOML form (spec §memory M1-M2).

::

    block_size = 16
    [model]                       # optional: derives bytes_per_block for tiers that omit it
    layers = 32
    kv_heads = 8
    head_dim = 128
    dtype_bytes = 2
    [[tiers]]
    name = "hbm"
    blocks = 512
    [[tiers]]
    name = "hbf"
    blocks = 4096
    pe_cycles = 100000
    write_amplification = 1.02
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from kvmodel.blocks import DEFAULT_BLOCK_SIZE
from kvmodel.errors import ConfigError
from kvmodel.ids import TierName
from kvmodel.memory import ModelShape, TierConfig

__all__ = ["DEFAULT_MODEL", "EngineConfig", "default_config", "load_config", "parse_config"]

#: An 8B-class GQA model (32 layers, 8 KV heads of dim 128, bf16): 128 KiB of KV per token,
#: 2 MiB per 16-token block. Used only to turn block counts into bytes for endurance figures.
DEFAULT_MODEL = ModelShape(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)


@attrs.frozen(slots=True)
class EngineConfig:
    """An engine: its block size in tokens, its tiers in placement order (the first is the
    fastest) and optionally the model's shape (bytes per block). Read from TOML by
    :func:`load_config`; ``kvmodel check`` without ``--config`` draws a swarm of them."""

    block_size: int = DEFAULT_BLOCK_SIZE
    tiers: tuple[TierConfig, ...] = ()
    model: ModelShape | None = None

    def __attrs_post_init__(self) -> None:
        if self.block_size < 1:
            raise ConfigError(f"block_size must be >= 1 (got {self.block_size})")
        if not self.tiers:
            raise ConfigError("at least one [[tiers]] entry is required")
        if all(t.copies_only for t in self.tiers):
            raise ConfigError("every tier is copies_only: a primary has nowhere to go (MV15)")


def default_config(*, hbm_blocks: int = 512, hbf_blocks: int = 4096) -> EngineConfig:
    """Two tiers: ``hbm`` (no wear) and ``hbf`` (100,000 P/E cycles, write amplification 1.02)."""
    bpb = DEFAULT_MODEL.bytes_per_block(DEFAULT_BLOCK_SIZE)
    return EngineConfig(
        DEFAULT_BLOCK_SIZE,
        (
            TierConfig(TierName("hbm"), hbm_blocks, bytes_per_block=bpb),
            TierConfig(
                TierName("hbf"),
                hbf_blocks,
                bytes_per_block=bpb,
                pe_cycles=100_000,
                write_amplification=1.02,
            ),
        ),
        DEFAULT_MODEL,
    )


def _int(
    where: str, table: Mapping[str, Any], key: str, *, required: bool = True, minimum: int = 1
) -> int | None:
    if key not in table:
        if required:
            raise ConfigError(f"{where}: missing required key {key!r}")
        return None
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"{where}: key {key!r} must be an integer >= {minimum} (got {v!r})")
    return v


def _float(where: str, table: Mapping[str, Any], key: str) -> float | None:
    if key not in table:
        return None
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise ConfigError(f"{where}: key {key!r} must be a number > 0 (got {v!r})")
    return float(v)


def _copies(where: str, table: Mapping[str, Any]) -> str:
    v = table.get("copies", "inclusive")
    if v not in ("inclusive", "exclusive"):
        raise ConfigError(f'{where}: key \'copies\' must be "inclusive" or "exclusive" (got {v!r})')
    return str(v)


def _bool(where: str, table: Mapping[str, Any], key: str) -> bool:
    v = table.get(key, False)
    if not isinstance(v, bool):
        raise ConfigError(f"{where}: key {key!r} must be true or false (got {v!r})")
    return v


def _unknown(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise ConfigError(
            f"{where}: unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )


def parse_config(data: Mapping[str, Any], *, source: str = "<config>") -> EngineConfig:
    """Build a config from a decoded TOML document; errors name the source and the key."""
    _unknown(source, data, {"block_size", "model", "tiers"})
    block_size = _int(source, data, "block_size", required=False) or DEFAULT_BLOCK_SIZE
    model: ModelShape | None = None
    if "model" in data:
        m = data["model"]
        where = f"{source}: [model]"
        if not isinstance(m, dict):
            raise ConfigError(f"{where} must be a table")
        _unknown(where, m, {"layers", "kv_heads", "head_dim", "dtype_bytes"})
        model = ModelShape(
            layers=_int(where, m, "layers") or 0,
            kv_heads=_int(where, m, "kv_heads") or 0,
            head_dim=_int(where, m, "head_dim") or 0,
            dtype_bytes=_int(where, m, "dtype_bytes", required=False) or 2,
        )
    raw_tiers = data.get("tiers")
    if not isinstance(raw_tiers, list) or not raw_tiers:
        raise ConfigError(f"{source}: expected at least one [[tiers]] table")
    tiers: list[TierConfig] = []
    for i, t in enumerate(raw_tiers):
        where = f"{source}: [[tiers]] #{i + 1}"
        if not isinstance(t, dict):
            raise ConfigError(f"{where} must be a table")
        _unknown(
            where,
            t,
            {
                "name",
                "blocks",
                "bytes_per_block",
                "pe_cycles",
                "write_amplification",
                "read_gbps",
                "write_gbps",
                "copies",
                "copies_only",
            },
        )
        name = t.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: key 'name' must be a non-empty string (got {name!r})")
        bpb = _int(where, t, "bytes_per_block", required=False)
        if bpb is None and model is not None:
            bpb = model.bytes_per_block(block_size)
        wa = _float(where, t, "write_amplification")
        try:
            tiers.append(
                TierConfig(
                    TierName(name),
                    _int(where, t, "blocks") or 0,
                    bytes_per_block=bpb,
                    pe_cycles=_int(where, t, "pe_cycles", required=False),
                    write_amplification=1.0 if wa is None else wa,
                    read_gbps=_float(where, t, "read_gbps"),
                    write_gbps=_float(where, t, "write_gbps"),
                    copies=_copies(where, t),
                    copies_only=_bool(where, t, "copies_only"),
                )
            )
        except ConfigError as e:
            if str(e).startswith(where):
                raise
            raise ConfigError(f"{where}: {e}") from None
    try:
        return EngineConfig(block_size, tuple(tiers), model)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def load_config(path: str | Path) -> EngineConfig:
    """Read an engine config from TOML (spec M1); a bad file is a :class:`ConfigError` naming
    it and what was expected."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read config file: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise ConfigError(f"{p}: invalid TOML: nested too deeply") from None
    return parse_config(data, source=str(p))
