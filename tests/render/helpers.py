"""Shared by the HTML tests: a trace whose names try to inject markup, and page checks."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from tests.builders import HEADER, kernel, launch, step, write_trace
from traceanalyzer import api
from traceanalyzer.render.html import HtmlRenderer
from traceanalyzer.report import Report

SCRIPT_NAME = "<script>alert(1)</script>"
IMG_NAME = '"><img src=x onerror=alert(2)>'
GPU_NAME = "<script>alert(3)</script> GPU"
#: A file name that tries to break out of an attribute and out of text.
EVIL_FILE = 'run"><svg onload=alert(4)>.json'

EVIL_EVENTS: list[dict[str, Any]] = [
    step(1, 100, 100),
    launch(110, 2, corr=1),
    kernel(150, 30, SCRIPT_NAME, corr=1),
    step(2, 200, 100),
    launch(210, 2, corr=2),
    kernel(260, 40, IMG_NAME, corr=2),
    step(3, 300, 100),
    launch(305, 2, corr=3),
    kernel(320, 60, "$x^2$ sm90_gemm", corr=3),
    launch(330, 2, corr=4),
    kernel(390, 5, "ncclKernel_AllReduce_RING_LL_Sum_float", corr=4),
]

URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "poster", "srcset", "data"}
CSS_URL = re.compile(r"url\(\s*['\"]?\s*([^)'\"]*)", re.IGNORECASE)


def _local(ref: str) -> bool:
    ref = ref.strip()
    return ref.startswith("#") or ref.lower().startswith("data:")


def evil_trace(tmp_path: Path) -> Path:
    """A small trace whose kernel, GPU and file names carry markup."""
    header = {**HEADER, "deviceProperties": [{**HEADER["deviceProperties"][0], "name": GPU_NAME}]}
    return write_trace(tmp_path / EVIL_FILE, EVIL_EVENTS, header=header)


def render(report: Report) -> str:
    """The page as text."""
    import io

    buf = io.StringIO()
    HtmlRenderer().render(report, buf)
    return buf.getvalue()


def page_for(path: Path | str) -> str:
    """Run the pipeline on `path` and render the page."""
    return render(api.report(path))


def external_references(page: str) -> list[str]:
    """Every src/href-like attribute and CSS url() that points anywhere but into the page or
    a data: URI (attributes as the browser's parser sees them, not text that looks alike)."""
    tags = parse(page)
    refs = [
        f"{tag} {name}={value}"
        for tag, attrs in tags.tags
        for name, value in attrs.items()
        if name in URL_ATTRS and value is not None and not _local(value)
    ]
    styles = tags.styles + [a["style"] or "" for _t, a in tags.tags if "style" in a]
    refs += [f"url({u})" for css in styles for u in CSS_URL.findall(css) if not _local(u)]
    return refs


class Tags(HTMLParser):
    """Collects every start tag with its attributes, style text, and the report-data text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.data: str = ""
        self.styles: list[str] = []
        self._in_data = False
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_data = tag == "script" and dict(attrs).get("id") == "report-data"
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_data = self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_data:
            self.data += data
        if self._in_style:
            self.styles.append(data)


def parse(page: str) -> Tags:
    """Parse the page with the standard library's HTML parser."""
    tags = Tags()
    tags.feed(page)
    tags.close()
    return tags
