"""Figure builders for the HTML report: matplotlib Figures (no pyplot) serialised to inline SVG.

Pipeline position: Report -> render.html -> here. The builders draw numbers the report
already holds; the only arithmetic is display scaling (ns to ms, a bin's parts as shares of
its width). Output is deterministic: a fixed `svg.hashsalt`, no date metadata, text kept
as escaped SVG `<text>` (trace strings are untrusted; matplotlib escapes them, and XML
comments, which it does not escape, are stripped).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from traceanalyzer.analyses.gpu.idle import CAUSES

#: rcParams for every figure: deterministic ids, text as text, no mathtext from `$` in names.
SVG_RC: Any = {  # Any: matplotlib types rc_context's keys as a Literal of every rcParam
    "svg.hashsalt": "traceanalyzer",
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}

#: Colours of busy time, its parts (compute, communication, waiting), each idle cause and the
#: critical path's kinds; the same key means the same colour in every figure.
COLOURS: dict[str, str] = {
    "busy": "#2f6db5",
    "compute": "#2f6db5",
    "comm": "#7b3fa0",
    "comm_overlapped": "#b9a0d6",
    "comm_exposed": "#7b3fa0",
    "comm_wait": "#e377c2",
    "gpu_compute": "#2f6db5",
    "copy": "#76b7b2",
    "cpu": "#f28e2b",
    "sync_wait": "#d62728",
    "idle": "#b5b5b5",
    "warmup": "#dcdcdc",
    "host_wait": "#f28e2b",
    "sync": "#d62728",
    "launch_overhead": "#e8c547",
    "other": "#b5b5b5",
}
CAUSE_LABELS: dict[str, str] = {
    "busy": "GPU busy (compute and communication)",
    "compute": "compute",
    "comm": "communication",
    "comm_overlapped": "communication under compute",
    "comm_exposed": "communication, exposed",
    "comm_wait": "waiting for other ranks (in collectives)",
    "gpu_compute": "GPU compute",
    "copy": "copy",
    "cpu": "host (CPU)",
    "sync_wait": "sync wait",
    "idle": "idle",
    "warmup": "warm-up (not analysed)",
    "host_wait": "host wait",
    "sync": "sync",
    "launch_overhead": "launch overhead",
    "other": "other idle",
}
#: Step boundaries and finding spans on the timeline.
STEP_COLOUR = "#1d1f23"
MARK_COLOUR = "#b3261e"
#: Height of a strip in row units (rows are 1 apart).
STRIP_HEIGHT = 0.8
OVERLAPPED = "#59a14f"
EXPOSED = "#d62728"

_COMMENT = re.compile(r"<!--.*?-->\s*", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_PATH_DATA = re.compile(r'd="([^"]*)"')
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def to_svg(fig: Figure) -> str:
    """The figure as an inline `<svg>` element: no XML prolog, comments or metadata."""
    buf = io.StringIO()
    with matplotlib.rc_context(SVG_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = _METADATA.sub("", _COMMENT.sub("", text))
    return _PATH_DATA.sub(_compact_path, text).strip()


def _compact_path(m: re.Match[str]) -> str:
    """A path's `d` with coordinates to 0.1 pt (well below a pixel), no line breaks, and,
    in runs of straight segments, no repeated points or points inside a horizontal or
    vertical run (the stair outlines of the timeline repeat many)."""
    d = _NUMBER.sub(lambda n: f"{float(n.group()):.1f}".removesuffix(".0"), m.group(1))
    tokens = d.split()
    if set(tokens[::3]) - {"M", "L", "z"} or ("z" in tokens and tokens[-1] != "z"):
        return 'd="' + " ".join(tokens) + '"'
    closed = tokens[-1:] == ["z"]
    body = tokens[:-1] if closed else tokens
    if len(body) % 3:
        return 'd="' + " ".join(tokens) + '"'
    points = [(body[i], body[i + 1], body[i + 2]) for i in range(0, len(body), 3)]
    kept: list[tuple[str, str, str]] = []
    for cmd, x, y in points:
        if cmd == "L" and kept and (kept[-1][1], kept[-1][2]) == (x, y):
            continue
        if (
            cmd == "L"
            and len(kept) >= 2
            and kept[-1][0] == "L"
            and (kept[-2][1] == kept[-1][1] == x or kept[-2][2] == kept[-1][2] == y)
        ):
            kept[-1] = (cmd, x, y)
            continue
        kept.append((cmd, x, y))
    out = " ".join(f"{c} {x} {y}" for c, x, y in kept)
    return 'd="' + out + (" z" if closed else "") + '"'


def short_ns(ns: int) -> str:
    """A compact duration label for an axis: 500ns, 20µs, 1.5ms, 2s."""
    for scale, unit in ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs")):
        if ns >= scale:
            return f"{ns / scale:g}{unit}"
    return f"{ns}ns"


def short_count(n: int) -> str:
    """A compact count label: 512, 32k, 2M."""
    for scale, unit in ((1 << 20, "M"), (1 << 10, "k")):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def strip_id(rank: int, device: int) -> str:
    """The id of a device's strip on the timeline (a `<g>` in the page's SVG)."""
    return f"timeline-r{rank}-d{device}"


def timeline_layers(bins: Sequence[dict[str, Any]]) -> list[str]:
    """The stacked layers, bottom first. Bins that carry `comm_ns` (collective-kernel time,
    part of busy) and `comm_wait_ns` (the part of it spent waiting for other ranks) split
    busy time into compute, communication and waiting; older reports' bins do not."""
    if any("comm_ns" in b for b in bins):
        return ["compute", "comm", "comm_wait", *CAUSES]
    return ["busy", *CAUSES]


def _layer_ns(b: dict[str, Any], layer: str) -> float:
    comm = float(b.get("comm_ns") or 0)
    wait = min(float(b.get("comm_wait_ns") or 0), comm)
    if layer == "compute":
        return max(float(b["busy_ns"] or 0) - comm, 0.0)
    if layer == "comm":
        return comm - wait
    if layer == "comm_wait":
        return wait
    return float(b[f"{layer}_ns"] or 0)


def timeline_figure(
    bins: Sequence[dict[str, Any]],
    labels: Sequence[tuple[int, int, str]],
    t0_ns: int,
    steps: Sequence[Mapping[str, Any]] = (),
    marks: Sequence[tuple[int, int, int, int, str]] = (),
) -> Figure:
    """One strip per (rank, device): each bin's busy time and idle causes stacked as shares
    of the bin, against time since `t0_ns` (ms). `labels` orders the strips: (rank, device,
    label). `steps` (the report's step rows) draw each step's boundaries on its strip;
    `marks` (rank, device, start_ns, end_ns, id) outline a finding's time span. The legend is
    the page's (HTML, beside the figure: `timeline_layers` names the colours). Every strip,
    its step boundaries and each mark is an SVG group with an id, so the page can link to
    them (`strip_id`, `step-boundaries-r<rank>-d<device>`, the mark's id)."""
    with matplotlib.rc_context(SVG_RC):
        rows = max(len(labels), 1)
        fig = Figure(figsize=(10, 1.3 + 0.42 * rows), layout="constrained")
        ax = fig.add_subplot()
        by_device: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for b in bins:
            by_device.setdefault((b["rank"], b["device"]), []).append(b)
        steps_by_device: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
        for s in steps:
            steps_by_device.setdefault((s["rank"], s["device"]), []).append(s)
        layers = timeline_layers(bins)
        row_of = {(rank, device): rows - 1 - i for i, (rank, device, _l) in enumerate(labels)}
        lo_ms = hi_ms = 0.0
        for (rank, device), y0 in row_of.items():
            mine = sorted(by_device.get((rank, device), []), key=lambda b: b["bin"])
            if not mine:
                continue
            starts = np.array([b["start_ns"] for b in mine], dtype=np.int64)
            ends = np.array([b["end_ns"] for b in mine], dtype=np.int64)
            width = np.maximum(ends - starts, 1).astype(np.float64)
            edges = np.append(starts - t0_ns, ends[-1] - t0_ns) / 1e6
            lo_ms, hi_ms = min(lo_ms, edges[0]), max(hi_ms, edges[-1])
            shares = np.array([[_layer_ns(b, layer) for b in mine] for layer in layers]) / width
            tops = np.cumsum(shares, axis=0) * STRIP_HEIGHT
            # Painter's order, tallest first: each layer is one outline on the strip's
            # baseline (half the path of a band with its own lower edge).
            for layer, top in reversed(list(zip(layers, tops, strict=True))):
                if top.any():
                    ax.stairs(
                        top + y0, edges, baseline=y0, fill=True, color=COLOURS[layer], linewidth=0
                    )
            # An outline the page links to (and highlights when it is the link's target).
            frame = Rectangle(
                (edges[0], y0), edges[-1] - edges[0], STRIP_HEIGHT, fill=False, linewidth=0
            )
            frame.set_gid(strip_id(rank, device))
            ax.add_patch(frame)
            bounds = _step_bounds(steps_by_device.get((rank, device), []), starts[0], ends[-1])
            if bounds:
                lines = ax.vlines(
                    (np.array(bounds, dtype=np.int64) - t0_ns) / 1e6,
                    y0 - 0.06,
                    y0 + STRIP_HEIGHT + 0.06,
                    colors=STEP_COLOUR,
                    linewidths=0.9,
                )
                lines.set_gid(f"step-boundaries-r{rank}-d{device}")
        for rank, device, start_ns, end_ns, gid in marks:
            if (rank, device) not in row_of:
                continue
            y0 = row_of[(rank, device)]
            span = Rectangle(
                ((start_ns - t0_ns) / 1e6, y0 - 0.08),
                max(end_ns - start_ns, 1) / 1e6,
                STRIP_HEIGHT + 0.16,
                fill=False,
                edgecolor=MARK_COLOUR,
                linewidth=1.2,
            )
            span.set_gid(gid)
            ax.add_patch(span)
        ax.set_yticks([rows - 1 - i + 0.4 for i in range(len(labels))])
        ax.set_yticklabels([label for _r, _d, label in labels])
        ax.set_ylim(-0.25, rows)
        if hi_ms > lo_ms:
            ax.set_xlim(lo_ms, hi_ms)
        ax.set_xlabel("time since the window's start (ms)")
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
    return fig


def _step_bounds(steps: Sequence[Mapping[str, Any]], lo_ns: int, hi_ns: int) -> list[int]:
    """The distinct step starts and ends that fall inside [lo_ns, hi_ns]."""
    times = {t for s in steps for t in (s["start_ns"], s["end_ns"])}
    return sorted(t for t in times if lo_ns <= t <= hi_ns)


def device_split_figure(labels: Sequence[str], parts_ms: Mapping[str, Sequence[float]]) -> Figure:
    """Per (rank, device), its window split into compute, communication (overlapped with
    compute, exposed, and waiting for other ranks inside collectives) and idle by cause (ms):
    one stacked bar per device, in `labels` order; `parts_ms` maps a key of `COLOURS` to one
    value per device. The legend is the page's."""
    return _stacked_bars(labels, parts_ms, "time in the device's window (ms)", legend=False)


def step_figure(
    labels: Sequence[str], parts_ms: Mapping[str, Sequence[float]], unit: str = "step"
) -> Figure:
    """Per step, its time split into GPU busy and idle by cause (ms), one bar per step; a
    warm-up step that was left out of the analysis is one `warmup` part."""
    return _stacked_bars(labels, parts_ms, f"{unit} time (ms)")


def critical_path_figure(
    labels: Sequence[str], parts_ms: Mapping[str, Sequence[float]], unit: str = "step"
) -> Figure:
    """Per rank, the mean analysed step's critical path split by what bounds it (ms)."""
    return _stacked_bars(labels, parts_ms, f"critical path per {unit} (ms)")


def _stacked_bars(
    labels: Sequence[str],
    parts_ms: Mapping[str, Sequence[float]],
    xlabel: str,
    *,
    legend: bool = True,
) -> Figure:
    """Horizontal stacked bars, one per label (top to bottom), one colour per part of
    `parts_ms` (keys of `COLOURS`, in order); a legend lists the parts that are not all 0
    (unless the page draws it)."""
    with matplotlib.rc_context(SVG_RC):
        rows = max(len(labels), 1)
        fig = Figure(figsize=(10, 1.0 + 0.26 * rows), layout="constrained")
        ax = fig.add_subplot()
        pos = np.arange(len(labels))[::-1]
        left = np.zeros(len(labels))
        for key, values in parts_ms.items():
            v = np.asarray(values, dtype=np.float64)
            if not v.any():
                continue
            ax.barh(pos, v, left=left, color=COLOURS[key], label=CAUSE_LABELS[key], height=0.75)
            left += v
        ax.set_yticks(pos)
        ax.set_yticklabels(labels)
        ax.set_xlabel(xlabel)
        ax.tick_params(axis="y", length=0)
        if legend:
            ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4, frameon=False)
    return fig


def memory_figure(
    series: Sequence[tuple[str, Sequence[float]]], capacity_gb: float | None
) -> Figure:
    """Peak allocated memory per step (GB), one line per (rank, device) label; the device's
    memory as a dashed line where known."""
    with matplotlib.rc_context(SVG_RC):
        fig = Figure(figsize=(10, 2.8), layout="constrained")
        ax = fig.add_subplot()
        for label, values in series:
            steps = np.arange(1, len(values) + 1)
            ax.plot(steps, values, marker="o", markersize=3, linewidth=1.4, label=label)
        if capacity_gb is not None:
            ax.axhline(
                capacity_gb, color="#5f6570", linestyle="--", linewidth=1, label="device memory"
            )
        ax.set_xlabel("analysed step")
        ax.set_ylabel("peak allocated (GB)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4, frameon=False)
    return fig


def histogram_figure(
    labels: Sequence[str], counts: Sequence[int], times_ms: Sequence[float], xlabel: str
) -> Figure:
    """Two bar panels over the same bins: how many, and how much time (ms)."""
    with matplotlib.rc_context(SVG_RC):
        fig = Figure(figsize=(10, 2.6), layout="constrained")
        left, right = fig.subplots(1, 2)
        pos = np.arange(len(labels))
        for ax, values, colour, title in (
            (left, counts, "#4e79a7", "kernels"),
            (right, times_ms, "#f28e2b", "kernel time (ms)"),
        ):
            ax.bar(pos, values, color=colour, width=0.8)
            ax.set_xticks(pos)
            ax.set_xticklabels(labels, rotation=45, ha="right")
            ax.set_title(title, loc="left", fontsize=9)
            ax.set_xlabel(xlabel)
    return fig


def overlap_figure(
    labels: Sequence[str], overlapped_ms: Sequence[float], exposed_ms: Sequence[float]
) -> Figure:
    """Per (rank, device), communication time split into overlapped and exposed (ms)."""
    with matplotlib.rc_context(SVG_RC):
        rows = max(len(labels), 1)
        fig = Figure(figsize=(10, 0.9 + 0.3 * rows), layout="constrained")
        ax = fig.add_subplot()
        pos = np.arange(len(labels))[::-1]
        ax.barh(pos, overlapped_ms, color=OVERLAPPED, label="overlapped with compute")
        ax.barh(pos, exposed_ms, left=overlapped_ms, color=EXPOSED, label="exposed")
        ax.set_yticks(pos)
        ax.set_yticklabels(labels)
        ax.set_xlabel("communication time (ms)")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, frameon=False)
    return fig


def plain_log_ticks(axis: Any) -> None:
    """Tick labels of a log axis as plain text (`0.1`, `10`, `1000`): matplotlib's default
    log labels are mathtext (`$\\mathdefault{10^{3}}$`), which an SVG with text kept as
    text (`svg.fonttype: none`) shows as its source. Minor ticks unlabelled."""
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def roofline_figure(
    points: Sequence[Mapping[str, Any]],
    roofs: Sequence[tuple[str, float, float]],
    memory: Sequence[Mapping[str, Any]] = (),
) -> Figure:
    """A log-log roofline: each operator (FLOPs per byte, achieved TFLOP/s), sized by its
    kernel time; each roof (label, peak TFLOP/s, peak bandwidth GB/s) drawn as the line
    min(peak, intensity x bandwidth), so both roofs show: the bandwidth's slope and the
    compute's flat top. `memory`: memory-bound operators (same keys) in a colour of their
    own, their FLOPs one per element (a lower bound: their intensity is at least that)."""
    with matplotlib.rc_context(SVG_RC):
        fig = Figure(figsize=(10, 4.2), layout="constrained")
        ax = fig.add_subplot()
        every = [*points, *memory]
        x = np.array([float(p["intensity"]) for p in every])
        ns = np.array([float(p["kernel_ns"]) for p in every])
        top = ns.max() if len(ns) and ns.max() > 0 else 1.0
        lo = max(min(x.min() if len(x) else 1.0, 1.0) / 2, 1e-3)
        hi = max(x.max() if len(x) else 1e3, 1e3) * 2
        grid = np.geomspace(lo, hi, 200)
        for label, peak, bw in roofs:
            ax.plot(grid, np.minimum(peak, grid * bw / 1e3), linewidth=1.2, label=label)
        for group, colour, edge, label in (
            (points, "#4e79a7", "#2b4a6b", "matrix, convolution and attention operators"),
            (memory, "#f28e2b", "#b35f12", "memory-bound operators (1 FLOP per element)"),
        ):
            if not group:
                continue
            gx = [float(p["intensity"]) for p in group]
            gy = [float(p["achieved_tflops"]) for p in group]
            size = [20 + 400 * float(p["kernel_ns"]) / top for p in group]
            ax.scatter(gx, gy, s=size, alpha=0.6, color=colour, edgecolors=edge, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            plain_log_ticks(axis)
        ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
        ax.set_ylabel("achieved TFLOP/s")
        if roofs:
            ax.legend(loc="lower right", frameon=False)
    return fig


#: The GPU-metrics figure's lines: the series' column, its label and colour.
GPU_METRIC_LINES: tuple[tuple[str, str, str], ...] = (
    ("sm_active_share", "SMs active", "#2f6db5"),
    ("tensor_active_share", "tensor active", "#59a14f"),
    ("dram_read_share", "DRAM read", "#f28e2b"),
    ("dram_write_share", "DRAM write", "#e8c547"),
    ("clock_share", "GPC clock / max", "#b3261e"),
)
#: At most this many devices get a panel in the GPU-metrics figure.
GPU_METRIC_PANELS = 8


def gpu_metrics_figure(
    series: Sequence[Mapping[str, Any]],
    labels: Sequence[tuple[int, int, str]],
    t0_ns: int,
    steps: Sequence[Mapping[str, Any]] = (),
) -> Figure:
    """One panel per (rank, device) of `labels` (at most GPU_METRIC_PANELS): the window's
    GPU-metric bins (the report's `gpu_metric_series`) as lines of 0-100 % against time
    since `t0_ns` (ms): SMs active, tensor active, DRAM read and write, the clock over its
    maximum, over the timeline's busy share of each bin (grey); each step's boundaries
    (the report's step rows) as vertical lines. A line the metric set lacks is not drawn."""
    shown = list(labels)[:GPU_METRIC_PANELS]
    with matplotlib.rc_context(SVG_RC):
        fig = Figure(figsize=(10, 0.6 + 1.7 * max(len(shown), 1)), layout="constrained")
        axes = fig.subplots(max(len(shown), 1), 1, squeeze=False, sharex=True)[:, 0]
        for ax, (rank, device, label) in zip(axes, shown, strict=False):
            mine = sorted(
                (b for b in series if (b["rank"], b["device"]) == (rank, device)),
                key=lambda b: b["start_ns"],
            )
            ax.set_ylim(0, 105)
            ax.set_ylabel("%")
            ax.set_title(label, loc="left", fontsize=9)
            if not mine:
                continue
            starts = np.array([b["start_ns"] for b in mine], dtype=np.int64)
            ends = np.array([b["end_ns"] for b in mine], dtype=np.int64)
            edges = np.append(starts - t0_ns, ends[-1] - t0_ns) / 1e6
            mids = ((starts + ends) / 2 - t0_ns) / 1e6
            busy = np.array([b["busy_share"] or 0.0 for b in mine]) * 100
            ax.stairs(busy, edges, fill=True, color="#dcdcdc", linewidth=0, label="GPU busy")
            for col, name, colour in GPU_METRIC_LINES:
                values = np.array(
                    [np.nan if b[col] is None else b[col] * 100 for b in mine], dtype=np.float64
                )
                if np.isfinite(values).any():
                    ax.plot(mids, values, color=colour, linewidth=1.0, label=name)
            bounds = _step_bounds(
                [s for s in steps if (s["rank"], s["device"]) == (rank, device)],
                int(starts[0]),
                int(ends[-1]),
            )
            if bounds:
                ax.vlines(
                    (np.array(bounds, dtype=np.int64) - t0_ns) / 1e6,
                    0,
                    105,
                    colors=STEP_COLOUR,
                    linewidths=0.6,
                    linestyles="dotted",
                )
            ax.set_xlim(edges[0], edges[-1])
        axes[0].legend(
            loc="lower center", bbox_to_anchor=(0.5, 1.15), ncols=6, frameon=False, fontsize=8
        )
        axes[-1].set_xlabel("time since the window's start (ms); dotted: step boundaries")
    return fig
