"""GPU metrics of an Nsight Systems export (`nsys profile --gpu-metrics-devices=...`).

Pipeline position: helper of `readers/nsys_sqlite.py` (file -> this module -> the timeline's
`gpu_metrics` table, GPU_METRIC_SCHEMA). Nsight samples each GPU's hardware counters every
~100 µs (10 kHz by default) and exports them long: `GPU_METRICS` holds one row per (sample,
counter): timestamp, typeId, metricId, integer value; `TARGET_INFO_GPU_METRICS` names each
(typeId, metricId) ("SMs Active [Throughput %]", "GPC Clock Frequency [MHz]", ...).

The format, as exported by nsys 2024-2025 (checked on an H200 capture):

- the GPU is the typeId's low byte (`<hw:8><vm:8><source:16><tag:24><GPU id:8>`, as NVIDIA's
  own recipes decode it): the GPU's id in TARGET_INFO_GPU, which `nsys_schema_probe.gpu_ids`
  maps to each process's CUDA ordinal; GPUs sampled that ran none of the trace's work (all
  GPUs of the node, with `--gpu-metrics-devices=all`) are left out;
- a sample's timestamp is the start of the period it averages over (a kernel's first sample
  is the one whose period starts before it), in the same ns clock as the kernels, and is
  negative for samples taken before the session's zero;
- throughputs are integer percentages (made 0-1 shares here); the clock's name says MHz but
  its values are Hz (a value below 100 000 is taken to be MHz, as an older export may write);
- metric ids are not stable across exports or GPUs: names are matched per typeId.

How it stays bounded: SQL reads only the wanted counters' rows, in rowid ranges printed as
CSV (the reader's `fetch`), and polars pivots them to one row per sample; no Python object is
made per sample.

What is wrong with the metrics is said once, in notes (the report's data-quality notes): a
device that ran work but has no samples, a metric set without a counter the figures need,
values out of range (read as unknown). A capture without GPU metrics gives an empty table and
no note.
"""

from __future__ import annotations

import re
import sqlite3

import polars as pl

from traceanalyzer.model import GPU_METRIC_SCHEMA
from traceanalyzer.readers import nsys_schema_probe as sp

SAMPLES = "GPU_METRICS"
NAMES = "TARGET_INFO_GPU_METRICS"

#: Column of GPU_METRIC_SCHEMA -> the names of the counters it is read from, as nsys has
#: called them (matched case-insensitively against the whole name, units in brackets aside).
#: A column fed by several counters of one sample (NVLink's requests and responses) is
#: their sum.
METRIC_NAMES: dict[str, str] = {
    "gpc_clock_hz": r"GPC Clock Frequency",
    "gr_active_share": r"GR Active",
    "sm_active_share": r"SMs? Active",
    "sm_issue_share": r"SM Issue",
    # Turing names its tensor pipe counter with FP16's
    "tensor_active_share": r"Tensor Active(?: / FP16 Active)?",
    "dram_read_share": r"DRAM Read Bandwidth",
    "dram_write_share": r"DRAM Write Bandwidth",
    "pcie_rx_share": r"PCIe RX Throughput",
    "pcie_tx_share": r"PCIe TX Throughput",
    # one counter, or the user data of requests and responses (protocol bytes left out)
    "nvlink_rx_share": r"NVLink RX(?: Bandwidth| Throughput| Requests User Data"
    r"| Responses User Data)?",
    "nvlink_tx_share": r"NVLink TX(?: Bandwidth| Throughput| Requests User Data"
    r"| Responses User Data)?",
}
_UNITS = re.compile(r"\s*\[[^\]]*\]\s*$")
_PATTERNS = {col: re.compile(rf"(?i)^(?:{pat})$") for col, pat in METRIC_NAMES.items()}

#: The counters the figures rest on: a sampled device whose metric set lacks one is noted.
#: (PCIe and NVLink are shown where sampled; a GPU without NVLink has no such counters.)
NEEDED = ("gpc_clock_hz", "sm_active_share", "tensor_active_share", "dram_read_share",
          "dram_write_share")  # fmt: skip
#: Words for the notes.
NEEDED_WORDS = {
    "gpc_clock_hz": "GPC Clock Frequency",
    "sm_active_share": "SMs Active",
    "tensor_active_share": "Tensor Active",
    "dram_read_share": "DRAM Read Bandwidth",
    "dram_write_share": "DRAM Write Bandwidth",
}
#: The columns read, per table (nsys 2023.4 on; the oldest exports keep GPU metrics in
#: GENERIC_EVENTS only, which is not read).
NEEDED_COLUMNS: dict[str, tuple[str, ...]] = {
    SAMPLES: ("typeId", "timestamp", "metricId", "value"),
    NAMES: ("typeId", "metricId", "metricName"),
}
#: A clock reading below this is in MHz (the name's unit), not Hz.
MHZ_BELOW = 100_000
#: A gap between samples longer than this many sampling periods is a hole: the sample
#: before it covers one period, not the hole.
HOLE_PERIODS = 2

Device = tuple[int, int]  # (rank, CUDA ordinal)


def column_of(metric_name: str) -> str | None:
    """The GPU_METRIC_SCHEMA column a counter named `metric_name` is read into, if any."""
    bare = _UNITS.sub("", metric_name.strip())
    return next((col for col, pat in _PATTERNS.items() if pat.match(bare)), None)


def read_gpu_metrics(
    con: sqlite3.Connection, pr: sp.Probe, devices: dict[Device, int]
) -> tuple[pl.DataFrame, list[str]]:
    """The samples of the GPUs that ran the trace's work (GPU_METRIC_SCHEMA, sorted by
    rank, device and time) and the notes on what is missing or wrong.

    `devices`: each (rank, CUDA ordinal) that ran GPU work -> the GPU's id in the export
    (`nsys_schema_probe.gpu_ids`).
    """
    empty = pl.DataFrame(schema=GPU_METRIC_SCHEMA)
    if not pr.has(SAMPLES) or not devices:
        return empty, []
    if not pr.has(NAMES):
        return empty, [
            f"GPU metrics: the export has {SAMPLES} but no {NAMES} naming the counters; "
            "no GPU-metric figure is shown"
        ]
    lacking = [f"{t}.{c}" for t, cols in NEEDED_COLUMNS.items() for c in cols if not pr.has(t, c)]
    if lacking:
        return empty, [
            f"GPU metrics: the export's tables lack {', '.join(lacking)} (an Nsight layout this "
            "reader does not know); no GPU-metric figure is shown"
        ]
    names = _names(con)
    wanted = names.filter(pl.col("column").is_not_null())
    if wanted.height == 0:
        return empty, [
            "GPU metrics: none of the sampled counters is one the figures read (SMs Active, "
            "Tensor Active, DRAM bandwidth, GPC clock); no GPU-metric figure is shown"
        ]
    raw = _rows(con, sorted(set(wanted["metricId"].to_list())))
    if raw.height == 0:
        return empty, [f"GPU metrics: the export's {SAMPLES} table holds no samples"]
    samples, out_of_range = _pivot(raw, wanted, devices)
    notes = _notes(samples, wanted, devices)
    if out_of_range:
        notes.append(
            f"GPU metrics: {out_of_range} counter value(s) out of range (a share outside "
            "0-100 %, a clock at or below zero) are read as unknown"
        )
    return samples, notes


#: Rows per query of GPU_METRICS (one CSV blob of about 8 MB).
CHUNK_ROWS = 1 << 18
_RAW = pl.Schema(
    {"type_id": pl.Int64, "start_ns": pl.Int64, "metric_id": pl.Int64, "value": pl.Int64}
)


def _rows(con: sqlite3.Connection, metric_ids: list[int]) -> pl.DataFrame:
    """type_id, start_ns, metric_id, value of the samples of `metric_ids`: SQLite prints
    each rowid range as one CSV blob (integers only), polars parses it."""
    ids = ",".join(str(int(i)) for i in metric_ids)
    sql = (
        "SELECT CAST(group_concat(printf('%d,%d,%d,%d', typeId, timestamp, metricId, "
        f"round(value)), char(10)) AS BLOB) FROM {SAMPLES} WHERE rowid >= ? AND rowid < ? "
        f"AND metricId IN ({ids}) AND typeof(value) IN ('integer', 'real') "
        "AND typeof(timestamp) = 'integer'"
    )
    lo, hi = con.execute(f"SELECT min(rowid), max(rowid) FROM {SAMPLES}").fetchone()
    parts = []
    if lo is not None:
        for start in range(lo, hi + 1, CHUNK_ROWS):
            (blob,) = con.execute(sql, (start, start + CHUNK_ROWS)).fetchone()
            if blob:
                parts.append(pl.read_csv(blob, has_header=False, schema=_RAW))
    return pl.concat(parts) if parts else pl.DataFrame(schema=_RAW)


def _names(con: sqlite3.Connection) -> pl.DataFrame:
    """type_id, metricId, name, column: every named counter (a few dozen rows)."""
    rows = con.execute(f"SELECT DISTINCT typeId, metricId, metricName FROM {NAMES}").fetchall()
    frame = pl.DataFrame(
        rows,
        schema={"type_id": pl.Int64, "metricId": pl.Int64, "name": pl.String},
        orient="row",
    )
    cols = [column_of(str(n)) for n in frame["name"].to_list()]
    return frame.with_columns(column=pl.Series(cols, dtype=pl.String))


def _pivot(
    raw: pl.DataFrame, wanted: pl.DataFrame, devices: dict[Device, int]
) -> tuple[pl.DataFrame, int]:
    """The long rows as one row per (rank, device, sample), in the schema's units, and the
    number of values out of range (nulled)."""
    by_gpu = pl.DataFrame(
        [(gid, rank, dev) for (rank, dev), gid in devices.items()],
        schema={"gpu": pl.Int64, "rank": pl.Int32, "device": pl.Int32},
        orient="row",
    )
    ours = by_gpu["gpu"].unique().to_list()
    codes = {c: i for i, c in enumerate(METRIC_NAMES)}
    named = raw.filter((pl.col("type_id") & 0xFF).is_in(ours)).join(
        wanted.select(
            "type_id",
            metric_id="metricId",
            code=pl.col("column").replace_strict(codes, return_dtype=pl.Int8),
        ),
        on=["type_id", "metric_id"],
    )
    clock = codes["gpc_clock_hz"]
    is_clock, value = pl.col("code") == clock, pl.col("value")
    in_range = pl.when(is_clock).then(value > 0).otherwise((value >= 0) & (value <= 100))
    out_of_range = int(named.select((~in_range).sum()).item() or 0)
    # a GPU's clock readings are MHz where all of them are below MHZ_BELOW (the name's unit)
    mhz = {
        int(t)
        for t, top in named.filter(is_clock & in_range)
        .group_by("type_id")
        .agg(value.max())
        .iter_rows()
        if top < MHZ_BELOW
    }
    named = named.with_columns(value=pl.when(in_range).then(value))
    present = set(named["code"].unique().to_list())

    def column(name: str) -> pl.Expr:
        if codes[name] not in present:
            return pl.lit(None, pl.Float64).alias(name)
        mine = value.filter(pl.col("code") == codes[name])
        # several counters of one column in one sample add up (NVLink); all unknown: unknown
        total = pl.when(mine.is_not_null().any()).then(mine.sum()).cast(pl.Float64)
        if name == "gpc_clock_hz":
            return total.alias(name)
        return (total / 100.0).alias(name)

    wide = (
        named.group_by("type_id", "start_ns")
        .agg(*(column(c) for c in METRIC_NAMES))
        .with_columns(
            gpc_clock_hz=pl.when(pl.col("type_id").is_in(sorted(mhz)))
            .then(pl.col("gpc_clock_hz") * 1_000_000)
            .otherwise(pl.col("gpc_clock_hz"))
            .round()
            .cast(pl.Int64),
            gpu=pl.col("type_id") & 0xFF,
        )
        .join(by_gpu, on="gpu")  # a GPU of several (rank, device): each has its samples
        .sort("rank", "device", "start_ns")
    )
    return (
        wide.with_columns(end_ns=_period_ends(wide)).select(GPU_METRIC_SCHEMA.names()),
        out_of_range,
    )


def _period_ends(samples: pl.DataFrame) -> pl.Expr:
    """Each sample's period end: the next sample's start on its device, or one sampling
    period (the device's median spacing) on from its start for the last sample and one
    before a hole. Rows sorted by rank, device and start."""
    key = ["rank", "device"]
    nxt = pl.col("start_ns").shift(-1).over(key)
    spacing = (nxt - pl.col("start_ns")).median().over(key)
    period = spacing.fill_null(0).cast(pl.Int64)
    one = pl.col("start_ns") + pl.max_horizontal(period, pl.lit(1))
    hole = nxt.is_null() | (nxt - pl.col("start_ns") > HOLE_PERIODS * period)
    return pl.when(hole).then(one).otherwise(nxt)


def _notes(samples: pl.DataFrame, wanted: pl.DataFrame, devices: dict[Device, int]) -> list[str]:
    """What is missing, once each: devices with no samples, and each sampled device's
    metric set without a counter the figures need."""
    notes = []
    sampled = {(int(r), int(d)) for r, d in samples.select("rank", "device").unique().iter_rows()}
    missing = sorted(set(devices) - sampled)
    if missing:
        which = ", ".join(f"rank {r} GPU {d}" for r, d in missing)
        notes.append(
            f"GPU metrics: {which} ran GPU work but has no samples (not among "
            "--gpu-metrics-devices, or a GPU whose counters nsys cannot sample); no "
            "GPU-metric figure is shown for it"
        )
    present = {
        (int(g), str(c))
        for g, c in wanted.select(pl.col("type_id") & 0xFF, "column").unique().iter_rows()
    }
    for rank, device in sorted(sampled):
        lacks = [NEEDED_WORDS[c] for c in NEEDED if (devices[(rank, device)], c) not in present]
        if lacks:
            notes.append(
                f"GPU metrics: the metric set of rank {rank} GPU {device} has no "
                f"{', '.join(lacks)}; the figures that need {'it' if len(lacks) == 1 else 'them'}"
                " are not shown for it"
            )
    return notes
