"""HTML renderer: one self-contained post-mortem page (`--format html`, or `-o x.html`).

Pipeline position: Report -> this renderer -> one HTML file. The page fetches nothing: CSS
and the sort script are inline (the script is pinned by hash in a Content-Security-Policy),
figures are inline SVG from `render.figures`, and the report's JSON is embedded in a
`<script type="application/json" id="report-data">` block. Every trace string goes through
Jinja's autoescaping; only our own markup (CSS, script, SVG, rule docs) is marked safe.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from traceanalyzer.analyses.gpu.idle import CAUSES
from traceanalyzer.render import figures, launch
from traceanalyzer.render import gpu_metrics as gm
from traceanalyzer.render.base import script_json, static_text
from traceanalyzer.render.kernel_names import short_names
from traceanalyzer.render.markdown_html import markdown_html
from traceanalyzer.render.ranks import HEADINGS as RANK_HEADINGS
from traceanalyzer.render.ranks import cells as rank_cells
from traceanalyzer.render.ranks import folded_note, rank_table
from traceanalyzer.render.units import (
    duration,
    noun,
    percent,
    printable,
    saves_heading,
    sentences,
)
from traceanalyzer.report import Report
from traceanalyzer.rules import BY_CODE, Severity
from traceanalyzer.rules.rule_pages import rule_page

#: Display caps that keep the page small (the embedded JSON keeps every row).
MAX_STEP_ROWS = 400
MAX_STRIPS = 64
MAX_COLLECTIVE_ROWS = 40
NAME_WIDTH = 300
MAX_STEP_BARS = 48
#: The critical path's kinds, in the order the chart stacks them.
PATH_KINDS = ("gpu_compute", "comm", "copy", "cpu", "sync_wait", "idle")


def size(n: float | None) -> str:
    """Bytes as B, kB, MB or GB (decimal)."""
    if n is None:
        return "n/a"
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{round(n)} B"


def bandwidth(gbps: float | None) -> str:
    """GB/s with one decimal."""
    return "n/a" if gbps is None else f"{gbps:,.1f} GB/s"


#: Evidence keys whose generic label (the key in words, unit suffix dropped) reads poorly.
EVIDENCE_LABELS: dict[str, str] = {
    "impact_share_of_step": "impact, share of a step",
    "threshold_share": "threshold",
    "threshold_overlap_share": "threshold, overlap",
    "threshold_per_step": "threshold per step",
    "threshold_steps": "threshold, steps",
    "per_step": "per step",
    "per_step_bytes": "growth per step",
    "bytes_per_step": "growth per step",
    "window_ns": "window",
    "idle_with_refill_ns": "idle, with the queue's refill",
    "rank_wait_ns": "rank's wait in collectives",
    "slowest_rank_wait_ns": "slowest rank's wait",
    "critical_path_saving_ns": "critical-path saving",
    "steps_to_oom": "steps to out of memory",
    "rising_share": "steps that rose",
    "reference_tflops": "reference",
    "gbps": "achieved",
    "peak_gbps": "peak",
    "m": "M",
    "n": "N",
    "k": "K",
    "op": "operator",
    "op_name": "operator",
    "msg_bytes": "message",
    "fp32_without_tf32": "FP32 without TF32",
    "half_precision_off_tc": "half precision off Tensor Cores",
    "mean_kernel_ns": "mean kernel",
    "mean_wait_ns": "mean wait",
    "tc_ns": "time on Tensor Cores",
    "non_tc_ns": "GEMM time off Tensor Cores",
    "gemm_ns": "GEMM time",
    "comm_ns": "communication time",
    "kernel_ns": "kernel time",
    "total_ns": "time",
    "copy_cast_ns": "copy and cast time",
    "copy_cast_count": "copy and cast kernels",
}
#: Unit suffixes dropped from a label (the value carries its unit; "share" stays a word).
_UNIT_SUFFIXES = ("_ns", "_bytes", "_gbps", "_tflops")
#: Words of a key written out in a label.
_WORDS = {
    "comm": "communication",
    "tc": "Tensor Core",
    "gemm": "GEMM",
    "oom": "out of memory",
    "gpu": "GPU",
    "cpu": "CPU",
    "fp32": "FP32",
    "tf32": "TF32",
}
#: A step as a period in a label ("share of a step", "steps"), not a step marker.
_PERIOD = re.compile(r"\bstep(s?)\b(?! markers?)")
#: Rows shown of a list inside the evidence (the embedded JSON keeps all).
MAX_EVIDENCE_ROWS = 12


def evidence_label(key: str, unit: str = "step") -> str:
    """An evidence key in words, its unit suffix dropped (the value carries the unit):
    `exposed_comm_ns` -> "Exposed communication", `tc_ns` -> "Tensor Core"; a step named
    `unit` (an "iteration" where the periods are repeated calls, not step markers)."""
    words = EVIDENCE_LABELS.get(key)
    if words is None:
        for suffix in _UNIT_SUFFIXES:
            words = (words or key).removesuffix(suffix)
        words = " ".join(_WORDS.get(w, w) for w in (words or key).split("_") if w)
    if words and unit != "step":
        words = _PERIOD.sub(lambda m: unit + m.group(1), words)
    return words[:1].upper() + words[1:] if words else key


def _is_share(key: str) -> bool:
    return key.endswith("_share") or "_share_of_" in key or key.startswith("share")


def evidence_value(key: str, value: Any) -> str:
    """One evidence value for display, in the unit its key names: ns as ms/µs, shares as %,
    bytes as MB/GB, bandwidth as GB/s; nested values as `key: value` text."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if key.endswith("_ns"):
            return duration(round(value))
        if _is_share(key):
            return "< 0.1 %" if 0 < abs(value) < 0.0005 else percent(value)
        if key.endswith("_bytes") or key == "bytes" or key == "bytes_per_step":
            return size(value)
        if key.endswith("gbps"):
            return bandwidth(value)
        if key.endswith("tflops"):
            return f"{value:,.0f} TFLOP/s"
        if isinstance(value, float):
            return f"{value:.3g}"
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, list):
        shown = ", ".join(evidence_value(key, v) for v in value[:MAX_EVIDENCE_ROWS])
        return shown + (f", … ({len(value)} in all)" if len(value) > MAX_EVIDENCE_ROWS else "")
    if isinstance(value, dict):
        return "; ".join(f"{evidence_label(k)}: {evidence_value(k, v)}" for k, v in value.items())
    return printable(str(value), 400)


def evidence_rows(evidence: dict[str, Any], unit: str = "step") -> list[dict[str, Any]]:
    """A finding's evidence as labelled rows: `{label, value}`, or, for a list of records
    (collectives, call sites, shapes), `{label, head, rows, more}`: a small table with
    labelled columns and formatted cells; steps named `unit` (see `evidence_label`)."""
    out: list[dict[str, Any]] = []
    for key, value in evidence.items():
        label = evidence_label(key, unit)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            cols = list(dict.fromkeys(k for v in value for k in v))
            out.append(
                {
                    "label": label,
                    "head": [evidence_label(c, unit) for c in cols],
                    "rows": [
                        [evidence_value(c, v.get(c)) for c in cols]
                        for v in value[:MAX_EVIDENCE_ROWS]
                    ],
                    "more": max(len(value) - MAX_EVIDENCE_ROWS, 0),
                }
            )
        else:
            out.append({"label": label, "value": evidence_value(key, value)})
    return out


def embedded_json(report: Report) -> Markup:
    """The report's JSON for a `<script type="application/json">` block (`script_json`)."""
    return Markup(script_json(report.to_json_dict()))


@functools.cache
def _rule_doc(code: str) -> Markup:
    # the page generated ahead of time: a renderer never runs the pipeline
    return markdown_html(rule_page(BY_CODE[code].code), heading_offset=2)


@functools.cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("traceanalyzer.render", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["dur"] = duration
    env.filters["pct"] = percent
    env.filters["size"] = size
    env.filters["gbps"] = bandwidth
    env.filters["text"] = printable
    env.filters["sentences"] = sentences
    env.filters["key"] = lambda v: "" if v is None else v
    env.globals["CAUSES"] = CAUSES
    return env


def _device_label(rank: int, device: int) -> str:
    return f"rank {rank} · GPU {device}"


def _header(r: Report) -> list[tuple[str, str]]:
    src = r.source
    producer = " ".join(x for x in (src["producer"], src["producer_version"]) if x)
    gpus = Counter(d["name"] or "unknown GPU" for d in r.devices)
    world = {k["world_size"] for k in r.ranks if k["world_size"] is not None}
    sources = sorted({k["rank_source"] for k in r.ranks})
    w = r.window
    span = None if w["start_ns"] is None or w["end_ns"] is None else w["end_ns"] - w["start_ns"]
    basis = (
        "from the first to the last step marker, each device's from its first steady step's "
        "GPU work"
        if w["basis"] == "steps"
        else f"no step markers: iterations are the repeats of {w['iterations_from']}"
        if w["basis"] == "iterations"
        else "no step markers: first to last GPU work per device"
    )
    step_names = {s["name"] for s in r.steps}
    ranks = f"{len(r.ranks)} (rank ids from {', '.join(sources)})"
    if world:
        ranks += f"; world size {', '.join(str(x) for x in sorted(world))}"
    return [
        ("Trace", printable(src["path"], 500)),
        ("Format", f"{src['format']}, {producer}" if producer else src["format"]),
        ("GPUs", ", ".join(f"{n} × {printable(name, 80)}" for name, n in gpus.items()) or "none"),
        ("Ranks", ranks),
        ("Window", f"{duration(span)} ({basis})"),
        (
            f"{noun(w['basis']).capitalize()}s",
            f"{len(step_names)} per rank" if step_names else "no step markers",
        ),
        ("Diagnoses", _severity_counts(r)),
        ("Tool", f"traceanalyzer {r.tool_version}"),
    ]


def _severity_counts(r: Report) -> str:
    counts = Counter(f.severity.value for f in r.findings)
    parts = [f"{counts[s]} {s}" for s in ("critical", "warning", "info") if counts[s]]
    return ", ".join(parts) or "none: no rule fired"


def _findings(r: Report) -> list[dict[str, Any]]:
    """The findings in report order (most impactful first), grouped by rule: a group per
    rule, in the order of its first finding, so advice and docs show once per rule."""
    targets, _marks = _timeline_targets(r)
    groups: dict[str, dict[str, Any]] = {}
    for i, f in enumerate(r.findings, start=1):
        scope = []
        if f.scope.rank is not None:
            scope.append(f"rank {f.scope.rank}")
        if f.scope.device is not None:
            scope.append(f"GPU {f.scope.device}")
        if f.scope.window is not None and r.window["start_ns"] is not None:
            lo, hi = (t - r.window["start_ns"] for t in f.scope.window)
            scope.append(f"{duration(lo)} to {duration(hi)} into the window")
        group = groups.setdefault(
            f.rule,
            {
                "rule": f.rule,
                "slug": f.slug,
                "title": f.title,
                "category": f.category,
                "severity": f.severity.value,
                "advice": f.advice,
                "items": [],
            },
        )
        if f.severity.rank > Severity(group["severity"]).rank:
            group["severity"] = f.severity.value
        group["items"].append(
            {
                "anchor": f"finding-{i}",
                "n": i,
                "f": f,
                "scope": ", ".join(scope) or "whole trace",
                "own_advice": f.advice if f.advice != group["advice"] else None,
                "evidence": evidence_rows(f.evidence, noun(r.window["basis"])),
                "timeline": targets[i],
            }
        )
    return list(groups.values())


def _strips(r: Report) -> list[tuple[int, int]]:
    """The (rank, device) strips the timeline draws, top to bottom."""
    if not r.timeline_bins:
        return []
    return [(d["rank"], d["device"]) for d in r.devices][:MAX_STRIPS]


def _timeline_targets(
    r: Report,
) -> tuple[dict[int, str], list[tuple[int, int, int, int, str]]]:
    """Where each finding (by its number) sits on the timeline: the id of its time span's
    outline (a finding with a window), else of its device's strip, else of its rank's first
    strip, else the timeline section; and the spans to outline (rank, device, start, end,
    id)."""
    strips = _strips(r)
    targets: dict[int, str] = {}
    marks: list[tuple[int, int, int, int, str]] = []
    for i, f in enumerate(r.findings, start=1):
        sc = f.scope
        mine = [
            s
            for s in strips
            if (sc.rank is None or s[0] == sc.rank) and (sc.device is None or s[1] == sc.device)
        ]
        if not mine or (sc.rank is None and sc.device is None and sc.window is None):
            targets[i] = "timeline"
        elif sc.window is not None:
            gid = f"timeline-finding-{i}"
            marks.append((mine[0][0], mine[0][1], sc.window[0], sc.window[1], gid))
            targets[i] = gid
        else:
            targets[i] = figures.strip_id(*mine[0])
    return targets, marks


#: The parts of a device's window in the split chart, in stacking order.
SPLIT_PARTS = (
    "compute",
    "comm_overlapped",
    "comm_exposed",
    "comm_wait",
    "host_wait",
    "sync",
    "launch_overhead",
    "other",
)


def _legend(keys: Sequence[str]) -> list[tuple[str, str, str]]:
    """(key, label, colour) per part: the HTML legend beside a figure, same colours."""
    return [(k, figures.CAUSE_LABELS[k], figures.COLOURS[k]) for k in keys]


def _svg(fig: Any) -> Markup:
    return Markup(figures.to_svg(fig))


def device_split(r: Report) -> tuple[list[str], dict[str, list[float]]]:
    """Each device's window in ms, by `SPLIT_PARTS`: compute (busy with no collective
    running), communication under compute, exposed communication, waiting for other ranks
    inside collectives, and idle by cause (the first `MAX_STRIPS` devices); the parts add
    up to the window. The wait is the device's (`comm_wait_ns`, from the analysis), drawn
    inside its exposed communication: a rank that waits for a straggler shows it here,
    where the timeline's busy time hides it."""
    parts: dict[str, list[float]] = {k: [] for k in SPLIT_PARTS}
    shown = r.devices[:MAX_STRIPS]
    for d in shown:
        exposed = d["exposed_comm_ns"]
        wait = min(d["comm_wait_ns"], exposed)
        parts["compute"].append(max(d["busy_ns"] - d["comm_ns"], 0) / 1e6)
        parts["comm_overlapped"].append(d["overlapped_comm_ns"] / 1e6)
        parts["comm_exposed"].append((exposed - wait) / 1e6)
        parts["comm_wait"].append(wait / 1e6)
        for c in CAUSES:
            parts[c].append(d["idle_by_cause"].get(c, 0) / 1e6)
    return [_device_label(d["rank"], d["device"]) for d in shown], parts


def _device_split(r: Report) -> Markup | None:
    if not r.devices:
        return None
    labels, parts = device_split(r)
    return _svg(figures.device_split_figure(labels, parts))


def _step_chart(r: Report) -> Markup | None:
    """One bar per step (the first `MAX_STEP_BARS`): GPU busy and idle by cause; a warm-up
    step left out of the analysis is one grey bar."""
    rows = r.steps[:MAX_STEP_BARS]
    if not rows:
        return None
    parts: dict[str, list[float]] = {k: [] for k in ("busy", *CAUSES, "warmup")}
    for s in rows:
        span = (s["end_ns"] - s["start_ns"]) / 1e6
        analysed = not s.get("warmup") and s["idle_by_cause"]
        parts["busy"].append(s["busy_ns"] / 1e6 if analysed else 0.0)
        for c in CAUSES:
            parts[c].append(s["idle_by_cause"].get(c, 0) / 1e6 if analysed else 0.0)
        parts["warmup"].append(0.0 if analysed else span)
    labels = [f"r{s['rank']} GPU {s['device']} · {printable(s['name'], 40)}" for s in rows]
    return _svg(figures.step_figure(labels, parts, noun(r.window["basis"])))


def _critical_path_chart(r: Report) -> Markup | None:
    """Per rank, the mean analysed step's critical path by what bounds it."""
    rows = [c for c in r.critical_path if c["steps"]]
    if not rows:
        return None
    parts: dict[str, list[float]] = {
        k: [c["by_kind"].get(k, 0) / c["steps"] / 1e6 for c in rows] for k in PATH_KINDS
    }
    ranks = [f"rank {c['rank']}" for c in rows]
    return _svg(figures.critical_path_figure(ranks, parts, noun(r.window["basis"])))


def _memory_chart(r: Report) -> Markup | None:
    """Peak allocated memory per analysed step for each device whose memory was recorded
    (`memory_steps`), else the first and the last step's peaks."""
    if not r.memory_growth:
        return None
    peaks: dict[tuple[int | None, int | None], list[int]] = {}
    for m in r.memory_steps:
        peaks.setdefault((m["rank"], m["device"]), []).append(m["peak_bytes"])
    capacity: int | None = None
    for f in r.findings:
        if isinstance(f.evidence.get("device_memory_bytes"), int):
            capacity = capacity or f.evidence["device_memory_bytes"]
    series = []
    for g in r.memory_growth[:MAX_STRIPS]:
        values = peaks.get((g["rank"], g["device"])) or [
            g["first_peak_bytes"],
            g["last_peak_bytes"],
        ]
        series.append((_device_label(g["rank"], g["device"]), [v / 1e9 for v in values]))
    return _svg(figures.memory_figure(series, None if capacity is None else capacity / 1e9))


def _roofline(r: Report) -> Markup | None:
    """The roofline of the heaviest operators, with the roof of each device kind and
    precision the job ran at; None without FLOPs."""
    points = [o for o in r.roofline if o["achieved_tflops"] and o["intensity"]]
    # the memory-bound operators the bandwidth analysis measured, at one FLOP per element
    memory = [
        {
            "intensity": b["elements"] / b["bytes"],
            "achieved_tflops": b["elements"] / b["kernel_ns"] / 1e3,
            "kernel_ns": b["kernel_ns"],
        }
        for b in r.bandwidth
        if b.get("elements") and b["bytes"] and b["kernel_ns"] and b["gbps"] is not None
    ]
    if not points and not memory:
        return None
    roofs: dict[str, tuple[str, float, float]] = {}
    for d in r.devices:
        f = d.get("flops")
        if f and f["peak_tflops"] and f["peak_gbps"]:
            label = f"{d['name'] or 'GPU'} {f['dtype']} roof"
            roofs.setdefault(label, (label, f["peak_tflops"], f["peak_gbps"]))
    return _svg(figures.roofline_figure(points, list(roofs.values()), memory))


def _figures(r: Report) -> dict[str, Markup | None]:
    strips = _strips(r)
    t0 = r.window["start_ns"] or 0
    timeline = None
    if strips:
        labels = [(rk, dv, _device_label(rk, dv)) for rk, dv in strips]
        _targets, marks = _timeline_targets(r)
        timeline = figures.to_svg(
            figures.timeline_figure(r.timeline_bins, labels, t0, r.steps, marks)
        )
    hist = r.kernels["duration_histogram"]
    durations = None
    if any(b["count"] for b in hist):
        durations = figures.to_svg(
            figures.histogram_figure(
                [f"{figures.short_ns(b['lo_ns'])}–{figures.short_ns(b['hi_ns'])}" for b in hist],
                [b["count"] for b in hist],
                [b["total_ns"] / 1e6 for b in hist],
                "kernel duration",
            )
        )
    sizes = r.kernels["launch_size_histogram"]
    launch = None
    if any(b["count"] for b in sizes):
        launch = figures.to_svg(
            figures.histogram_figure(
                [
                    f"{figures.short_count(b['lo_threads'])}–{figures.short_count(b['hi_threads'])}"
                    for b in sizes
                ],
                [b["count"] for b in sizes],
                [b["total_ns"] / 1e6 for b in sizes],
                "threads per launch (grid × block)",
            )
        )
    comm = [d for d in r.devices if d["comm_ns"]]
    overlap = None
    if comm:
        overlap = figures.to_svg(
            figures.overlap_figure(
                [_device_label(d["rank"], d["device"]) for d in comm],
                [d["overlapped_comm_ns"] / 1e6 for d in comm],
                [d["exposed_comm_ns"] / 1e6 for d in comm],
            )
        )
    return {
        "timeline": Markup(timeline) if timeline else None,
        "durations": Markup(durations) if durations else None,
        "launch_sizes": Markup(launch) if launch else None,
        "overlap": Markup(overlap) if overlap else None,
        "device_split": _device_split(r),
        "steps": _step_chart(r),
        "critical_path": _critical_path_chart(r),
        "memory": _memory_chart(r),
        "roofline": _roofline(r),
        "gpu_metrics": _gpu_metrics_chart(r),
    }


def _gpu_metrics_chart(r: Report) -> Markup | None:
    """The window's GPU metrics over time, one panel per device that has them."""
    devices = gm.devices_with(r)
    if not devices or not r.gpu_metric_series:
        return None
    labels = [(d["rank"], d["device"], _device_label(d["rank"], d["device"])) for d in devices]
    t0 = r.window["start_ns"] or 0
    return _svg(figures.gpu_metrics_figure(r.gpu_metric_series, labels, t0, r.steps))


def page_context(report: Report) -> dict[str, Any]:
    """Everything the template reads: the report plus display-ready strings and figures."""
    r = report
    script = static_text("sort.js") + static_text("zoom.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    codes = list(dict.fromkeys(f.rule for f in r.findings))
    return {
        "r": r,
        "header": _header(r),
        "findings": _findings(r),
        "saves_heading": saves_heading(r.window["basis"]).replace("/", " / "),
        "unit": noun(r.window["basis"]),
        "rule_docs": [
            (code, BY_CODE[code].slug, _rule_doc(code)) for code in codes if code in BY_CODE
        ],
        "figures": _figures(r),
        "timeline_legend": _legend(figures.timeline_layers(r.timeline_bins)),
        "timeline_splits_comm": "comm_ns" in (r.timeline_bins[0] if r.timeline_bins else {}),
        "split_legend": _legend(SPLIT_PARTS),
        "has_marks": bool(_timeline_targets(r)[1]),
        "step_bars": MAX_STEP_BARS,
        "strips_shown": min(len(r.devices), MAX_STRIPS),
        "steps": r.steps[:MAX_STEP_ROWS],
        "collectives": r.communication["per_collective"][:MAX_COLLECTIVE_ROWS],
        "comm_devices": [d for d in r.devices if d["comm_ns"]],
        "rank_table": rank_table(r.ranks),
        "rank_headings": RANK_HEADINGS,
        "rank_cells": rank_cells,
        "rank_folded": folded_note,
        "name_width": NAME_WIDTH,
        "glossary": markdown_html(static_text("glossary.md"), heading_offset=1),
        "top_names": short_names([k["name"] for k in r.kernels["top"]]),
        "launch_heads": launch.device_lines(r.devices),
        "launch_rows": (shaped := launch.shown(r.kernels.get("launch_shapes") or [])),
        "launch_names": short_names([str(k["name"]) for k in shaped]),
        "launch_columns": launch.COLUMNS,
        "launch_cell": launch.cell,
        "css": Markup(static_text("report.css")),
        "script": Markup(script),
        "script_hash": f"sha256-{digest}",
        "data_json": embedded_json(r),
        "gm_devices": gm.devices_with(r),
        "gm": gm,
    }


class HtmlRenderer:
    """`--format html`: the self-contained post-mortem page."""

    name = "html"
    suffix = ".html"

    def render(self, report: Report, out: TextIO) -> None:
        """Write the whole page."""
        template = _environment().get_template("report.html.j2")
        out.write(template.render(page_context(report)))
