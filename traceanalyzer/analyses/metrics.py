"""Metrics: the frozen container of every analysis result, handed to the report."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True, slots=True)
class Metrics:
    """Results of `analyze()`; frames are summaries, never whole event tables.

    - `basis`: "steps" when step markers defined the window, else "trace".
    - `windows`: rank, device, start_ns, end_ns.
    - `devices`: rank, device, window_ns, busy_ns, idle_ns, idle_share, kernel_count,
      kernel_ns, `<cause>_ns` per idle cause, gap_count, longest_gap_ns, comm_ns,
      overlapped_comm_ns, exposed_comm_ns, overlap_share, tc_ns, gemm_ns, unknown_ns,
      share_of_gemm, share_of_kernel.
    - `steps`: rank, device, step, name, start_ns, end_ns, busy_ns, idle_share,
      kernel_count, `<cause>_ns`.
    - `kernel_histogram`: lo_ns, hi_ns, count, total_ns (log-spaced duration bins).
    - `launch_size_histogram`: lo_threads, hi_threads, count, total_ns.
    - `top_kernels`: name, count, total_ns, share; `kernel_classes`: kernel_class, count,
      total_ns, share.
    - `gaps`: every idle gap (rank, device, start_ns, end_ns, gap_ns, cause, before, after,
      launch_ns, sync_name, sync_start_ns); `gap_histogram`: lo_ns, hi_ns, count, total_ns
      and ns per cause.
    - `sync_calls`: host syncs with rank, step, name, op, site, start_ns, idle_ns.
    - `collectives`: rank, device, collective, count, total_ns, exposed_ns, msg_bytes.
    - `rank_waits`: rank, collectives, comm_ns, wait_ns (empty for a single rank).
    - `sync_sites`: rank, name, op, site, count, steps, per_step, idle_ns;
      `syncs_per_step`: rank, step, count; `slowest_rank`: the rank others wait for.
    - `bandwidth`: rank, device, op_name, ops, kernel_ns, bytes, gbps, peak_gbps,
      share_of_peak: memory-bound operators' achieved bandwidth (where shapes are recorded).
    - `matmul_shapes`: rank, device, op_name, m, n, k, dtype, calls, kernel_ns, align,
      misaligned (see analyses/shapes.py).
    - `timeline_bins`: rank, device, bin, start_ns, end_ns, busy_ns, `<cause>_ns`: each
      window cut into equal bins (for the timeline strip).
    - `non_tc_gemms`: rank, device, name, evidence, op_dtype, count, total_ns: GEMM kernels
      off the Tensor Cores (analyses/gemm_units.py); `early_starts`: rank, device, linked,
      early, early_share, max_early_ns: GPU work starting before its launch (clock.py).
    - `memory_peaks`: rank, device, step, peak_bytes, end_bytes; `memory_growth`: rank,
      device, steps, first_peak_bytes, last_peak_bytes, growth_bytes, per_step_bytes,
      rising_share (see analyses/memory.py; empty without memory events).
    - `critical_steps`: the critical path per (rank, step): step_ns, path_ns, `<kind>_ns`,
      gpu_<class>_ns, cpu_launch_ns, crosses_ranks; `what_if`: rank, step, scenario,
      saved_ns (see analyses/critical_path.py).
    - `copies`: rank, device, copy_kind, src_memory, dst_memory, count, bytes, time_ns, gbps.
    - `excluded_steps`: rank, step, name, step_ns, reason: warm-up and outlier steps left out
      of the window (see analyses/steady.py); `warmup_steps`: their rows per device (rank,
      device, step, name, start_ns, end_ns, busy_ns, idle_share, kernel_count).
    - `outside_window`: rank, device, before_count, before_ns, after_count, after_ns: GPU work
      outside each device's window (windows.outside_window).
    """

    basis: str
    windows: pl.DataFrame
    devices: pl.DataFrame
    steps: pl.DataFrame
    kernel_histogram: pl.DataFrame
    launch_size_histogram: pl.DataFrame
    top_kernels: pl.DataFrame
    kernel_classes: pl.DataFrame
    kernel_count: int
    kernel_total_ns: int
    small_kernel_count_share: float | None
    small_kernel_time_share: float | None
    gaps: pl.DataFrame
    gap_histogram: pl.DataFrame
    sync_calls: pl.DataFrame
    collectives: pl.DataFrame
    rank_waits: pl.DataFrame
    copies: pl.DataFrame
    launch_gap_max_ns: int
    sync_sites: pl.DataFrame
    syncs_per_step: pl.DataFrame
    slowest_rank: int | None
    bandwidth: pl.DataFrame
    matmul_shapes: pl.DataFrame
    memory_peaks: pl.DataFrame
    non_tc_gemms: pl.DataFrame
    early_starts: pl.DataFrame
    timeline_bins: pl.DataFrame
    memory_growth: pl.DataFrame
    critical_steps: pl.DataFrame
    what_if: pl.DataFrame
    excluded_steps: pl.DataFrame
    warmup_steps: pl.DataFrame
    outside_window: pl.DataFrame
