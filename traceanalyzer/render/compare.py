"""Renderers of a comparison (`traceanalyzer compare`): text and a self-contained HTML page.

Read like a change review: what got worse, then what got better, with labelled metrics,
signed changes and ratios; changes within noise are listed apart; diagnoses that appeared,
disappeared or changed severity; the kernels whose time changed beyond noise; and (HTML) a
chart of the step time split by what the GPU did, before and after.
"""

from __future__ import annotations

from html import escape
from typing import Any

from traceanalyzer.render.units import duration, percent, printable

#: Sections in the order a reviewer reads them, and their headings.
SECTIONS = (
    ("worse", "Worse"),
    ("better", "Better"),
    ("changed", "Changed (neither better nor worse)"),
    ("same", "Within noise"),
)
_ANSI = {"worse": "\033[31m", "better": "\033[32m"}
_RESET = "\033[0m"


def value_text(m: dict[str, Any], value: Any) -> str:
    """A metric's value in its unit."""
    if value is None:
        return "n/a"
    return percent(value) if m["unit"] == "share" else duration(int(value))


def change_text(m: dict[str, Any]) -> str:
    """The signed change (`+1.20 ms`, `-29.7 pp`) and the ratio (`0.63x`)."""
    change = m["change"]
    if change is None:
        return "n/a"
    sign = "+" if change > 0 else "-" if change < 0 else "±"
    if m["unit"] == "share":
        return f"{sign}{abs(change) * 100:.1f} pp"
    ratio = "" if m["ratio"] is None else f" ({m['ratio']:.2f}x)"
    return f"{sign}{duration(abs(int(change)))}{ratio}"


def by_section(diff: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(verdict, heading, metrics) per non-empty section, in review order."""
    out = []
    for verdict, heading in SECTIONS:
        rows = [m for m in diff["metrics"].values() if m["verdict"] == verdict]
        if rows:
            out.append((verdict, heading, rows))
    return out


def render_text(diff: dict[str, Any], colour: bool = False) -> str:
    """The comparison as aligned text (ANSI colour on the section headings when asked)."""
    lines = [
        f"before: {printable(diff['before'], 200)}",
        f"after:  {printable(diff['after'], 200)}",
    ]
    for verdict, heading, rows in by_section(diff):
        title = f"{_ANSI[verdict]}{heading}{_RESET}" if colour and verdict in _ANSI else heading
        lines += ["", title]
        for m in rows:
            lines.append(
                f"  {m['label']:<28} {value_text(m, m['before']):>10} -> "
                f"{value_text(m, m['after']):<10} {change_text(m)}"
            )
    lines += ["", "Diagnoses"]
    lines.append("  appeared: " + (", ".join(diff["diagnoses_appeared"]) or "none"))
    lines.append("  disappeared: " + (", ".join(diff["diagnoses_disappeared"]) or "none"))
    for c in diff["severity_changed"]:
        lines.append(f"  severity: {c['diagnosis']}: {c['before']} -> {c['after']}")
    lines += ["", "Kernels whose time changed"]
    if not diff["kernels"]:
        lines.append("  none beyond noise")
    for k in diff["kernels"]:
        sign = "+" if k["change_ns"] >= 0 else "-"
        lines.append(
            f"  {sign}{duration(abs(k['change_ns'])):>10}  "
            f"({duration(k['before_ns'])} -> {duration(k['after_ns'])})  "
            f"{printable(k['name'], 70)}"
        )
    lines += ["", f"({diff['note']})"]
    return "\n".join(lines) + "\n"


#: The step split drawn in the chart: GPU busy, then idle by cause.
_SPLIT = (
    ("busy", "GPU busy", "#4c78a8"),
    ("host_wait_share", "waiting for the host", "#f58518"),
    ("sync_share", "host syncs", "#e45756"),
    ("launch_overhead_share", "launch gaps", "#b279a2"),
    ("other_share", "other idle", "#bab0ac"),
)


def step_chart(diff: dict[str, Any]) -> str:
    """An inline SVG: before and after as stacked bars of the step time, split into GPU busy
    and idle by cause (shares of the window applied to the step time). Text labels only from
    this module's own words and numbers, escaped."""
    metrics = diff["metrics"]
    steps = [metrics["step_ns"]["before"], metrics["step_ns"]["after"]]
    if not all(steps):
        return ""
    scale = 460 / max(steps)
    rows = []
    for i, (which, step) in enumerate(zip(("before", "after"), steps, strict=True)):
        idle = metrics["idle_share"][which] or 0.0
        x, y = 70.0, 20 + i * 40
        rows.append(
            f'<text x="0" y="{y + 17}" font-size="12">{which}</text>'
            f'<text x="{x + step * scale + 6:.1f}" y="{y + 17}" font-size="12">'
            f"{escape(duration(step))}</text>"
        )
        for key, label, colour in _SPLIT:
            share = (1 - idle) if key == "busy" else (metrics[key][which] or 0.0)
            w = step * share * scale
            if w <= 0:
                continue
            rows.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="24" fill="{colour}">'
                f"<title>{escape(label)}: {escape(duration(int(step * share)))}</title></rect>"
            )
            x += w
    legend = "".join(
        f'<rect x="{10 + j * 120}" y="104" width="10" height="10" fill="{c}"/>'
        f'<text x="{24 + j * 120}" y="113" font-size="11">{escape(label)}</text>'
        for j, (_k, label, c) in enumerate(_SPLIT)
    )
    return (
        '<svg role="img" aria-label="step time before and after, split by what the GPU did" '
        'viewBox="0 0 620 120" width="100%" style="max-width:620px" '
        'xmlns="http://www.w3.org/2000/svg">' + "".join(rows) + legend + "</svg>"
    )


def render_html(diff: dict[str, Any]) -> str:
    """The comparison as one self-contained HTML page (escaped, nothing fetched), with the
    comparison's JSON embedded (`script#compare-data`)."""
    from jinja2 import Environment, PackageLoader, select_autoescape
    from markupsafe import Markup

    from traceanalyzer.render.base import script_json, static_text

    env = Environment(
        loader=PackageLoader("traceanalyzer", "render/templates"),
        autoescape=select_autoescape(["html", "j2"]),
    )
    return env.get_template("compare.html.j2").render(
        diff=diff,
        sections=by_section(diff),
        value=value_text,
        change=change_text,
        dur=duration,
        chart=Markup(step_chart(diff)),
        css=Markup(static_text("report.css")),
        data=Markup(script_json(diff)),
    )
