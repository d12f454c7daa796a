"""Metrics: the frozen container of every analysis result, handed to the report."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True, slots=True)
class Metrics:
    """Results of `analyze()`; frames are small summaries, never event tables.

    - `basis`: "steps" when step markers defined the window, else "trace".
    - `windows`: rank, device, start_ns, end_ns.
    - `devices`: rank, device, window_ns, busy_ns, idle_ns, idle_share, kernel_count, kernel_ns.
    - `steps`: rank, device, step, name, start_ns, end_ns, busy_ns, idle_share.
    - `kernel_histogram`: lo_ns, hi_ns, count, total_ns (log-spaced duration bins).
    - `top_kernels`: name, count, total_ns, share.
    - `kernel_count`, `kernel_total_ns`: kernels inside the windows, all devices.
    """

    basis: str
    windows: pl.DataFrame
    devices: pl.DataFrame
    steps: pl.DataFrame
    kernel_histogram: pl.DataFrame
    top_kernels: pl.DataFrame
    kernel_count: int
    kernel_total_ns: int
