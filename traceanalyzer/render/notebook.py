"""The report in a notebook cell: the HTML page's own verdict, diagnoses and timeline.

`Analysis._repr_html_` (traceanalyzer.notebook) shows these. They are cut out of the page the
HTML renderer writes (`<p id="verdict">`, `<section id="diagnoses">`, `<section
id="timeline">`), not drawn a second time, with the page's style scoped to the cell (every
selector under `.traceanalyzer`) so that it cannot restyle the notebook around it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from traceanalyzer.render.base import static_text
from traceanalyzer.render.html import HtmlRenderer
from traceanalyzer.report import Report

#: The parts of the page a cell shows, by their opening tags.
PARTS: tuple[str, ...] = ('<p id="verdict"', '<section id="diagnoses">', '<section id="timeline">')

_SCOPE = ".traceanalyzer"


def scoped_css(css: str, scope: str = _SCOPE) -> str:
    """`css` with every rule's selectors put under `scope` (`:root`, `html` and `body` become
    the scope itself); @-rules' inner rules likewise."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)

    def one(selector: str) -> str:
        s = selector.strip()
        if s in (":root", "html", "body", "*"):
            return scope if s != "*" else f"{scope} *"
        return f"{scope} {s}"

    def rule(m: re.Match[str]) -> str:
        head = m.group(1)
        if head.lstrip().startswith("@") or re.fullmatch(r"\s*(from|to|\d+%)\s*", head):
            return m.group(0)
        return ", ".join(one(s) for s in head.split(",")) + " {"

    return re.sub(r"([^{}@]+)\{", rule, css)


def _section(page: str, opening: str) -> str:
    """The element of `page` that starts with `opening`, up to its closing tag."""
    start = page.index(opening)
    tag = opening[1:].split()[0].rstrip(">")
    close = f"</{tag}>"
    if tag == "p":
        return page[start : page.index(close, start) + len(close)]
    depth, i = 0, start
    pattern = re.compile(rf"<{tag}\b|</{tag}>")
    for m in pattern.finditer(page, start):
        depth += 1 if m.group(0) != close else -1
        i = m.end()
        if depth == 0:
            break
    return page[start:i]


def cell_html(report: Report) -> str:
    """The verdict, the diagnoses and the timeline of the report's HTML page, in one `<div>`
    with the page's style scoped to it."""
    buf = io.StringIO()
    HtmlRenderer().render(report, buf)
    page = buf.getvalue()
    parts = [_section(page, p) for p in PARTS if p in page]
    return (
        f'<div class="traceanalyzer"><style>{scoped_css(static_text("report.css"))}</style>'
        + "\n".join(parts)
        + "</div>"
    )


def table_html(rows: Sequence[Mapping[str, Any]], columns: Iterable[str]) -> str:
    """A plain HTML table of `rows` (the findings of an analysis, in a cell)."""
    cols = list(columns)
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
