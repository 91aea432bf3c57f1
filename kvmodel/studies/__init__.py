"""Studies over the model: metrics of a run (``metrics``), hardware presets (``presets``), the
paper-style comparison (``compare``) and sweeps over policy x workload x capacity x seed, serially
or on Dask (``sweep``)."""

from __future__ import annotations

__all__: list[str] = []
