"""Terminal renderer: plain text at a fixed width, no colour (stable for tests and pipes)."""

from __future__ import annotations

from typing import TextIO

from traceanalyzer.render.units import duration, percent, printable
from traceanalyzer.report import Report

NAME_WIDTH = 90


class TerminalRenderer:
    """The default `report` output."""

    name = "terminal"
    suffix = ".txt"

    def render(self, report: Report, out: TextIO) -> None:
        """Write the report as sections of aligned text."""
        out.write("\n".join(_lines(report)) + "\n")


def _lines(r: Report) -> list[str]:
    src = r.source
    lines = [f"traceanalyzer {r.tool_version}: {printable(src['path'], 200)}"]
    producer = " ".join(x for x in (src["producer"], src["producer_version"]) if x)
    ranks = ", ".join(f"rank {k['rank']} (from {k['rank_source']})" for k in r.ranks)
    lines.append(f"source   {src['format']} trace, {producer}; {ranks}")
    w = r.window
    span = (w["end_ns"] or 0) - (w["start_ns"] or 0)
    if w["basis"] == "steps":
        n_steps = len({(s["rank"], s["name"]) for s in r.steps})
        how = f"from the first to the last step marker ({n_steps} steps), projected onto GPU work"
    else:
        how = "no step markers: from the first to the last GPU operation of each device"
    lines.append(f"window   {duration(span)}, {how}")
    lines += ["", "GPU time per device (inside the window)"]
    lines.append(
        f"  {'rank':>4} {'dev':>3}  {'window':>10} {'busy':>10} {'idle':>10} {'idle %':>8}"
        f" {'kernels':>8}  name"
    )
    for d in r.devices:
        lines.append(
            f"  {d['rank']:>4} {d['device']:>3}  {duration(d['window_ns']):>10}"
            f" {duration(d['busy_ns']):>10} {duration(d['idle_ns']):>10}"
            f" {percent(d['idle_share']):>8} {d['kernel_count']:>8}  {d['name'] or ''}"
        )
    k = r.kernels
    lines += ["", f"Top kernels by time ({k['count']} kernels, {duration(k['total_ns'])})"]
    lines.append(f"  {'time':>10} {'share':>8} {'count':>7}  name")
    for t in k["top"]:
        lines.append(
            f"  {duration(t['total_ns']):>10} {percent(t['share']):>8} {t['count']:>7}"
            f"  {printable(t['name'], NAME_WIDTH)}"
        )
    lines += ["", "Kernel durations"]
    for b in k["duration_histogram"]:
        label = f"{duration(b['lo_ns'])} – {duration(b['hi_ns'])}"
        lines.append(f"  {label:>20} {b['count']:>8}  {duration(b['total_ns']):>10}")
    if r.steps:
        lines += ["", "Steps (projected onto each device's GPU work)"]
        lines.append(
            f"  {'rank':>4} {'dev':>3}  {'step':<22} {'time':>10} {'busy':>10} {'idle %':>8}"
        )
        for s in r.steps:
            lines.append(
                f"  {s['rank']:>4} {s['device']:>3}  {printable(s['name'], 22):<22}"
                f" {duration(s['end_ns'] - s['start_ns']):>10} {duration(s['busy_ns']):>10}"
                f" {percent(s['idle_share']):>8}"
            )
    q = r.quality
    if q["truncated"] or q["dropped_events"] or q["notes"]:
        lines += ["", "Data quality"]
        lines += [f"  {printable(n, 200)}" for n in q["notes"]]
        for reason, n in q["dropped_events"].items():
            lines.append(f"  {n} events not read: {printable(reason, 80)}")
    return lines
