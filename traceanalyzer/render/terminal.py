"""Terminal renderer: plain text at a fixed width, no colour (stable for tests and pipes)."""

from __future__ import annotations

import os
from typing import TextIO

from traceanalyzer.render.units import duration, percent, printable, saving_text
from traceanalyzer.report import Report

NAME_WIDTH = 90


class TerminalRenderer:
    """The default `report` output: rich tables and colour on a terminal, plain text at a
    fixed width when piped or when NO_COLOR is set (stable for tests and scripts)."""

    name = "terminal"
    suffix = ".txt"

    def render(self, report: Report, out: TextIO) -> None:
        """Write the report as sections of aligned text."""
        if _colour(out):
            _render_rich(report, out)
        else:
            out.write("\n".join(_lines(report)) + "\n")


def _colour(out: TextIO) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _render_rich(r: Report, out: TextIO) -> None:
    """The same report for a terminal: diagnoses and devices as tables, sections in bold."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out, highlight=False, soft_wrap=False)
    lines = _lines(r)
    head = lines[: lines.index("Diagnoses (most impactful first)") - 1]
    for line in head:
        console.print(Text(line))
    table = Table(title="Diagnoses (most impactful first)", title_justify="left", expand=True)
    for col in ("severity", "rule", "finding", "saves/step"):
        table.add_column(col, overflow="fold")
    for f in r.findings:
        table.add_row(
            Text(f.severity.value, style=_SEVERITY_STYLE[f.severity.value]),
            f.rule,
            Text(f"{f.title}\n{printable(f.message, 300)}\n-> {printable(f.advice, 300)}"),
            "n/a" if f.impact_ns is None else duration(f.impact_ns),
        )
    if not r.findings:
        table.add_row("", "", "none: no rule fired", "")
    console.print(table)
    # everything after the diagnoses: the critical path (when there is one), then the tables
    heads = ("Critical path (what bounds step time)", "GPU time per device (inside the window)")
    rest = lines[min(lines.index(h) for h in heads if h in lines) - 1 :]
    for line in rest:
        style = "bold" if line and not line.startswith(" ") else None
        console.print(Text(line, style=style or ""))


def _lines(r: Report) -> list[str]:
    src = r.source
    lines = [f"traceanalyzer {r.tool_version}: {printable(src['path'], 200)}"]
    if r.verdict:
        lines.append(f"verdict  {r.verdict['headline']}")
    producer = " ".join(x for x in (src["producer"], src["producer_version"]) if x)
    ranks = ", ".join(
        f"rank {k['rank']}"
        + ("" if k["rank_source"] == "default" else f" (from {k['rank_source']})")
        for k in r.ranks
    )
    lines.append(f"source   {src['format']} trace, {producer}; {ranks}")
    w = r.window
    span = (w["end_ns"] or 0) - (w["start_ns"] or 0)
    if w["basis"] == "steps":
        n_steps = len({(s["rank"], s["name"]) for s in r.steps if not s["warmup"]})
        how = f"from the first to the last step marker ({n_steps} steps), projected onto GPU work"
        left = sorted({e["name"] for e in w["excluded_steps"]})
        if left:
            how += (
                f"; {len(left)} warm-up/outlier step(s) left out ({', '.join(left[:4])}"
                + (", ..." if len(left) > 4 else "")
                + "; --all-steps keeps them)"
            )
    else:
        how = "no step markers: from the first to the last GPU operation of each device"
    lines.append(f"window   {duration(span)}, {how}")
    lines += _diagnosis_lines(r)
    lines += _critical_path_lines(r)
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
    lines += _idle_lines(r)
    lines += _comm_lines(r)
    lines += _tensor_core_lines(r)
    k = r.kernels
    lines += ["", "Kernel time by class"]
    for c in k["classes"]:
        lines.append(
            f"  {c['kernel_class']:<14} {duration(c['total_ns']):>10} {percent(c['share']):>8}"
            f" {c['count']:>8} kernels"
        )
    small = k["small_kernels"]
    lines.append(
        f"  kernels shorter than {duration(small['limit_ns'])}: {percent(small['count_share'])}"
        f" of kernels, {percent(small['time_share'])} of kernel time"
    )
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
            f" {'kernels':>8}  idle by cause"
        )
        for s in r.steps:
            lines.append(
                f"  {s['rank']:>4} {s['device']:>3}  {printable(s['name'], 22):<22}"
                f" {duration(s['end_ns'] - s['start_ns']):>10} {duration(s['busy_ns']):>10}"
                f" {percent(s['idle_share']):>8} {s['kernel_count']:>8}  "
                + _cause_text(s["idle_by_cause"])
            )
    lines += _copy_lines(r)
    lines += _bandwidth_lines(r)
    q = r.quality
    if q["truncated"] or q["dropped_events"] or q["notes"]:
        lines += ["", "Data quality"]
        lines += [f"  {printable(n, 200)}" for n in q["notes"]]
        for reason, n in q["dropped_events"].items():
            lines.append(f"  {n} events not read: {printable(reason, 80)}")
    return lines


def _cause_text(by_cause: dict[str, int]) -> str:
    parts = [f"{c} {duration(ns)}" for c, ns in by_cause.items() if ns]
    return ", ".join(parts) or "none"


def _idle_lines(r: Report) -> list[str]:
    lines = ["", "Idle by cause (share of the window)"]
    lines.append(
        f"  {'rank':>4} {'dev':>3}  {'host_wait':>10} {'sync':>8} {'launch':>8} {'other':>8}"
        f" {'gaps':>7} {'longest':>10}"
    )
    for d in r.devices:
        c = d["idle_share_by_cause"]
        lines.append(
            f"  {d['rank']:>4} {d['device']:>3}  {percent(c['host_wait']):>10}"
            f" {percent(c['sync']):>8} {percent(c['launch_overhead']):>8}"
            f" {percent(c['other']):>8} {d['gap_count']:>7}"
            f" {duration(d['longest_gap_ns']):>10}"
        )
    sites = r.idle["sync_sites"]
    if sites:
        lines += ["", "Host syncs (where they come from)"]
        lines.append(f"  {'count':>6} {'per step':>8} {'idle':>10}  call")
        for s in sites[:8]:
            where = " <- ".join(x for x in (s["op"], s["site"]) if x) or "(no call stack)"
            per_step = "n/a" if s["per_step"] is None else f"{s['per_step']:.1f}"
            lines.append(
                f"  {s['count']:>6} {per_step:>8} {duration(s['idle_ns']):>10}"
                f"  {printable(s['name'], 30)} in {printable(where, 80)}"
            )
    return lines


def _comm_lines(r: Report) -> list[str]:
    if not any(d["comm_ns"] for d in r.devices):
        return []
    lines = ["", "Communication (collective kernels)"]
    lines.append(f"  {'rank':>4} {'dev':>3}  {'comm':>10} {'exposed':>10} {'overlap %':>10}")
    for d in r.devices:
        lines.append(
            f"  {d['rank']:>4} {d['device']:>3}  {duration(d['comm_ns']):>10}"
            f" {duration(d['exposed_comm_ns']):>10} {percent(d['overlap_share']):>10}"
        )
    for c in r.communication["per_collective"][:8]:
        size = "" if c["msg_bytes"] is None else f", {c['msg_bytes'] / 1e6:.1f} MB"
        lines.append(
            f"    rank {c['rank']} {c['collective']}: {c['count']} x, {duration(c['total_ns'])},"
            f" exposed {duration(c['exposed_ns'])}{size}"
        )
    ranks = r.communication["ranks"]
    if ranks:
        slow = r.communication["slowest_rank"]
        waits = ", ".join(f"rank {x['rank']} {duration(x['wait_ns'])}" for x in ranks)
        lines.append(f"  waiting inside collectives: {waits}; slowest rank: {slow}")
    return lines


def _tensor_core_lines(r: Report) -> list[str]:
    lines = ["", "Tensor Cores"]
    lines.append(
        f"  {'rank':>4} {'dev':>3}  {'GEMM time':>10} {'on TC':>10} {'unknown':>10}"
        f" {'TC/GEMM':>8} {'TC/kernels':>10}"
    )
    for d in r.devices:
        t = d["tensor_core"]
        lines.append(
            f"  {d['rank']:>4} {d['device']:>3}  {duration(t['gemm_ns']):>10}"
            f" {duration(t['tc_ns']):>10} {duration(t['unknown_ns']):>10}"
            f" {percent(t['share_of_gemm']):>8} {percent(t['share_of_kernel']):>10}"
        )
    return lines


def _bandwidth_lines(r: Report) -> list[str]:
    if not r.bandwidth:
        return []
    lines = ["", "Memory-bound operators (bytes estimated from recorded shapes)"]
    lines.append(f"  {'kernel time':>11} {'GB/s':>8} {'of peak':>8}  operator")
    for b in r.bandwidth[:8]:
        lines.append(
            f"  {duration(b['kernel_ns']):>11} {b['gbps']:>8.0f} {percent(b['share_of_peak']):>8}"
            f"  {printable(b['op_name'], 60)} ({b['ops']} calls, rank {b['rank']})"
        )
    return lines


def _copy_lines(r: Report) -> list[str]:
    if not r.copies:
        return []
    lines = ["", "Memory copies"]
    for c in r.copies:
        gbps = "n/a" if c["gbps"] is None else f"{c['gbps']:.1f} GB/s"
        size = "n/a" if c["bytes"] is None else f"{c['bytes'] / 1e6:.1f} MB"
        lines.append(
            f"  rank {c['rank']} dev {c['device']}: {c['copy_kind'] or '?'}"
            f" ({c['src_memory'] or '?'} -> {c['dst_memory'] or '?'}) {c['count']} x,"
            f" {size} in {duration(c['time_ns'])}, {gbps}"
        )
    return lines


def _diagnosis_lines(r: Report) -> list[str]:
    lines = ["", "Diagnoses (most impactful first)"]
    if not r.findings:
        lines.append("  none: no rule fired")
    for f in r.findings:
        saves = "" if f.impact_ns is None else f"  ({saving_text(f.impact_ns)})"
        lines.append(f"  [{f.severity.value}] {f.rule} {f.title}{saves}")
        lines.append(f"      {printable(f.message, 160)}")
        lines.append(f"      -> {printable(f.advice, 160)}")
    return lines


_KIND_WORDS = {
    "gpu_compute": "GPU compute",
    "comm": "communication",
    "copy": "copies",
    "cpu": "CPU",
    "sync_wait": "sync wait",
    "idle": "idle",
}


def _critical_path_lines(r: Report) -> list[str]:
    if not r.critical_path:
        return []
    lines = ["", "Critical path (what bounds step time)"]
    for c in r.critical_path:
        if not c["path_ns"] or not c["steps"]:
            continue
        parts = sorted(c["share_by_kind"].items(), key=lambda kv: -(kv[1] or 0))
        shares = ", ".join(f"{s:.0%} {_KIND_WORDS[k]}" for k, s in parts if s)
        sampled = (
            f" ({c['steps']} of {c['steps_total']} steps analysed)"
            if c["steps_total"] > c["steps"]
            else ""
        )
        lines.append(
            f"  rank {c['rank']}: step time {duration(c['step_ns'] // c['steps'])}: {shares}"
            f" on the path{sampled}"
        )
    return lines
