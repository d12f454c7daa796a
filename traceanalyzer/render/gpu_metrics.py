"""The GPU-metrics table of every text renderer (terminal, Markdown, HTML): which devices,
which columns, and their cells, from `devices[].gpu_metrics` (docs/report.md).

The cells are the busy samples' means (a sample is busy when GPU work covers 90 % of its
period): what the GPU did while a kernel was resident. A figure the device's metric set
lacks reads "n/a", never 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from traceanalyzer.render.units import duration
from traceanalyzer.report import Report

#: The table's columns after rank and GPU: heading, and the figure (a share) it shows.
SHARE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("SMs", "sm_active_share"),
    ("SM issue", "sm_issue_share"),
    ("tensor", "tensor_active_share"),
    ("DRAM rd", "dram_read_share"),
    ("DRAM wr", "dram_write_share"),
)
#: Shown only where some device sampled them (PCIe always is; NVLink where the GPU has it).
LINK_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("PCIe rx/tx", "pcie_rx_share", "pcie_tx_share"),
    ("NVLink rx/tx", "nvlink_rx_share", "nvlink_tx_share"),
)
#: At most this many steps per device in the per-step table.
MAX_STEPS = 12


def pct(share: float | None) -> str:
    """A counter's share as a whole percent, two significant digits below 10 %."""
    if share is None:
        return "n/a"
    return f"{share:.0%}" if share >= 0.1 or share == 0 else f"{share * 100:.2g}%"


def clock_text(figures: Mapping[str, Any], g: Mapping[str, Any]) -> str:
    """ "1588/1980 MHz 80%": the mean GPC clock of `figures` against the maximum."""
    clock, top = figures.get("gpc_clock_hz"), g.get("max_clock_hz")
    if clock is None:
        return "n/a"
    if not top:
        return f"{clock / 1e6:.0f} MHz"
    return f"{clock / 1e6:.0f}/{top / 1e6:.0f} MHz {clock / top:.0%}"


def devices_with(r: Report) -> list[Mapping[str, Any]]:
    """The devices that have GPU metrics, in the report's order."""
    return [d for d in r.devices if d.get("gpu_metrics")]


def link_columns(devices: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """The link columns some device sampled."""
    return [
        c for c in LINK_COLUMNS if any(d["gpu_metrics"]["busy"][c[1]] is not None for d in devices)
    ]


def headings(devices: Sequence[Mapping[str, Any]]) -> list[str]:
    """The device table's headings."""
    return [
        "rank",
        "GPU",
        "samples",
        "busy",
        *(h for h, _ in SHARE_COLUMNS),
        *(h for h, _, _ in link_columns(devices)),
        "clock",
    ]


def figure_cells(
    figures: Mapping[str, Any], g: Mapping[str, Any], links: Sequence[tuple[str, str, str]]
) -> list[str]:
    """The figure cells of one row (a device's or a step's busy figures)."""
    return [
        *(pct(figures[c]) for _, c in SHARE_COLUMNS),
        *(f"{pct(figures[rx])}/{pct(figures[tx])}" for _, rx, tx in links),
        clock_text(figures, g),
    ]


def device_rows(devices: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One row per device: rank, GPU, its samples in the window, the busy ones, the busy
    figures."""
    links = link_columns(devices)
    return [
        [
            str(d["rank"]),
            str(d["device"]),
            str(d["gpu_metrics"]["samples"]),
            str(d["gpu_metrics"]["busy_samples"]),
            *figure_cells(d["gpu_metrics"]["busy"], d["gpu_metrics"], links),
        ]
        for d in devices
    ]


def step_rows(devices: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One row per steady step of each device (at most MAX_STEPS each): rank, GPU, the
    step's name, its busy samples, the busy figures."""
    links = link_columns(devices)
    rows = []
    for d in devices:
        g = d["gpu_metrics"]
        for s in g["steps"][:MAX_STEPS]:
            rows.append(
                [
                    str(d["rank"]),
                    str(d["device"]),
                    str(s["name"]),
                    f"{s['busy_samples']}/{s['samples']}",
                    *figure_cells(s["busy"], g, links),
                ]
            )
    return rows


def step_headings(devices: Sequence[Mapping[str, Any]], unit: str = "step") -> list[str]:
    """The per-step table's headings; `unit` names the periods ("iteration" where they are
    repeated calls)."""
    return [
        "rank",
        "GPU",
        unit,
        "busy/samples",
        *(h for h, _ in SHARE_COLUMNS),
        *(h for h, _, _ in link_columns(devices)),
        "clock",
    ]


def notes(devices: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the table means, and per device the figures measured inside its GEMM and
    memory-bound kernels (the Tensor Core and memory-bound findings read them)."""
    period = devices[0]["gpu_metrics"]["period_ns"] if devices else None
    out = [
        f"Nsight Systems GPU metrics, one sample every {duration(period)}: means over the busy "
        "samples (GPU work covers 90 % of the sample's period): SMs Active, SM Issue, Tensor "
        "Active, DRAM read and write bandwidth of the peak, the GPC clock against the "
        "device's maximum."
    ]
    for d in devices:
        g = d["gpu_metrics"]
        parts = []
        gemm = g["inside"].get("gemm")
        if gemm:
            parts.append(
                f"inside the GEMM kernels ({gemm['samples']} samples) tensor active "
                f"{pct(gemm['tensor_active_share'])}, SMs active {pct(gemm['sm_active_share'])}"
            )
        mem = g["inside"].get("memory_bound")
        if mem:
            parts.append(
                f"inside the memory-bound kernels ({mem['samples']} samples) DRAM read "
                f"{pct(mem['dram_read_share'])} + write {pct(mem['dram_write_share'])} of peak"
            )
        if parts:
            out.append(f"Rank {d['rank']} GPU {d['device']}: " + "; ".join(parts) + ".")
    return out
