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
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from traceanalyzer.analyses.idle import CAUSES

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

#: Colours of busy time and of each idle cause (the page's CSS legend uses the same).
COLOURS: dict[str, str] = {
    "busy": "#2f6db5",
    "host_wait": "#f28e2b",
    "sync": "#d62728",
    "launch_overhead": "#e8c547",
    "other": "#b5b5b5",
}
CAUSE_LABELS: dict[str, str] = {
    "busy": "busy",
    "host_wait": "host wait",
    "sync": "sync",
    "launch_overhead": "launch overhead",
    "other": "other idle",
}
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


def timeline_figure(
    bins: Sequence[dict[str, Any]], labels: Sequence[tuple[int, int, str]], t0_ns: int
) -> Figure:
    """One strip per (rank, device): each bin's busy time and idle causes stacked as shares
    of the bin, against time since `t0_ns` (ms). `labels` orders the strips: (rank, device,
    label)."""
    with matplotlib.rc_context(SVG_RC):
        rows = max(len(labels), 1)
        fig = Figure(figsize=(10, 0.9 + 0.42 * rows), layout="constrained")
        ax = fig.add_subplot()
        by_device: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for b in bins:
            by_device.setdefault((b["rank"], b["device"]), []).append(b)
        layers = ["busy", *CAUSES]
        for i, (rank, device, _label) in enumerate(labels):
            mine = sorted(by_device.get((rank, device), []), key=lambda b: b["bin"])
            if not mine:
                continue
            starts = np.array([b["start_ns"] for b in mine], dtype=np.int64)
            ends = np.array([b["end_ns"] for b in mine], dtype=np.int64)
            width = np.maximum(ends - starts, 1).astype(np.float64)
            edges = np.append(starts - t0_ns, ends[-1] - t0_ns) / 1e6
            shares = (
                np.array(
                    [[b[f"{layer}_ns"] or 0 for b in mine] for layer in layers], dtype=np.float64
                )
                / width
            )
            tops = np.cumsum(shares, axis=0) * STRIP_HEIGHT
            y0 = rows - 1 - i
            # Painter's order, tallest first: each layer is one outline on the strip's
            # baseline (half the path of a band with its own lower edge).
            for layer, top in reversed(list(zip(layers, tops, strict=True))):
                if top.any():
                    ax.stairs(
                        top + y0, edges, baseline=y0, fill=True, color=COLOURS[layer], linewidth=0
                    )
        ax.set_yticks([rows - 1 - i + 0.4 for i in range(len(labels))])
        ax.set_yticklabels([label for _r, _d, label in labels])
        ax.set_ylim(-0.15, rows)
        ax.set_xlabel("time since the window's start (ms)")
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        handles = [Patch(color=COLOURS[k], label=CAUSE_LABELS[k]) for k in layers]
        ax.legend(
            handles=handles,
            loc="lower center",
            bbox_to_anchor=(0.5, 1.0),
            ncols=len(layers),
            frameon=False,
        )
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
