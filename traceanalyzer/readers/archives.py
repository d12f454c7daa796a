"""Finding the runs in folders, globs and archives, for batch analysis.

A run is one trace file, or one folder holding the per-rank files of a job (two or more files
whose names carry a rank: `rank0.json`, `worker_3.pt.trace.json.gz`). Folders are searched
recursively; `.tar`, `.tar.gz`/`.tgz` and `.zip` archives are unpacked into a scratch folder
(member paths are checked: nothing is written outside it) and searched the same way. Inputs
are never modified.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shutil
import tarfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from traceanalyzer.errors import TraceFormatError
from traceanalyzer.readers.base import GZIP_MAGIC, SQLITE_MAGIC

_TRACE_NAME = re.compile(r"\.(?:json|json\.gz|sqlite|sqlite\.gz|nsys-rep|qdrep)$", re.IGNORECASE)
#: Nsight files are one run each, whatever their names say (`rank0.nsys-rep`).
_NSYS_NAME = re.compile(r"\.(?:sqlite|sqlite\.gz|nsys-rep|qdrep)$", re.IGNORECASE)
_RANK_NAME = re.compile(r"(?:rank|worker)[-_]?\d+", re.IGNORECASE)
_ARCHIVE = re.compile(r"\.(?:tar|tar\.gz|tgz|zip)$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Run:
    """One run to analyse: `path` is a file or a folder of rank files; `label` names it in
    the summary (relative to the argument it came from, `archive.tar.gz!inner/path` inside
    an archive)."""

    path: Path
    label: str
    error: str | None = None  # set when the run could not even be unpacked


def _looks_like_trace(path: Path) -> bool:
    if _TRACE_NAME.search(path.name):
        return True
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    return head.startswith(GZIP_MAGIC) or head.startswith(SQLITE_MAGIC)


def _runs_in_folder(folder: Path, prefix: str) -> list[Run]:
    """Runs under `folder`: rank-file folders as one run each, other trace files one by one."""
    runs: list[Run] = []
    files = sorted(p for p in folder.iterdir() if p.is_file() and _looks_like_trace(p))
    ranked = [p for p in files if _RANK_NAME.search(p.name) and not _NSYS_NAME.search(p.name)]
    if len(ranked) >= 2:
        runs.append(Run(folder, prefix.rstrip("/") or folder.name))
        files = [p for p in files if p not in ranked]
    runs += [Run(p, f"{prefix}{p.name}") for p in files]
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        runs += _runs_in_folder(sub, f"{prefix}{sub.name}/")
    return runs


#: The most bytes one archive may unpack to (`batch --max-unpacked`): a 3 MB zip of 3 GB of
#: whitespace is a bomb, not a run.
DEFAULT_MAX_UNPACKED = 16 << 30
#: The most an archive may expand relative to its own size. Trace JSON compresses about
#: 10x (a trace of one repeated kernel about 30x); a zip bomb, 1000x and more.
MAX_EXPANSION = 250


def _safe_extract(archive: Path, dest: Path, max_unpacked: int = DEFAULT_MAX_UNPACKED) -> None:
    """Unpack an archive into `dest`, refusing members that would land outside it, and
    archives that unpack to more than `max_unpacked` bytes or `MAX_EXPANSION` times their size.

    The member sizes are checked as the archive is read, before each member is written: a
    zip member and a tar member never unpack to more than the size their header declares.
    """
    root = dest.resolve()
    limit = min(max_unpacked, MAX_EXPANSION * max(archive.stat().st_size, 1 << 20))
    total = 0

    def count(size: int) -> None:
        nonlocal total
        total += size
        if total > limit:
            raise TraceFormatError(
                f"the archive unpacks to more than {limit / 2**30:.1f} GiB "
                f"({MAX_EXPANSION}x its size at most, {max_unpacked / 2**30:.1f} GiB at most)",
                path=archive,
                hint="unpack it yourself if it is a real run, or raise batch --max-unpacked",
            )

    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    if not (root / info.filename).resolve().is_relative_to(root):
                        raise TraceFormatError(
                            f"archive member {info.filename!r} escapes the archive",
                            path=archive,
                            hint="refusing to unpack it",
                        )
                    count(info.file_size)
                zf.extractall(root)
            return
        with tarfile.open(archive) as tf:
            for member in tf:
                count(member.size)
                tf.extract(member, root, filter="data")  # no absolute paths, links out, devices
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise TraceFormatError(
            f"cannot unpack the archive ({exc})",
            path=archive,
            hint="is it a complete .tar, .tar.gz or .zip?",
        ) from exc


def discover(args: list[str], scratch: Path, max_unpacked: int = DEFAULT_MAX_UNPACKED) -> list[Run]:
    """Every run named by `args` (files, folders, glob patterns, archives), each with a label
    of its own (see `unique_labels`); archives unpack into `scratch` (see `_safe_extract`)."""
    runs: list[Run] = []
    sources: list[Path] = []
    for arg in args:
        matches = [Path(p) for p in sorted(glob.glob(arg))] if glob.has_magic(arg) else [Path(arg)]
        if not matches:
            raise TraceFormatError(
                "no file matches the pattern",
                path=arg,
                hint="check the glob (quote it to let traceanalyzer expand it)",
            )
        for path in matches:
            if not path.exists():
                raise TraceFormatError("no such file or folder", path=path, hint="check the path")
            if path.is_dir():
                runs += _runs_in_folder(path, f"{path.name}/")
            elif _ARCHIVE.search(path.name):
                dest = scratch / f"archive{len(runs)}_{path.name}"
                dest.mkdir(parents=True)
                try:
                    _safe_extract(path, dest, max_unpacked)
                except TraceFormatError as exc:  # a bad archive is a failed run, not the end
                    shutil.rmtree(dest, ignore_errors=True)  # free what it unpacked at once
                    runs.append(Run(path, path.name, error=exc.one_line()))
                    sources.append(path)
                    continue
                runs += [Run(r.path, f"{path.name}!{r.label}") for r in _runs_in_folder(dest, "")]
            else:
                runs.append(Run(path, path.name))
            sources += [path] * (len(runs) - len(sources))
    return unique_labels(runs, sources)


def unique_labels(runs: list[Run], sources: list[Path]) -> list[Run]:
    """`runs` with labels that name one run each: runs whose labels collide (`a/trace.json.gz`
    and `b/trace.json.gz` are both `trace.json.gz`) are labelled by their argument's folder
    relative to the common parent of those arguments' folders, then numbered (`#2`) if they
    still collide (the same file given twice)."""
    counts = Counter(r.label for r in runs)
    clashing = {label for label, n in counts.items() if n > 1}
    parents = [src.resolve().parent for r, src in zip(runs, sources, strict=True)
               if r.label in clashing]  # fmt: skip
    common = Path(os.path.commonpath(parents)) if parents else None
    out: list[Run] = []
    seen: set[str] = set()
    for run, src in zip(runs, sources, strict=True):
        label = run.label
        if label in clashing and common is not None:
            where = os.path.relpath(src.resolve().parent, common)
            label = label if where == "." else f"{Path(where).as_posix()}/{label}"
        base, n = label, 2
        while label in seen:
            label, n = f"{base}#{n}", n + 1
        seen.add(label)
        out.append(dataclasses.replace(run, label=label))
    return out
