"""Renderers: Report -> terminal text, JSON, Markdown or a self-contained HTML page. Pick by
`--format` or by the output suffix."""

from __future__ import annotations

from typing import TextIO

from traceanalyzer.render.base import Renderer, write_report
from traceanalyzer.render.json_report import JsonRenderer
from traceanalyzer.render.markdown import MarkdownRenderer
from traceanalyzer.render.terminal import TerminalRenderer
from traceanalyzer.report import Report


class _Html:
    """The HTML renderer, imported on first use: matplotlib and jinja2 take most of a second
    to import, which every other command and format would pay for nothing."""

    name = "html"
    suffix = ".html"

    def render(self, report: Report, out: TextIO) -> None:
        from traceanalyzer.render.html import HtmlRenderer

        HtmlRenderer().render(report, out)


RENDERERS: dict[str, Renderer] = {
    "terminal": TerminalRenderer(),
    "json": JsonRenderer(),
    "md": MarkdownRenderer(),
    "html": _Html(),
}


def pick(fmt: str | None, out: str | None) -> Renderer:
    """The renderer named by `fmt`, else the one whose suffix `out` ends with, else terminal."""
    if fmt:
        return RENDERERS[fmt]
    if out and out != "-":
        for r in RENDERERS.values():
            if out.lower().endswith(r.suffix):
                return r
    return RENDERERS["terminal"]


__all__ = ["RENDERERS", "pick", "write_report"]
