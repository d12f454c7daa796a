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
from collections import Counter
from typing import Any, TextIO

import orjson
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from traceanalyzer.render import figures
from traceanalyzer.render.base import script_json, static_text
from traceanalyzer.render.markdown_html import markdown_html
from traceanalyzer.render.units import duration, percent, printable
from traceanalyzer.report import Report
from traceanalyzer.rules import BY_CODE, Severity
from traceanalyzer.rules.docs import rule_markdown

#: Display caps that keep the page small (the embedded JSON keeps every row).
MAX_STEP_ROWS = 400
MAX_STRIPS = 64
MAX_COLLECTIVE_ROWS = 40
NAME_WIDTH = 300


def size(n: int | None) -> str:
    """Bytes as B, kB, MB or GB (decimal)."""
    if n is None:
        return "n/a"
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def evidence_value(key: str, value: Any) -> str:
    """One evidence number for display, by its unit suffix."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and key.endswith("_ns"):
        return duration(value)
    if isinstance(value, int | float) and key.endswith("_share"):
        return percent(value)
    if isinstance(value, int) and key.endswith("_bytes"):
        return size(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | dict):
        return printable(orjson.dumps(value, default=str).decode(), 400)
    return printable(str(value), 400)


def embedded_json(report: Report) -> Markup:
    """The report's JSON for a `<script type="application/json">` block (`script_json`)."""
    return Markup(script_json(report.to_json_dict()))


@functools.cache
def _rule_doc(code: str) -> Markup:
    # rule_markdown runs the rule's example trace through the pipeline: once per process.
    return markdown_html(rule_markdown(BY_CODE[code]), heading_offset=2)


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
    env.filters["text"] = printable
    env.filters["key"] = lambda v: "" if v is None else v
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
        "from the first to the last step marker, projected onto GPU work"
        if w["basis"] == "steps"
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
        ("Steps", f"{len(step_names)} per rank" if step_names else "no step markers"),
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
                "evidence": [(k, evidence_value(k, v)) for k, v in f.evidence.items()],
            }
        )
    return list(groups.values())


def _figures(r: Report) -> dict[str, Markup | None]:
    strips = [(d["rank"], d["device"]) for d in r.devices][:MAX_STRIPS]
    t0 = r.window["start_ns"] or 0
    timeline = None
    if r.timeline_bins and strips:
        labels = [(rk, dv, _device_label(rk, dv)) for rk, dv in strips]
        timeline = figures.to_svg(figures.timeline_figure(r.timeline_bins, labels, t0))
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
    }


def page_context(report: Report) -> dict[str, Any]:
    """Everything the template reads: the report plus display-ready strings and figures."""
    r = report
    script = static_text("sort.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    codes = list(dict.fromkeys(f.rule for f in r.findings))
    return {
        "r": r,
        "header": _header(r),
        "findings": _findings(r),
        "rule_docs": [
            (code, BY_CODE[code].slug, _rule_doc(code)) for code in codes if code in BY_CODE
        ],
        "figures": _figures(r),
        "strips_shown": min(len(r.devices), MAX_STRIPS),
        "steps": r.steps[:MAX_STEP_ROWS],
        "collectives": r.communication["per_collective"][:MAX_COLLECTIVE_ROWS],
        "comm_devices": [d for d in r.devices if d["comm_ns"]],
        "name_width": NAME_WIDTH,
        "css": Markup(static_text("report.css")),
        "script": Markup(script),
        "script_hash": f"sha256-{digest}",
        "data_json": embedded_json(r),
    }


class HtmlRenderer:
    """`--format html`: the self-contained post-mortem page."""

    name = "html"
    suffix = ".html"

    def render(self, report: Report, out: TextIO) -> None:
        """Write the whole page."""
        template = _environment().get_template("report.html.j2")
        out.write(template.render(page_context(report)))
