"""Markdown renderer: a summary to paste into a ticket."""

from __future__ import annotations

from typing import TextIO

from traceanalyzer.render.units import duration, percent, printable, saving_text
from traceanalyzer.report import Report


def _cell(text: str) -> str:
    """Table-safe text: no pipes, no newlines, no HTML (names are untrusted)."""
    clean = printable(text, 120).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return clean


class MarkdownRenderer:
    """`--format md`."""

    name = "md"
    suffix = ".md"

    def render(self, report: Report, out: TextIO) -> None:
        """Write the report as Markdown."""
        r = report
        w = r.window
        span = (w["end_ns"] or 0) - (w["start_ns"] or 0)
        lines = [
            f"## GPU trace report: `{_cell(r.source['path'])}`",
            "",
            *([f"**Verdict:** {_cell(r.verdict['headline'])}", ""] if r.verdict else []),
            f"Window {duration(span)} ({w['basis']}), traceanalyzer {r.tool_version}.",
            "",
            "### Diagnoses",
            "",
        ]
        if not r.findings:
            lines.append("No rule fired.")
        for f in r.findings:
            saves = "" if f.impact_ns is None else f" — {saving_text(f.impact_ns)}"
            lines.append(f"- **{f.severity.value}** `{f.rule}` {_cell(f.title)}{saves}  ")
            lines.append(f"  {_cell(f.message)}  ")
            lines.append(f"  *Advice:* {_cell(f.advice)}")
        lines += [
            "",
            "### Devices",
            "",
            "| rank | GPU | window | busy | idle | host wait | sync "
            "| launch | exposed comm | TC share of GEMM |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for d in r.devices:
            c = d["idle_share_by_cause"]
            lines.append(
                f"| {d['rank']} | {d['device']} | {duration(d['window_ns'])} |"
                f" {duration(d['busy_ns'])} | {percent(d['idle_share'])} |"
                f" {percent(c['host_wait'])} | {percent(c['sync'])} |"
                f" {percent(c['launch_overhead'])} | {duration(d['exposed_comm_ns'])} |"
                f" {percent(d['tensor_core']['share_of_gemm'])} |"
            )
        lines += [
            "",
            "### Top kernels",
            "",
            "| time | share | count | kernel |",
            "|---|---|---|---|",
        ]
        for k in r.kernels["top"]:
            lines.append(
                f"| {duration(k['total_ns'])} | {percent(k['share'])} | {k['count']} |"
                f" `{_cell(k['name'])}` |"
            )
        out.write("\n".join(lines) + "\n")
