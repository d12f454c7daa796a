"""Markdown renderer: a summary to paste into a ticket."""

from __future__ import annotations

import re
from typing import TextIO

from traceanalyzer.render import gpu_metrics as gm
from traceanalyzer.render import launch
from traceanalyzer.render.grouping import group_findings, ranks_text
from traceanalyzer.render.kernel_names import short_names
from traceanalyzer.render.ranks import HEADINGS, cells, folded_note, rank_table, step_heading
from traceanalyzer.render.units import (
    duration,
    noun,
    percent,
    printable,
    saving_range_text,
    sentences,
)
from traceanalyzer.report import Report

#: The longest message, advice or name written (whole sentences: a ticket is read in full).
TEXT_WIDTH = 2000
#: ASCII punctuation that Markdown (GitHub, GitLab) may read as markup in running text; an
#: underscore only at a word's edge (`__init__`), not inside one (`send_recv` stays as is).
_MARKUP = re.compile(r"[\\`*\[\]<>|~]|(?<![^\W_])_+|_+(?![^\W_])")


def _text(text: str) -> str:
    """Running text (a title, a message, advice): markup characters backslash-escaped, so
    `<unnamed>`, `a*b` or `[x]` show as written and no HTML reaches the page (names are
    untrusted). One line: a table cell or a list item."""
    return _MARKUP.sub(
        lambda m: "".join("\\" + ch for ch in m.group(0)), printable(text, TEXT_WIDTH)
    )


def _code(text: str, in_table: bool = False) -> str:
    """A code span showing `text` exactly: `<>` raw (a code span shows them as written),
    delimited by more backticks than any run inside it; in a table, `|` escaped as `\\|`
    (GitHub's table syntax, honoured inside code spans too)."""
    clean = printable(text, TEXT_WIDTH)
    if in_table:
        clean = clean.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", clean)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if clean.startswith("`") or clean.endswith("`") or longest else ""
    return f"{fence}{pad}{clean}{pad}{fence}"


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
            f"## GPU trace report: {_code(r.source['path'])}",
            "",
            *([f"**Verdict:** {_text(r.verdict['headline'])}", ""] if r.verdict else []),
            f"Window {duration(span)} ({w['basis']}), traceanalyzer {r.tool_version}.",
            "",
            "### Diagnoses",
            "",
        ]
        if not r.findings:
            lines.append("No rule fired.")
        for g in group_findings(r.findings):
            f = g.lead
            saves = f" — {saving_range_text(g.impacts, w['basis'])}" if g.impacts else ""
            where = f" on {ranks_text(g.ranks)}" if len(g.ranks) > 1 else ""
            worst = "Worst: " if len(g.ranks) > 1 else ""
            lines.append(f"- **{g.severity.value}** `{f.rule}` {_text(f.title)}{where}{saves}  ")
            lines.append(f"  {worst}{_text(sentences(f.message))}  ")
            lines.append(f"  *Advice:* {_text(f.advice)}")
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
        lines += _gpu_metric_lines(r)
        table = rank_table(r.ranks)
        if table is not None:
            labelled = table.folded > 0  # which rank each is: only where some were folded
            lines += [
                "",
                f"### Ranks ({step_heading(r)}, medians)",
                "",
                "| " + " | ".join(HEADINGS) + (" | |" if labelled else " |"),
                "|" + "---|" * (len(HEADINGS) + labelled),
            ]
            lines += [
                "| " + " | ".join(cells(row) + ([label] if labelled else [])) + " |"
                for label, row in table.rows
            ]
            note = folded_note(table)
            if note:
                lines += ["", _text(note)]
        lines += [
            "",
            "### Top kernels",
            "",
            "| time | share | count | kernel |",
            "|---|---|---|---|",
        ]
        shown = short_names([k["name"] for k in r.kernels["top"]])
        for k, name in zip(r.kernels["top"], shown, strict=True):
            lines.append(
                f"| {duration(k['total_ns'])} | {percent(k['share'])} | {k['count']} |"
                f" {_code(name, in_table=True)} |"
            )
        heads = launch.device_lines(r.devices)
        shaped = launch.shown(r.kernels.get("launch_shapes") or [])
        if heads and shaped:
            lines += ["", "### Launch shapes", ""]
            lines += [f"- {h}" for h in heads]
            lines += [
                "",
                "| " + " | ".join(h for h, _ in launch.COLUMNS) + " | kernel |",
                "|" + "---|" * (len(launch.COLUMNS) + 1),
            ]
            names = short_names([str(s["name"]) for s in shaped])
            for s, name in zip(shaped, names, strict=True):
                lines.append(
                    "| "
                    + " | ".join(launch.cell(s, key) for _, key in launch.COLUMNS)
                    + f" | {_code(name, in_table=True)} |"
                )
        lines += _ncu_lines(r)
        lines += ["", "Terms (step time, own, exposed, host wait, ...): docs/glossary.md."]
        out.write("\n".join(lines) + "\n")


def _ncu_lines(r: Report) -> list[str]:
    """What Nsight Compute measured on the trace's kernels (nothing without --ncu)."""
    n = r.ncu
    if n is None:
        return []
    total = n["matched_kernels"] + n["unmatched_kernels"]
    lines = [
        "",
        "### Nsight Compute",
        "",
        f"{n['matched_kernels']} of {total} profiled kernels matched the trace's by name and "
        f"launch order: {n['matched_trace_kernels']} trace kernels, "
        f"{percent(n['covered_share'])} of their devices' kernel time. Durations are the "
        "trace's; DRAM bytes, pipes, registers and occupancy are ncu's.",
        "",
        "| time | DRAM GB/s | TC pipe | occupancy | registers | kernel |",
        "|---|---|---|---|---|---|",
    ]
    shown = short_names([k["name"] for k in n["kernels"][:8]])
    for k, name in zip(n["kernels"][:8], shown, strict=True):
        gbps = "n/a" if k["dram_gbps"] is None else f"{k['dram_gbps']:.0f}"
        regs = "" if k["registers_per_thread"] is None else str(k["registers_per_thread"])
        lines.append(
            f"| {duration(k['kernel_ns'])} | {gbps} | {percent(k['tensor_pipe_share'])} |"
            f" {percent(k['achieved_occupancy_share'])} | {regs} | {_code(name, in_table=True)} |"
        )
    if n["notes"]:
        lines += ["", *[f"- {_text(note)}" for note in n["notes"]]]
    return lines


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(_text(c) for c in row) + " |" for row in rows),
    ]


def _gpu_metric_lines(r: Report) -> list[str]:
    """The GPU metrics section (render/gpu_metrics.py); nothing for a trace without."""
    devices = gm.devices_with(r)
    if not devices:
        return []
    lines = ["", "### GPU metrics while busy", ""]
    lines += _md_table(gm.headings(devices), gm.device_rows(devices))
    steps = gm.step_rows(devices)
    if steps:
        unit = noun(r.window["basis"])
        lines += ["", f"Per steady {unit}:", ""]
        lines += _md_table(gm.step_headings(devices, unit), steps)
    lines += ["", *(_text(n) for n in gm.notes(devices))]
    return lines
