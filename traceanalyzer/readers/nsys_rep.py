"""Nsight Systems reports (`.nsys-rep`, and the older `.qdrep`): exported to SQLite, then read.

A report file is Nsight's own binary format; only `nsys export` reads it. When an `nsys`
binary is found (`--nsys PATH`, which sets `NSYS`; the `NSYS` environment variable; `nsys` on
PATH; the usual install folders), the report is exported into a temporary folder (never
beside the input) and the export is read by the SQLite reader. Otherwise the error gives the
command to run. `export_dir` keeps exports by content hash, so that batch exports a report
once however often it is analysed again.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from traceanalyzer.errors import TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import Timeline

#: File suffixes of Nsight Systems reports (`.qdrep` before 2021.4).
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
#: Where Nsight Systems installs itself when it is not on PATH (newest version first).
INSTALL_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)


def is_report(path: Path) -> bool:
    """An Nsight Systems report file, judged by its suffix (its format is Nsight's own)."""
    return path.is_file() and path.name.lower().endswith(REPORT_SUFFIXES)


def find_nsys() -> str | None:
    """The `nsys` binary to export with: `NSYS`, then PATH, then the usual install folders."""
    named = os.environ.get("NSYS")
    if named:
        return named
    on_path = shutil.which("nsys")
    if on_path:
        return on_path
    for pattern in INSTALL_GLOBS:
        found = sorted(glob.glob(pattern), reverse=True)
        if found:
            return found[0]
    return None


def _export_command(nsys: str, report: Path, out: Path) -> list[str]:
    return [
        nsys,
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        "--output",
        str(out),
        str(report),
    ]


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def read_report(
    path: Path, read_sqlite: Callable[[Path], Timeline], export_dir: Path | None = None
) -> Timeline:
    """Export `path` to SQLite with nsys and read the export with `read_sqlite`."""
    nsys = find_nsys()
    if nsys is None:
        raise UnsupportedTraceError(
            "an Nsight Systems report needs `nsys` to export it, and none was found",
            path=path,
            hint=f"run `nsys export --type sqlite --output {path.stem}.sqlite {path}` and "
            f"report on {path.stem}.sqlite, or give --nsys PATH (or NSYS=PATH)",
        )
    if export_dir is not None:
        kept = export_dir / f"{_digest(path)}.sqlite"
        if not kept.is_file():
            export_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="traceanalyzer-", dir=export_dir) as tmp:
                out = Path(tmp) / "export.sqlite"
                _export(nsys, path, out)
                out.replace(kept)  # whole or not at all: a killed export leaves no entry
        return read_sqlite(kept)
    with tempfile.TemporaryDirectory(prefix="traceanalyzer-") as tmp:
        out = Path(tmp) / f"{path.stem}.sqlite"
        _export(nsys, path, out)
        return read_sqlite(out)


def _export(nsys: str, report: Path, out: Path) -> None:
    """Run `nsys export`; a failure becomes one clear error naming the report."""
    try:
        done = subprocess.run(
            _export_command(nsys, report, out),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise TraceFormatError(
            f"cannot run nsys ({nsys}: {exc.strerror or exc})",
            path=report,
            hint="give the nsys binary with --nsys PATH (or NSYS=PATH)",
        ) from exc
    if done.returncode != 0 or not out.is_file():
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        why = said[-1] if said else f"exit status {done.returncode}"
        raise TraceFormatError(
            f"nsys could not export the report ({why})",
            path=report,
            hint="check that the report is complete and that this nsys is as new as the one "
            "that recorded it",
        )
