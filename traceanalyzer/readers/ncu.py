"""Nsight Compute exports -> NcuExport (one row per profiled kernel), beside the trace readers.

Two forms are read:

- `ncu --csv --page raw` (or `ncu --import X.ncu-rep --csv --page raw`): one row per kernel,
  a second row of units, one column per metric; numbers may carry thousands separators
  (`"219,456"`); lines ncu or the program printed before the header (`==PROF==`) are skipped.
  Gzip is read transparently.
- `.ncu-rep` reports, through the Python module `ncu_report` of an Nsight Compute install
  (`extras/python`; `ncu_path` names the install or that folder): `load_report(path)` ->
  ranges -> actions (kernels) -> `metric_by_name(name).value()`.

Values are scaled by their units at this boundary, once: durations to ns (`usecond`,
`msecond`, ...), sizes to bytes (`Kbyte` = 1000 bytes, as ncu's SI prefixes), percentages to
0-1 shares. A counter the export lacks, or whose unit is not understood, is null in every
row and named once in `NcuExport.missing` and `notes`; a value that is not a number (`n/a`)
is null in its row, counted in a note. DRAM bytes come from `dram__bytes_read.sum` and
`dram__bytes_write.sum` where captured; else from the DRAM throughput share, the peak
bandwidth (the export's memory clock x bus width x 2, double data rate) and ncu's own
duration, which the note and `dram_source` say (a share of the busiest DRAM unit, so an
estimate).
"""

from __future__ import annotations

import csv
import gzip
import importlib
import io
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl

from traceanalyzer.errors import ConfigError, TraceFormatError
from traceanalyzer.model.ncu import NCU_KERNEL_COLUMNS, NcuExport
from traceanalyzer.readers.base import GZIP_MAGIC

#: The counters read, by what they become: column -> metric names, first present wins.
DURATION = ("gpu__time_duration.sum",)
DRAM_READ = ("dram__bytes_read.sum",)
DRAM_WRITE = ("dram__bytes_write.sum",)
#: The DRAM throughput share: `dram__throughput` (bytes over the peak) where captured,
#: else `gpu__dram_throughput` (the busiest DRAM unit's share; the default set's).
DRAM_THROUGHPUT = (
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
)
SM_THROUGHPUT = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
#: The Tensor Core pipe: the MMA instruction types' cycles where the export has them (on
#: Hopper `sm__pipe_tensor_cycles_active` also counts the shared pipe: 1.3 % for a random
#: fill that runs no MMA), else the whole tensor pipe.
TENSOR_PIPE_COUNTERS = (
    "sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active.avg"
    ".pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
)
OCCUPANCY = ("sm__warps_active.avg.pct_of_peak_sustained_active",)
WARPS_ACTIVE = ("sm__warps_active.avg.per_cycle_active",)
REGISTERS = ("launch__registers_per_thread",)
SHARED_STATIC = ("launch__shared_mem_per_block_static",)
SHARED_DYNAMIC = ("launch__shared_mem_per_block_dynamic",)
MEMORY_CLOCK_KHZ = ("device__attribute_memory_clock_rate",)
BUS_WIDTH_BITS = ("device__attribute_global_memory_bus_width",)
GRID_DIMS = ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z")
BLOCK_DIMS = ("launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z")

#: column -> (metric names, unit kind): the counters of NcuExport.kernels.
COUNTERS: dict[str, tuple[tuple[str, ...], str]] = {
    "ncu_duration_ns": (DURATION, "time"),
    "dram_read_bytes": (DRAM_READ, "bytes"),
    "dram_write_bytes": (DRAM_WRITE, "bytes"),
    "dram_throughput_share": (DRAM_THROUGHPUT, "percent"),
    "sm_throughput_share": (SM_THROUGHPUT, "percent"),
    "tensor_pipe_share": (TENSOR_PIPE_COUNTERS, "percent"),
    "achieved_occupancy_share": (OCCUPANCY, "percent"),
    "warps_active": (WARPS_ACTIVE, "count"),
    "registers_per_thread": (REGISTERS, "count"),
    "shared_static": (SHARED_STATIC, "bytes"),
    "shared_dynamic": (SHARED_DYNAMIC, "bytes"),
    "memory_clock_khz": (MEMORY_CLOCK_KHZ, "count"),
    "bus_width_bits": (BUS_WIDTH_BITS, "count"),
}
#: The columns a reader of each form gives beside the counters (identity of the kernel).
IDENTITY = ("id", "process", "device", "name", "grid", "block")

#: The CSV's identity columns (`--page raw`).
CSV_IDENTITY = {
    "id": "ID",
    "process": "Process ID",
    "device": "Device",
    "name": "Kernel Name",
    "grid": "Grid Size",
    "block": "Block Size",
}

#: Unit scale factors by kind: time to ns, sizes to bytes (ncu's prefixes are SI: Kbyte =
#: 1000 bytes; a `KiB` form is binary), percentages to shares. A size's unit may be per
#: something (`byte/block`): its first part scales.
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}
_TIME |= {"s": 1e9, "second": 1e9}
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_BINARY = {"ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}


def unit_scale(unit: str | None, kind: str) -> float | None:
    """The factor that turns a value in `unit` into the base unit of `kind` ("time": ns,
    "bytes": bytes, "percent": a 0-1 share, "count": as is); None for a unit not understood.
    An empty unit is the base unit."""
    text = (unit or "").strip()
    if kind == "count":
        return 1.0
    if kind == "percent":
        return 0.01 if text in ("%", "") else None
    if kind == "time":
        return 1.0 if text == "" else _TIME.get(text.lower())
    size = text.split("/", 1)[0].strip().lower()
    if size == "":
        return 1.0
    if m := re.fullmatch(r"(ki|mi|gi|ti)(?:b|byte)", size):
        return _BINARY[m.group(1)]
    if m := re.fullmatch(r"([kmgt]?)(?:b|byte)s?", size):
        return _PREFIX[m.group(1)]
    return None


def read_ncu(path: str | Path, ncu_path: str | Path | None = None) -> NcuExport:
    """Read an Nsight Compute export: a `--page raw` CSV (gzip or not), or an `.ncu-rep`
    through Nsight Compute's `ncu_report` module (from `ncu_path`, the install or its
    `extras/python`, else from the Python path). Raises TraceFormatError for a file that is
    neither, ConfigError where a report needs a module that cannot be found."""
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(
            "no such Nsight Compute export", path=path, hint="check the path given to --ncu"
        )
    with p.open("rb") as fh:
        head = fh.read(4)
    notes: list[str] = []
    if p.suffix.lower() == ".ncu-rep" or (head[:4] == b"NVRP"):
        raw, units = _rep_raw(p, ncu_path)
    else:
        raw, units = _csv_raw(p, notes, gzip=head[:2] == GZIP_MAGIC)
    return _export(str(path), raw, units, notes)


# --- the CSV form


def _csv_text(path: Path, *, gzip_: bool) -> str:
    data = gzip.decompress(path.read_bytes()) if gzip_ else path.read_bytes()
    return data.decode("utf-8", errors="replace")


def _csv_raw(path: Path, notes: list[str], *, gzip: bool) -> tuple[pl.DataFrame, dict[str, str]]:
    """The CSV's identity columns and every counter of `COUNTERS` as text, and the units
    row by column; rows cut short (a file cut off, lines printed among the rows) are left
    out, with a note."""
    try:
        text = _csv_text(path, gzip_=gzip)
    except (OSError, EOFError) as exc:
        raise TraceFormatError(
            f"not a readable gzip file ({exc})", path=path, hint="copy the export again"
        ) from exc
    start = _header_at(text)
    if start is None:
        raise TraceFormatError(
            'not an Nsight Compute CSV export: no header row starting with "ID"',
            path=path,
            hint="export with `ncu --import FILE.ncu-rep --csv --page raw > FILE.csv` (or "
            "profile with `ncu --csv --page raw ...`)",
        )
    reader = csv.reader(io.StringIO(text[start:]))
    header = next(reader)
    if "Metric Name" in header and "Metric Value" in header:
        raise TraceFormatError(
            "an Nsight Compute CSV of the details page (one row per metric): the raw page is "
            "read (one row per kernel, one column per metric)",
            path=path,
            hint="export with `--page raw`: `ncu --import FILE.ncu-rep --csv --page raw`",
        )
    if "Kernel Name" not in header:
        raise TraceFormatError(
            "not an Nsight Compute raw-page CSV: no `Kernel Name` column",
            path=path,
            hint="export with `ncu --import FILE.ncu-rep --csv --page raw > FILE.csv`",
        )
    rows = [r for r in reader if r]
    units: dict[str, str] = {}
    if rows and rows[0] and rows[0][0].strip() == "":  # the units row: its ID cell is empty
        units = {h: u for h, u in zip(header, rows[0], strict=False)}
        rows = rows[1:]
    width = len(header)
    columns = {h: i for i, h in enumerate(header)}
    wanted = [h for h in _wanted_metrics() if h in columns]
    whole = [r for r in rows if len(r) >= width]
    if len(whole) < len(rows):
        notes.append(
            f"{len(rows) - len(whole)} row(s) with fewer than the header's {width} columns "
            "(a file cut off, or lines printed among the rows) left out"
        )
    rows = whole
    raw = pl.DataFrame(
        {
            **{
                key: [r[columns[col]] if col in columns else None for r in rows]
                for key, col in CSV_IDENTITY.items()
            },
            **{m: [r[columns[m]] for r in rows] for m in wanted},
        },
        schema={**dict.fromkeys(IDENTITY, pl.String), **dict.fromkeys(wanted, pl.String)},
    )
    if not units:
        units = {m: "" for m in wanted}
        units["(none)"] = ""
    return raw, units


def _header_at(text: str) -> int | None:
    """The offset of the CSV's header line (`"ID","Process ID",...`), after any lines ncu
    (`==PROF==`) or the program printed before it."""
    m = re.search(r'^"?ID"?\s*,', text, flags=re.MULTILINE)
    return m.start() if m else None


def _wanted_metrics() -> list[str]:
    names: list[str] = []
    for metrics, _ in COUNTERS.values():
        names.extend(metrics)
    return [*names, *GRID_DIMS, *BLOCK_DIMS, "device__attribute_display_name"]


# --- the .ncu-rep form, through Nsight Compute's own module


@contextmanager
def _on_path(folders: list[Path]) -> Iterator[None]:
    added = [str(f) for f in folders if str(f) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for f in added:
            sys.path.remove(f)


def ncu_report_module(ncu_path: str | Path | None, report: Path) -> ModuleType:
    """Nsight Compute's `ncu_report` module: from `ncu_path` (the install, or its
    `extras/python`), else from the Python path; a ConfigError naming `report` and how to
    export CSV instead where it cannot be imported."""
    folders: list[Path] = []
    if ncu_path is not None:
        base = Path(ncu_path)
        folders = [base / "extras" / "python", base]
        if not any((f / "ncu_report.py").is_file() or _has_module(f) for f in folders):
            raise ConfigError(
                f"--ncu-path {ncu_path}: no ncu_report module there (looked in "
                f"{folders[0]} and {folders[1]})",
                path=report,
                hint="give the Nsight Compute install (e.g. /opt/nvidia/nsight-compute/"
                "2025.3.1), or export CSV: `ncu --import "
                f"{report.name} --csv --page raw > {report.stem}.csv` and pass that to --ncu",
            )
    if ncu_path is not None:  # the install named, not one imported before
        sys.modules.pop("ncu_report", None)
    try:
        with _on_path(folders):
            return importlib.import_module("ncu_report")
    except ImportError as exc:
        raise ConfigError(
            "an .ncu-rep report is read through Nsight Compute's Python module ncu_report, "
            f"which could not be imported ({exc})",
            path=report,
            hint="give --ncu-path /opt/nvidia/nsight-compute/<version>, or export CSV: "
            f"`ncu --import {report.name} --csv --page raw > {report.stem}.csv` and pass "
            "that to --ncu",
        ) from exc


def _has_module(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("ncu_report*"))


def _rep_raw(path: Path, ncu_path: str | Path | None) -> tuple[pl.DataFrame, dict[str, str]]:
    """Every action (kernel) of the report, as `_csv_raw` gives a CSV's rows: identity and
    counters (values as text), and each counter's unit."""
    module = ncu_report_module(ncu_path, path)
    try:
        context = module.load_report(str(path))
    except Exception as exc:  # the module's own errors: a file it cannot read
        raise TraceFormatError(
            f"Nsight Compute's ncu_report could not load the report ({exc})",
            path=path,
            hint="open it in Nsight Compute to check it, or export CSV with "
            "`ncu --import FILE.ncu-rep --csv --page raw`",
        ) from exc
    wanted = _wanted_metrics()
    columns: dict[str, list[str | None]] = {k: [] for k in (*IDENTITY, *wanted)}
    units: dict[str, str] = {}
    base = getattr(getattr(module, "IAction", None), "NameBase_DEMANGLED", None)
    n = 0
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            name = action.name(base) if base is not None else action.name()
            columns["id"].append(str(n))
            columns["process"].append(None)
            columns["name"].append(str(name))
            for m in wanted:
                metric = action.metric_by_name(m)
                value = None if metric is None else metric.value()
                unit = "" if metric is None else _unit_of(metric)
                # to ncu's base unit here, action by action (a report's units may differ
                # between actions); `_export` scales from the base units on
                kind = _KIND_OF.get(m, "count")
                factor = unit_scale(unit, kind)
                if factor is None:
                    units.setdefault(m, unit)  # not understood: `_export` leaves it out
                    factor = 1.0
                else:
                    factor /= unit_scale(_BASE_UNIT[kind], kind) or 1.0
                if value is not None and factor != 1.0:
                    value = float(value) * factor
                columns[m].append(None if value is None else str(value))
            device = action.metric_by_name("launch__device_id")
            columns["device"].append(None if device is None else str(device.value()))
            columns["grid"].append(_dims(columns, GRID_DIMS))
            columns["block"].append(_dims(columns, BLOCK_DIMS))
            n += 1
    present = [m for m in wanted if any(v is not None for v in columns[m])]
    raw = pl.DataFrame(
        {k: columns[k] for k in (*IDENTITY, *present)},
        schema=dict.fromkeys((*IDENTITY, *present), pl.String),
    )
    base = {m: _BASE_UNIT[_KIND_OF.get(m, "count")] for m in present}
    return raw, {m: units.get(m, base[m]) for m in present}


def _unit_of(metric: Any) -> str:
    unit = getattr(metric, "unit", None)
    return str(unit()) if callable(unit) else ""


#: The base unit of each kind, as ncu names it.
_BASE_UNIT = {"time": "ns", "bytes": "byte", "percent": "%", "count": ""}

#: The unit kind of each metric read (COUNTERS' by metric name).
_KIND_OF = {m: kind for metrics, kind in COUNTERS.values() for m in metrics}


def _dims(columns: Mapping[str, list[str | None]], names: tuple[str, ...]) -> str | None:
    """`(x, y, z)` from the last action's launch dimensions (None where one is missing)."""
    values = [columns[n][-1] for n in names]
    if any(v is None for v in values):
        return None
    return "(" + ", ".join(str(int(float(str(v)))) for v in values) + ")"


# --- the common part: counters scaled, DRAM bytes, notes


def _number(column: str) -> pl.Expr:
    """A column of text numbers (`"219,456"`, `"1.27"`, `"n/a"`) as Float64, null where it is
    not a number."""
    return pl.col(column).str.strip_chars().str.replace_all(",", "").cast(pl.Float64, strict=False)


def _dims_text(column: str) -> pl.Expr:
    """`(2, 66, 1)` -> `2,66,1`; null where not three integers."""
    found = pl.col(column).str.extract_all(r"\d+")
    return pl.when(found.list.len() == 3).then(found.list.join(","))


def _export(
    path: str, raw: pl.DataFrame, units: Mapping[str, str], read_notes: list[str]
) -> NcuExport:
    """The NcuExport of a raw frame (identity and counters as text) and its units."""
    notes = list(read_notes)
    present: list[str] = []
    missing: list[str] = []
    scaled: dict[str, pl.Expr] = {}
    bad: list[str] = []
    for column, (metrics, kind) in COUNTERS.items():
        metric = next((m for m in metrics if m in raw.columns), None)
        if metric is None:
            scaled[column] = pl.lit(None, pl.Float64)
            if column not in _OPTIONAL:
                missing.append(metrics[0])
            continue
        factor = unit_scale(units.get(metric), kind)
        if factor is None:
            notes.append(
                f"the unit {units.get(metric)!r} of {metric} is not understood: the counter "
                "is left out"
            )
            missing.append(metric)
            scaled[column] = pl.lit(None, pl.Float64)
            continue
        present.append(metric)
        value = _number(metric)
        not_numbers = raw.select(
            (value.is_null() & pl.col(metric).is_not_null() & (pl.col(metric) != "")).sum()
        ).item()
        if not_numbers:
            bad.append(f"{metric} ({not_numbers})")
        scaled[column] = value * factor
    if "(none)" in units:
        notes.append("the export has no units row: values are taken in ncu's base units")
    if bad:
        notes.append("values that are not numbers, left out: " + ", ".join(bad))
    frame = raw.select(
        id=_number("id").cast(pl.Int64),
        process=_number("process").cast(pl.Int64),
        device=_number("device").cast(pl.Int32),
        name=pl.col("name"),
        grid=_dims_text("grid"),
        block=_dims_text("block"),
        **scaled,
    )
    frame = _with_dram_bytes(frame)
    frame = frame.sort("id", nulls_last=True, maintain_order=True).with_row_index("launch")
    kernels = frame.select(
        pl.col(c).cast(dtype) if c in frame.columns else pl.lit(None, dtype).alias(c)
        for c, dtype in NCU_KERNEL_COLUMNS.items()
    )
    notes.extend(_dram_notes(kernels, missing))
    if missing:
        notes.insert(
            0,
            "counters missing from the export: " + ", ".join(missing),
        )
    name = None
    if "device__attribute_display_name" in raw.columns:
        names = raw["device__attribute_display_name"].drop_nulls().unique().sort()
        name = names[0] if names.len() else None
    return NcuExport(
        path=path,
        kernels=kernels,
        present=tuple(present),
        missing=tuple(missing),
        notes=tuple(notes),
        device_name=name,
    )


#: Counters whose absence is no loss worth a note (the peak's attributes are only needed
#: where DRAM bytes are derived; the shared memory split is optional).
_OPTIONAL = {"memory_clock_khz", "bus_width_bits", "shared_static", "shared_dynamic"}


def _with_dram_bytes(frame: pl.DataFrame) -> pl.DataFrame:
    """dram_bytes and dram_source from the byte counters where both are there, else from
    the throughput share x the peak (memory clock x bus width x 2 / 8 bytes per second) x
    ncu's duration; registers and shared memory as integers; the peak kept for the join."""
    counted = pl.col("dram_read_bytes").is_not_null() & pl.col("dram_write_bytes").is_not_null()
    peak = pl.col("memory_clock_khz") * 1e3 * pl.col("bus_width_bits") / 8 * 2
    derived = pl.col("dram_throughput_share") * peak * pl.col("ncu_duration_ns") / 1e9
    return frame.with_columns(
        dram_peak_bytes_per_s=peak,
        dram_bytes=pl.when(counted)
        .then(pl.col("dram_read_bytes") + pl.col("dram_write_bytes"))
        .otherwise(derived)
        .round(0),
        dram_source=pl.when(counted)
        .then(pl.lit("counters"))
        .when(derived.is_not_null())
        .then(pl.lit("throughput")),
        shared_mem_bytes=pl.when(
            pl.col("shared_static").is_not_null() | pl.col("shared_dynamic").is_not_null()
        ).then(pl.col("shared_static").fill_null(0) + pl.col("shared_dynamic").fill_null(0)),
        dram_read_bytes=pl.col("dram_read_bytes").round(0),
        dram_write_bytes=pl.col("dram_write_bytes").round(0),
        ncu_duration_ns=pl.col("ncu_duration_ns").round(0),
        registers_per_thread=pl.col("registers_per_thread").round(0),
    )


def _dram_notes(kernels: pl.DataFrame, missing: list[str]) -> list[str]:
    """How the DRAM bytes were obtained, said once."""
    sources = kernels["dram_source"].drop_nulls().unique().sort().to_list()
    notes: list[str] = []
    if "throughput" in sources:
        notes.append(
            "DRAM bytes derived from the DRAM throughput share x the peak bandwidth x ncu's "
            "own duration (dram__bytes_read.sum and dram__bytes_write.sum were not "
            "captured): estimates; profile with --metrics dram__bytes_read.sum,"
            "dram__bytes_write.sum for counted bytes"
        )
    elif not sources and kernels.height:
        notes.append(
            "no DRAM bytes: the export has neither dram__bytes_read/write.sum nor a DRAM "
            "throughput share with the device's memory clock and bus width"
        )
    return notes
