"""Renderer protocol and the atomic writer every renderer goes through."""

from __future__ import annotations

import functools
import io
import os
import sys
import tempfile
from collections.abc import Sequence
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
    place, so a failure never leaves a half-written report. The trace's own files are never
    an output (see `write_text_atomic`)."""
    if path in (None, "-"):
        renderer.render(report, sys.stdout)
        return
    buffer = io.StringIO()
    renderer.render(report, buffer)
    inputs = [report.source["path"], *(r["path"] for r in report.ranks)]
    write_text_atomic(Path(path), buffer.getvalue(), inputs)


def output_target(target: Path, inputs: Sequence[str | Path] = ()) -> tuple[Path, bool]:
    """Where `-o target` writes, and whether through a temporary file renamed into place.

    A symbolic link is written through (the link stays); an existing file that is not a
    regular one (`/dev/null`, a named pipe) is written to directly, never replaced; one of
    the inputs is refused, as are a folder and a missing parent folder (created by nobody
    but the user).
    """
    real = target.resolve() if target.is_symlink() else target
    if real.is_dir():
        raise ReportWriteError(
            "the output is a folder", path=target, hint="give a file name, e.g. report.json"
        )
    if real.exists() and not real.is_file():
        return real, False
    for given in inputs:
        try:
            same = real.exists() and os.path.samefile(real, given)
        except OSError:
            same = False
        if same:
            raise ReportWriteError(
                "the output is one of the inputs: writing it would destroy the trace",
                path=target,
                hint="choose another -o path",
            )
    if not real.parent.is_dir():
        raise ReportWriteError(
            "the output's folder does not exist",
            path=target,
            hint=f"create {real.parent} first, or choose another -o path",
        )
    return real, True


def write_text_atomic(target: Path, text: str, inputs: Sequence[str | Path] = ()) -> None:
    """Write `text` to `target` (see `output_target`) through a temporary file renamed into
    place, or straight into a device or pipe."""
    target, atomic = output_target(target, inputs)
    if not atomic:
        try:
            with target.open("w", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            raise ReportWriteError(
                f"cannot write the output ({exc.strerror})", path=target, hint="check the path"
            ) from exc
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the output ({exc.strerror})", path=target, hint="check the path"
        ) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process umask (read by setting it, then restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
