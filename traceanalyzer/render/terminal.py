"""Terminal renderer: plain text at a fixed width, no colour (stable for tests and pipes)."""

from __future__ import annotations

import os
import re
import textwrap
from typing import TextIO

import polars as pl

from traceanalyzer.render import gpu_metrics as gm
from traceanalyzer.render import launch
from traceanalyzer.render.grouping import group_findings, ranks_text
from traceanalyzer.render.kernel_names import short_names
from traceanalyzer.render.ranks import HEADINGS, cells, folded_note, rank_table, step_heading
from traceanalyzer.render.units import (
    UNIT,
    duration,
    noun,
    percent,
    printable,
    saves_heading,
    saving_range_text,
    sentences,
)
from traceanalyzer.report import Report, excluded_words

NAME_WIDTH = 90
#: The width of plain output (piped, NO_COLOR) unless COLUMNS says otherwise.
PLAIN_WIDTH = 100
#: Narrower than this, lines are not folded (a width this small is a mistake, not a screen).
MIN_WIDTH = 40
#: The longest message or advice shown (a whole sentence or three, never cut mid-word).
TEXT_WIDTH = 2000


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
            width = plain_width()
            out.write("\n".join(fit(_lines(report, width), width)) + "\n")


def plain_width() -> int:
    """The width of plain output: `COLUMNS` when set (`COLUMNS=80 traceanalyzer report X |
    less`), else `PLAIN_WIDTH`, so piped output is the same everywhere."""
    try:
        width = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return PLAIN_WIDTH
    return max(width, MIN_WIDTH)


#: `verdict  ...`, `window   ...`: a label column; continuation lines start under its text.
_LABEL = re.compile(r"^[a-z]+ {2,}")


def fit(lines: list[str], width: int) -> list[str]:
    """Fold every line wider than `width` onto continuation lines, never past it: a labelled
    line continues under its text, advice (`-> `) under the advice, a table row's overflow
    (its last column) indented under the row, prose under itself."""
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line.replace(_GLUE, " "))
            continue
        lead = len(line) - len(line.lstrip(" "))
        label = _LABEL.match(line)
        if label:
            indent = len(label.group(0))
        elif line.lstrip().startswith("-> "):
            indent = lead + 3
        elif "  " in line.strip():  # a table row: columns apart by runs of spaces
            indent = lead + 4
        else:
            indent = lead
        folded = textwrap.wrap(
            line,
            width=width,
            subsequent_indent=" " * min(indent, width // 2),
            break_on_hyphens=False,
            drop_whitespace=True,
        ) or [line[:width]]
        out += [part.replace(_GLUE, " ") for part in folded]
    return out


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
    width = max(console.width, MIN_WIDTH)
    lines = fit(_lines(r, width), width)
    head = lines[: lines.index("Diagnoses (most impactful first)") - 1]
    for line in head:
        console.print(Text(line))
    table = Table(title="Diagnoses (most impactful first)", title_justify="left", expand=True)
    for col in ("severity", "rule", "finding", saves_heading(r.window["basis"])):
        table.add_column(col, overflow="fold")
    for g in group_findings(r.findings):
        f = g.lead
        impacts = g.impacts
        saves = "n/a" if not impacts else duration(impacts[-1])
        if len(impacts) > 1 and impacts[0] != impacts[-1]:
            saves = f"{duration(impacts[0])} to {saves}"
        where = f" ({ranks_text(g.ranks)})" if len(g.ranks) > 1 else ""
        table.add_row(
            Text(g.severity.value, style=_SEVERITY_STYLE[g.severity.value]),
            f.rule,
            Text(
                f"{f.title}{where}\n{_lead_prefix(g)}{printable(sentences(f.message), TEXT_WIDTH)}"
                f"\n-> {printable(f.advice, TEXT_WIDTH)}"
            ),
            saves,
        )
    if not r.findings:
        table.add_row("", "", "none: no rule fired", "")
    console.print(table)
    # everything after the diagnoses: the critical path (when there is one), then the tables
    heads = ("Critical path (", "GPU time per device (inside the window)")
    first = min(i for i, line in enumerate(lines) if line.startswith(heads))
    rest = lines[first - 1 :]
    for line in rest:
        style = "bold" if line and not line.startswith(" ") else None
        console.print(Text(line, style=style or ""))


def _lines(r: Report, width: int = PLAIN_WIDTH) -> list[str]:
    src = r.source
    lines = [f"traceanalyzer {r.tool_version}: {printable(src['path'], 200)}"]
    if r.verdict:
        lines.append(f"verdict  {r.verdict['headline']}")
    producer = " ".join(x for x in (src["producer"], src["producer_version"]) if x)
    by_source: dict[str, list[int]] = {}
    for info in r.ranks:
        by_source.setdefault(info["rank_source"], []).append(info["rank"])
    ranks = ", ".join(
        ranks_text(sorted(found)) + ("" if source == "default" else f" (from {source})")
        for source, found in by_source.items()
    )
    lines.append(f"source   {src['format']} trace, {producer}; {ranks}")
    w = r.window
    span = (w["end_ns"] or 0) - (w["start_ns"] or 0)
    if w["basis"] == "iterations":
        how = (
            f"no step markers: the repeats of {w['iterations_from']} are its "
            f"iterations ({_step_count(r, 'iteration')}), each device's from "
            "its first steady one's GPU work"
        )
        how += "".join(f"; {words}" for words in excluded_words(w["excluded_steps"], "iteration"))
    elif w["basis"] == "steps":
        how = (
            f"from the first to the last step marker ({_step_count(r)}), each device's from"
            " its first steady step's GPU work"
        )
        how += "".join(f"; {words}" for words in excluded_words(w["excluded_steps"]))
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
    lines += _rank_lines(r)
    lines += _comm_lines(r)
    lines += _tensor_core_lines(r)
    lines += _flops_lines(r)
    lines += _gpu_metric_lines(r)
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
    shown = short_names([t["name"] for t in k["top"]])
    for t, name in zip(k["top"], shown, strict=True):
        lines.append(
            f"  {duration(t['total_ns']):>10} {percent(t['share']):>8} {t['count']:>7}"
            f"  {printable(name, max(24, min(NAME_WIDTH, width - 32)))}"
        )
    lines += _launch_lines(r, width)
    lines += ["", "Kernel durations"]
    for b in k["duration_histogram"]:
        label = f"{duration(b['lo_ns'])} – {duration(b['hi_ns'])}"
        lines.append(f"  {label:>20} {b['count']:>8}  {duration(b['total_ns']):>10}")
    if r.steps:
        unit = noun(w["basis"])
        lines += [
            "",
            f"{unit.capitalize()}s (each device's GPU tile of each {unit}: from the previous"
            f" {unit}'s GPU work done to its own; the {unit} time above is the loop's period)",
        ]
        lines.append(
            f"  {'rank':>4} {'dev':>3}  {unit:<22} {'GPU tile':>10} {'busy':>10} {'idle %':>8}"
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
    lines += _ncu_lines(r)
    q = r.quality
    if q["truncated"] or q["dropped_events"] or q["notes"]:
        lines += ["", "Data quality"]
        lines += [f"  {printable(n, 200)}" for n in q["notes"]]
        for reason, n in q["dropped_events"].items():
            lines.append(f"  {n} events not read: {printable(reason, 80)}")
    return lines


#: Joins the words of one table item (`sync 2.3 µs`) so that `fit` never folds inside it;
#: written out as a space.
_GLUE = "\u00a0"


def _cause_text(by_cause: dict[str, int]) -> str:
    parts = [f"{c} {duration(ns)}".replace(" ", _GLUE) for c, ns in by_cause.items() if ns]
    return ", ".join(parts) or "none"


def _launch_lines(r: Report, width: int) -> list[str]:
    """Launch shapes: per device the SMs its kernels kept busy, and the kernels' shapes."""
    heads = launch.device_lines(r.devices)
    rows = launch.shown(r.kernels.get("launch_shapes") or [])
    if not heads or not rows:
        return []
    lines = ["", "Launch shapes (blocks against the SMs; occupancy is theoretical)"]
    lines += [f"  {h}" for h in heads]
    lines.append("  " + " ".join(f"{h:>10}" for h, _ in launch.COLUMNS) + "  name")
    names = short_names([str(k["name"]) for k in rows])
    for k, name in zip(rows, names, strict=True):
        lines.append(
            "  "
            + " ".join(f"{launch.cell(k, key):>10}" for _, key in launch.COLUMNS)
            + f"  {printable(name, max(24, min(NAME_WIDTH, width - 80)))}"
        )
    return lines


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
        ranked = len({s["rank"] for s in sites}) > 1  # a rank column where rows can repeat
        rank_head = f"{'rank':>4} " if ranked else ""
        per_unit = f"per {noun(r.window['basis'])}"
        wide = max(8, len(per_unit))
        lines.append(f"  {rank_head}{'count':>6} {per_unit:>{wide}} {'idle':>10}  call")
        for s in sites[:8]:
            where = " <- ".join(x for x in (s["op"], s["site"]) if x) or "(no call stack)"
            per_step = "n/a" if s["per_step"] is None else f"{s['per_step']:.1f}"
            rank = f"{s['rank']:>4} " if ranked else ""
            lines.append(
                f"  {rank}{s['count']:>6} {per_step:>{wide}} {duration(s['idle_ns']):>10}"
                f"  {printable(s['name'], 30)} in {printable(where, 80)}"
            )
    return lines


def _rank_lines(r: Report) -> list[str]:
    """The ranks compared per steady step (medians over the steps), folded for big jobs."""
    table = rank_table(r.ranks)
    if table is None:
        return []
    rows = [[*list(HEADINGS), ""]] + [[*cells(row), label] for label, row in table.rows]
    widths = [max(len(x[i]) for x in rows) for i in range(len(HEADINGS))]
    lines = [
        "",
        f"Ranks ({step_heading(r)}, medians; own = the {noun(r.window['basis'])} without"
        " waiting for peers; host wait = GPU idle for its host, between steps of it; peer wait"
        " = in collectives, exposed of"
        " it with nothing else on the GPU)",
    ]
    for x in rows:
        lines.append(
            "  "
            + " ".join(c.rjust(w) for c, w in zip(x, widths, strict=False))
            + (f"  {x[-1]}" if x[-1] else "")
        )
    note = folded_note(table)
    if note:
        lines.append(f"  {note}")
    return [line.rstrip() for line in lines]


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
    for c in r.communication.get("by_rank", [])[:16]:
        if not c["matched"]:
            continue
        bw = "" if c["busbw_gbps"] is None else f", bus {c['busbw_gbps']:.0f} GB/s"
        lines.append(
            f"    rank {c['rank']} {c['collective']}: waits for peers"
            f" {duration(c['wait_ns'])} (exposed {duration(c['exposed_wait_ns'])}), transfers"
            f" {duration(c['transfer_ns'])} (exposed {duration(c['exposed_transfer_ns'])}){bw}"
        )
    ranks = r.communication["ranks"]
    if ranks:
        slow = r.communication["slowest_rank"]
        waits = ", ".join(f"rank {x['rank']} {duration(x['wait_ns'])}" for x in ranks)
        lines.append(f"  waiting inside collectives: {waits}; slowest rank: {slow}")
    return lines


def _flops_lines(r: Report) -> list[str]:
    """FLOPs per step, achieved TFLOP/s and MFU per device, and the heaviest operators
    against their roof (from recorded shapes; nothing without them)."""
    rows = [d for d in r.devices if d.get("flops")]
    if not rows:
        return []
    lines = ["", "FLOPs (matrix and attention operators, from recorded shapes)"]
    head = f"FLOPs/{noun(r.window['basis'])}"
    wide = max(10, len(head))
    lines.append(
        f"  {'rank':>4} {'dev':>3}  {head:>{wide}} {'achieved':>10} {'GEMM rate':>10}"
        f" {'peak':>10} {'MFU':>6} {'GEMM eff.':>9}"
    )
    for d in rows:
        f = d["flops"]
        assert f is not None
        peak = "unknown" if f["peak_tflops"] is None else f"{f['peak_tflops']:.0f} {f['dtype']}"
        lines.append(
            f"  {d['rank']:>4} {d['device']:>3}"
            f"  {f['model_flops_per_step'] / 1e12:>{wide - 2}.2f} TF"
            f" {f['achieved_tflops']:>5.0f} TF/s {_tf(f['gemm_tflops']):>10} {peak:>10}"
            f" {percent(f['mfu']):>6} {percent(f['gemm_efficiency']):>9}"
        )
    low = [d for d in rows if d["flops"] and (d["flops"].get("coverage") or 1.0) < 0.5]
    if low:
        cov = min(d["flops"]["coverage"] for d in low if d["flops"])
        lines.append(
            f"  no MFU where the counted operators hold under half of the GEMM-class time (here"
            f" down to {cov:.1%}): custom kernels, and convolutions recorded without their"
            " Concrete Inputs, are not counted"
        )
    if r.roofline:
        lines.append("  heaviest operators (achieved against the roof of their GPU and precision):")
        for o in r.roofline[:5]:
            roof = "" if o["roof_tflops"] is None else f" of {o['roof_tflops']:.0f} TF/s roof"
            lines.append(
                f"    {duration(o['kernel_ns']):>10}  rank {o['rank']}"
                f" {printable(o['op_name'], 40)} {o['precision']} {o['shape']}:"
                f" {_tf(o['achieved_tflops'])}{roof}"
            )
    return lines


def _tf(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} TF/s"


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
    for d in r.devices:
        m = d["tensor_core"].get("measured")
        if m and m["gemm_ns"]:
            lines.append(
                f"  rank {d['rank']} device {d['device']}, measured by Nsight Compute: the Tensor"
                f" Core pipe active {percent(m['tensor_pipe_share'])} of the matched GEMM time"
                f" ({duration(m['gemm_ns'])}); {duration(m['tc_ns'])} of it on the Tensor Cores"
            )
    return lines


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    """Rows under their headings, each column as wide as its widest cell (the first two
    and the figures right-aligned, text left)."""
    widths = [max(len(c) for c in col) for col in zip(head, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  " + " ".join(
            c.ljust(w) if head[i] in ("step", "iteration") else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return [line(head), *(line(row) for row in rows)]


def _gpu_metric_lines(r: Report) -> list[str]:
    """The GPU metrics of the devices that have them (render/gpu_metrics.py); nothing
    for a trace without."""
    devices = gm.devices_with(r)
    if not devices:
        return []
    notes = gm.notes(devices)
    lines = ["", "GPU metrics while busy (Nsight Systems counters)"]
    lines += _table(gm.headings(devices), gm.device_rows(devices))
    steps = gm.step_rows(devices)
    if steps:
        lines += [f"  per steady {noun(r.window['basis'])}:"]
        lines += _table(gm.step_headings(devices, noun(r.window["basis"])), steps)
    lines += [f"  {n}" for n in notes]
    return lines


def _gbps(gbps: float | None) -> str:
    """Achieved GB/s, or n/a where the estimate is above the peak (not a figure to show)."""
    return "n/a" if gbps is None else f"{gbps:.0f}"


def _bandwidth_lines(r: Report) -> list[str]:
    if not r.bandwidth:
        return []
    measured = any(b.get("source") == "ncu" for b in r.bandwidth)
    how = (
        "DRAM bytes measured by Nsight Compute where marked ncu, else estimated from recorded "
        "shapes"
        if measured
        else "bytes estimated from recorded shapes"
    )
    lines = ["", f"Memory-bound operators ({how})"]
    lines.append(f"  {'kernel time':>11} {'GB/s':>8} {'of peak':>8}  operator")
    for b in r.bandwidth[:8]:
        mark = " [ncu]" if b.get("source") == "ncu" else ""
        lines.append(
            f"  {duration(b['kernel_ns']):>11} {_gbps(b['gbps']):>8} "
            f"{'> peak' if b.get('beyond_peak') else percent(b['share_of_peak']):>8}"
            f"  {printable(b['op_name'], 60)} ({b['ops']} calls, rank {b['rank']}){mark}"
        )
    return lines


def _ncu_lines(r: Report) -> list[str]:
    """What Nsight Compute measured on the trace's kernels (nothing without --ncu)."""
    n = r.ncu
    if n is None:
        return []
    lines = [
        "",
        f"Nsight Compute ({n['matched_kernels']} of {n['matched_kernels'] + n['unmatched_kernels']}"
        f" profiled kernels matched; {n['matched_trace_kernels']} trace kernels,"
        f" {percent(n['covered_share'])} of their devices' kernel time; durations are the"
        " trace's)",
    ]
    for f in n["files"]:
        lines.append(
            f"  {printable(f['path'], 60)} -> rank {f['rank']} device {f['device']}:"
            f" {f['matched_ncu_kernels']} of {f['ncu_kernels']} matched ({f['alignment']}"
            + ("" if f.get("launch_thread") is None else f", thread {f['launch_thread']}")
            + "),"
            f" {percent(f['covered_share'])} of kernel time; DRAM bytes:"
            f" {f['dram_source'] or 'none'}"
        )
    if n["kernels"]:
        lines.append(
            f"  {'time':>10} {'DRAM GB/s':>9} {'TC pipe':>8} {'occup.':>7} {'regs':>5}  kernel"
        )
        shown = short_names([k["name"] for k in n["kernels"][:8]])
        for k, name in zip(n["kernels"][:8], shown, strict=True):
            regs = "" if k["registers_per_thread"] is None else str(k["registers_per_thread"])
            lines.append(
                f"  {duration(k['kernel_ns']):>10} {_gbps(k['dram_gbps']):>9}"
                f" {percent(k['tensor_pipe_share']):>8} {percent(k['achieved_occupancy_share']):>7}"
                f" {regs:>5}  {printable(name, 60)}"
            )
    lines += [f"  {printable(note, 300)}" for note in n["notes"]]
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


def _step_count(r: Report, step: str = "step") -> str:
    """`4 steps`, or `2 steps on each of 2 ranks` (steps are counted per rank); `step` names
    the periods ("iteration" where they are repeated calls)."""
    per_rank: dict[int, set[str]] = {}
    for s in r.steps:
        if not s["warmup"]:
            per_rank.setdefault(s["rank"], set()).add(s["name"])
    counts = sorted({len(names) for names in per_rank.values()})
    if len(per_rank) <= 1:
        n = counts[0] if counts else 0
        return f"{n} {step}{'s' if n != 1 else ''}"
    if len(counts) == 1:
        plural = "s" if counts[0] != 1 else ""
        return f"{counts[0]} {step}{plural} on each of {len(per_rank)} ranks"
    return f"{counts[0]} to {counts[-1]} {step}s on each of {len(per_rank)} ranks"


def _lead_prefix(g: object) -> str:
    """`worst: ` before the message shown for a rule that fired on several ranks."""
    from traceanalyzer.render.grouping import FindingGroup

    assert isinstance(g, FindingGroup)
    return "worst: " if len(g.ranks) > 1 else ""


def _diagnosis_lines(r: Report) -> list[str]:
    lines = ["", "Diagnoses (most impactful first)"]
    if not r.findings:
        lines.append("  none: no rule fired")
    for g in group_findings(r.findings):
        f = g.lead
        saves = f"  ({saving_range_text(g.impacts, r.window['basis'])})" if g.impacts else ""
        where = f" on {ranks_text(g.ranks)}" if len(g.ranks) > 1 else ""
        lines.append(f"  [{g.severity.value}] {f.rule} {f.title}{where}{saves}")
        lines.append(f"      {_lead_prefix(g)}{printable(sentences(f.message), TEXT_WIDTH)}")
        lines.append(f"      -> {printable(f.advice, TEXT_WIDTH)}")
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
    step = r.verdict["step_ns"] if r.verdict else None
    unit = noun(r.window["basis"])
    what = f"what bounds the {duration(step)} {unit}" if step else f"what bounds {unit} time"
    lines = ["", f"Critical path ({what})"]
    for c in r.critical_path:
        if not c["path_ns"] or not c["steps"]:
            continue
        parts = sorted(c["share_by_kind"].items(), key=lambda kv: -(kv[1] or 0))
        shares = ", ".join(f"{s:.0%} {_KIND_WORDS[k]}" for k, s in parts if s)
        sampled = (
            f" ({c['steps']} of {c['steps_total']} {unit}s analysed)"
            if c["steps_total"] > c["steps"]
            else ""
        )
        lines.append(f"  rank {c['rank']}: {shares} on the path{sampled}")
    return lines


def batch_lines(summary: pl.DataFrame, width: int) -> list[str]:
    """A batch's table (the summary's rows, in order): per run its verdict (what bounds it,
    and the cause named first), its step time, what fixing its top finding saves and that
    finding; a failed run says why (cut to the width: the whole reason follows on stderr).
    `summary`: batch.SUMMARY_SCHEMA's frame."""
    head = ["run", "verdict", "step", "saves", "top finding"]
    rows = []
    for r in summary.iter_rows(named=True):
        if r["error"] is not None:
            rows.append([r["run"], "failed", "", "", str(r["error"])])
            continue
        verdict = (r["bound_by"] or "-") + (f" ({r['cause']})" if r["cause"] else "")
        per = f"/{UNIT[r['basis']]}" if r["basis"] in UNIT else " (window)"
        saves = duration(r["top_impact_ns"]) + per if r["top_impact_ns"] is not None else ""
        step = duration(r["step_ns"]) if r["step_ns"] is not None else "-"
        rows.append([r["run"], verdict, step, saves, r["top_diagnosis"] or "no finding"])
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head) - 1)]
    lines = []
    for x in [head, *rows]:
        lead = "  " + "  ".join(c.ljust(w) for c, w in zip(x[:-1], widths, strict=False)) + "  "
        lines.append(lead + printable(x[-1], max(20, width - len(lead))))
    return lines
