"""Hardware and model presets for Lachesis-style studies (every number with its source).

Models -- bytes of KV per token = layers x KV heads x head dim x 2 (K, V) x dtype bytes; the
attention shapes are the models' published Hugging Face ``config.json`` values
(``num_hidden_layers``, ``num_key_value_heads``, ``head_dim``), bf16 KV:

* Llama-4-Maverick-17B-128E: 48 layers, 8 KV heads of 128 -> 196,608 B/token;
* Qwen3-235B-A22B: 94 layers, 4 KV heads of 128 -> 192,512 B/token.

Memory -- one GPU with eight stack slots split between HBM and HBF (Lachesis §5, after Son et
al.): 1/7, 2/6, 3/5, 4/4, and H3's daisy chain "8/8*" (eight HBM stacks with eight HBF stacks
behind them, Ha et al.). An HBF stack holds 512 GB (Sandisk, as Lachesis uses); HBF is projected
at 16x HBM's per-stack capacity (Lachesis §2.2), so an HBM stack is taken as 512/16 = 32 GB.
HBF endurance: 100,000 P/E cycles (SLC), write amplification 1.02 (Lachesis §5).

Decode (spec E7) -- a step reads a GPU's share of the weights and its batch's KV at one read
bandwidth for both tiers (Lachesis §5: the tiers differ in write bandwidth only). Each model is
served across eight GPUs with its experts sharded (expert parallelism), so a step reads an
eighth of the weights: bf16, the published total parameter counts (Llama-4-Maverick 400B, Meta's
model card; Qwen3-235B-A22B 235B, its name), every local expert touched at a large batch (an
upper bound). Read bandwidth 1 TB/s per stack slot, 8 TB/s for the eight (HBM3E-class: an
assumption, as the papers give no figure).

``kv_fraction`` is the share of HBM left for KV after weights and activations (the papers do
not give one number; the default 0.5 is an assumption to override), and ``scale`` shrinks every
capacity alike so that a study runs in seconds (device-years scale with it: report ratios).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kvmodel.config import EngineConfig
from kvmodel.errors import ConfigError
from kvmodel.ids import TierName
from kvmodel.memory import ModelShape, TierConfig
from kvmodel.studies.load import DecodeNode

__all__ = [
    "HBF_PE_CYCLES",
    "HBF_STACK_BYTES",
    "HBF_WRITE_AMPLIFICATION",
    "HBM_STACK_BYTES",
    "MODELS",
    "MODEL_PARAMS",
    "READ_BYTES_PER_S",
    "SPLITS",
    "decode_node",
    "hardware_config",
]

HBF_STACK_BYTES = 512 * 10**9
HBM_STACK_BYTES = HBF_STACK_BYTES // 16
HBF_PE_CYCLES = 100_000
HBF_WRITE_AMPLIFICATION = 1.02

MODELS: Mapping[str, ModelShape] = MappingProxyType(
    {
        "llama-4-maverick": ModelShape(layers=48, kv_heads=8, head_dim=128, dtype_bytes=2),
        "qwen3-235b-a22b": ModelShape(layers=94, kv_heads=4, head_dim=128, dtype_bytes=2),
    }
)

#: total parameters of each model (experts included)
MODEL_PARAMS: Mapping[str, int] = MappingProxyType(
    {"llama-4-maverick": 400 * 10**9, "qwen3-235b-a22b": 235 * 10**9}
)
#: one GPU's read bandwidth over its eight stack slots, the same for HBM and HBF
READ_BYTES_PER_S = 8 * 10**12
#: GPUs a model is served across (attention by data parallelism, experts by expert parallelism)
_GPUS = 8
_WEIGHT_BYTES = 2  # bf16

#: split name -> (HBM stacks, HBF stacks)
SPLITS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {"1/7": (1, 7), "2/6": (2, 6), "3/5": (3, 5), "4/4": (4, 4), "8/8*": (8, 8)}
)


def hardware_config(
    split: str,
    model: str,
    *,
    block_size: int = 16,
    kv_fraction: float = 0.5,
    scale: float = 1.0,
) -> EngineConfig:
    """Two tiers (``hbm``, ``hbf``) for one GPU of the given split serving ``model``."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    if not (0 < kv_fraction <= 1 and 0 < scale <= 1):
        raise ConfigError("kv_fraction and scale must be in (0, 1]")
    shape = MODELS[model]
    bpb = shape.bytes_per_block(block_size)
    hbm_stacks, hbf_stacks = SPLITS[split]
    hbm = max(1, int(hbm_stacks * HBM_STACK_BYTES * kv_fraction * scale) // bpb)
    hbf = max(1, int(hbf_stacks * HBF_STACK_BYTES * scale) // bpb)
    return EngineConfig(
        block_size,
        (
            TierConfig(TierName("hbm"), hbm, bytes_per_block=bpb),
            TierConfig(
                TierName("hbf"),
                hbf,
                bytes_per_block=bpb,
                pe_cycles=HBF_PE_CYCLES,
                write_amplification=HBF_WRITE_AMPLIFICATION,
            ),
        ),
        shape,
    )


def decode_node(model: str, *, block_size: int = 16) -> DecodeNode:
    """One GPU's decode step for ``model`` (spec E7): an eighth of the weights and the batch's
    KV read at :data:`READ_BYTES_PER_S`."""
    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    shape = MODELS[model]
    return DecodeNode(
        weight_bytes=MODEL_PARAMS[model] * _WEIGHT_BYTES / _GPUS,
        kv_bytes_per_token=shape.bytes_per_block(block_size) // block_size,
        read_bytes_per_s=READ_BYTES_PER_S,
    )
