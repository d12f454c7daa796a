"""Renderer protocol and the atomic writer every renderer goes through."""

from __future__ import annotations

import functools
import io
import os
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TextIO

import orjson

from traceanalyzer.errors import ReportWriteError
from traceanalyzer.report import Report


class Renderer(Protocol):
    """Turns a Report into text on a stream."""

    name: str
    suffix: str

    def render(self, report: Report, out: TextIO) -> None:
        """Write the whole report to `out`."""
        ...


def script_json(value: Any) -> str:
    """`value` as JSON for a `<script type="application/json">` block of an HTML page: `<`,
    `>` and `&` as \\u escapes, so no string in it can close the tag or open a comment."""
    text = orjson.dumps(value).decode("utf-8")
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@functools.cache
def static_text(name: str) -> str:
    """A file of `render/static` (CSS, script) as text, read once per process."""
    return resources.files("traceanalyzer.render").joinpath("static", name).read_text("utf-8")


def write_report(report: Report, renderer: Renderer, path: str | None) -> None:
    """Render to stdout (`None` or `-`), or to `path` atomically: a temp file renamed into
    place, so a failure never leaves a half-written report."""
    if path in (None, "-"):
        renderer.render(report, sys.stdout)
        return
    buffer = io.StringIO()
    renderer.render(report, buffer)
    write_text_atomic(Path(path), buffer.getvalue())


def write_text_atomic(target: Path, text: str) -> None:
    """Write `text` to `target` through a temporary file renamed into place."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the output ({exc.strerror})", path=target, hint="check the path"
        ) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask (read by setting it, then restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
