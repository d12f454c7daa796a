"""Nsight Compute's kernels joined to the trace's: what ncu measured, on the job's kernels.

ncu profiles another run of the program: it replays a filtered subset of its kernels (`-k`,
`--nvtx-include`, `-c`), with the clocks locked to base and the caches flushed between
passes, so its durations are not the job's. The join keeps the trace's durations and takes
from ncu what does not depend on its clocks: DRAM bytes, the Tensor Core pipe's and the SMs'
utilisation, registers per thread, shared memory, achieved occupancy.

**Matching.** A kernel is told by its match key: its name without the parameter list,
namespaces, spaces and integer suffixes (ncu's demangler and CUPTI's write
`std::array<char *, 2>` and `std::array<char*, 2ul>`, drop or keep `at::native::`), and its
grid and block sizes where both sides record them. Where ncu's names of one function do not
all appear in the trace in that form (lambdas and `const T&` are written differently), the
function's bare name is the key for every kernel of that function, on both sides.
`assign` pairs each ncu process and device with the (rank, device) of the trace whose
kernels share the most keys, and refuses an export of which under `MIN_NAME_OVERLAP_SHARE`
of the kernels share a key with any device's: not a capture of this program. `match` then
pairs kernels by key and launch order (correlation order in the trace, ID order in ncu): the
k-th launch of a key in ncu is the k-th launch of that key in each step of the trace (ncu
profiled one step, `--nvtx-include step_1/`: its sequence is compared with every steady
step), or, in a trace without steps, in the trace's sequence from the anchor (a launch of
ncu's first kernel) that pairs most kernels in order (`-c N` profiles the first N kernels of
the process; the trace may start later). Pairs out of launch order are dropped. In steps, the
candidates are the steps' kernels, or those one host thread launched where ncu's kernels
pair better with them (an NVTX push/pop range selects one thread's launches: autograd's
backward thread is left out of `--nvtx-include step_1/`).

**What it gives** (`NcuJoin`): per ncu file and the device it matched, the counts matched
and the share of the device's kernel time they cover (`files`); per kernel name and launch
shape, the measured figures (`kernels`: registers and achieved occupancy for the
launch-shape rule); per device, the Tensor Core pipe's measured share of the matched GEMM
kernels (`devices`); and per matched trace kernel the DRAM bytes (`measured_bytes`, read by
the bandwidth table and the roofline in the rank stage). A matched kernel without DRAM bytes
in the export (counters missing) gets them from the DRAM throughput share at the trace's GPU
peak, where known; else it stays estimated.

Known limits: one ncu file is taken to hold one step (or a prefix of the process); the DRAM
bytes under ncu are cold-cache bytes (ncu flushes the L2 between passes), so a job whose
kernels hit the L2 moves fewer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceanalyzer.analyses.counters.ncu_results import NcuJoin
from traceanalyzer.analyses.gpu.bandwidth import peak_bandwidth_gbps
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.model import DeviceInfo, Kind, Timeline
from traceanalyzer.model.ncu import NcuExport

#: An export is refused where fewer than this share of its kernels share a match key (name,
#: and launch shape where both record it) with the kernels of any (rank, device) of the trace.
MIN_NAME_OVERLAP_SHARE = 0.5
#: The most anchors tried for a trace without steps (launches of ncu's first kernel).
MAX_ANCHORS = 1000

DEVICE_KEY = ["rank", "device"]


class MismatchedExportError(TraceAnalyzerError):
    """An Nsight Compute export whose kernels barely overlap the trace's."""


# --- match keys


def _full_key(name: pl.Expr) -> pl.Expr:
    """The name without `void`, its parameter list, namespaces, spaces and integer suffixes,
    with lambdas in one form (`{lambda(float)#1}` and `[lambda(float) (instance 1)]`)."""
    text = (
        name.cast(pl.String)
        .str.replace_all(r"\(anonymous namespace\)::|<unnamed>::|`anonymous namespace'::", "")
        .str.strip_chars()
        .str.replace(r"^void\s+", "")
        # the trailing parameter list, with up to two nested levels of parentheses
        .str.replace(r"\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\s*(?:const)?\s*$", "")
        .str.replace_all(r"\{lambda\(([^(){}]*)\)#(\d+)\}", "lambda(${1})#${2}")
        .str.replace_all(r"\[lambda\(([^()\[\]]*)\)\s*\(instance\s*(\d+)\)\]", "lambda(${1})#${2}")
        .str.replace_all(r"\b[A-Za-z_]\w*::", "")
        .str.replace_all(r"\s+", "")
    )
    return text.str.replace_all(r"(?i)\b(\d+)(?:ull|ul|ll|u|l)\b", "${1}")


def name_keys(names: pl.Series) -> pl.DataFrame:
    """name, full, base: each distinct kernel name's full match key and its function's bare
    name (the full key up to its template arguments)."""
    distinct = pl.DataFrame({"name": names.cast(pl.String).unique().drop_nulls()})
    return distinct.with_columns(full=_full_key(pl.col("name"))).with_columns(
        base=pl.col("full").str.extract(r"^([^<(]*)", 1)
    )


def _key_expr(ncu: pl.DataFrame, trace: pl.DataFrame, shaped: bool) -> pl.Expr:
    """The match key of a row of either frame (both with name, grid, block): the full key
    where every full key of the function in ncu appears in the trace, else the function's
    bare name (`base:` and the name), for the kernels of both; with the launch shape where
    `shaped`."""
    nk = name_keys(ncu["name"])
    tk = name_keys(trace["name"])
    full_ok = (
        nk.join(tk.select("full", _seen=pl.lit(True)).unique(), on="full", how="left")
        .group_by("base")
        .agg(use_full=pl.col("_seen").is_not_null().all())
    )
    table = pl.concat([nk, tk]).unique("name").join(full_ok, on="base", how="left")
    use_full = pl.col("use_full").fill_null(False)
    mapping = table.select(
        "name", key=pl.when(use_full).then("full").otherwise("base:" + pl.col("base"))
    )
    key = pl.col("name").replace_strict(
        mapping["name"], mapping["key"], default=None, return_dtype=pl.String
    )
    return key + pl.format("|{}|{}", pl.col("grid"), pl.col("block")) if shaped else key


def _shape_text(column: str) -> pl.Expr:
    """A trace's [x, y, z] launch dimensions as `x,y,z` (ncu's form)."""
    return pl.col(column).cast(pl.List(pl.String)).list.join(",")


# --- assigning each ncu process and device to a device of the trace


@dataclass(frozen=True, slots=True)
class Assigned:
    """One ncu process and device of an export, paired with the trace's (rank, device).

    `kernels`: its ncu kernels (NcuExport.kernels' columns) with `key`; `names`: the trace
    kernels' name, grid and block (as text) on that device with their `key`;
    `overlap_share`: the share of its kernels that share a key with the device's."""

    file: int
    path: str
    process: int | None
    ncu_device: int | None
    rank: int
    device: int
    kernels: pl.DataFrame = field(repr=False)
    names: pl.DataFrame = field(repr=False)
    overlap_share: float
    shaped: bool
    present: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    device_name: str | None = None


def _trace_kernels(timeline: Timeline) -> pl.DataFrame:
    """rank, device, name, grid, block (text), count: the trace's kernels, all of them."""
    return (
        timeline.events.lazy()
        .filter(pl.col("kind") == Kind.KERNEL.value)
        .group_by("rank", "device", "name", "grid", "block")
        .agg(count=pl.len())
        .with_columns(
            name=pl.col("name").cast(pl.String),
            grid=_shape_text("grid"),
            block=_shape_text("block"),
        )
        .collect()
    )


def _overlap(
    ncu: pl.DataFrame, trace: pl.DataFrame
) -> tuple[float, pl.DataFrame, pl.DataFrame, bool]:
    """The share of `ncu`'s kernels whose key the trace's (one device's) hold as often, and
    both frames with their `key`."""
    shaped = bool(
        trace["grid"].null_count() == 0
        and trace["block"].null_count() == 0
        and ncu["grid"].null_count() == 0
        and ncu["block"].null_count() == 0
    )
    key = _key_expr(ncu, trace, shaped)
    nk = ncu.with_columns(key=key)
    tk = trace.with_columns(key=key)
    counts = (
        nk.group_by("key")
        .agg(a=pl.len())
        .join(tk.group_by("key").agg(b=pl.col("count").sum()), on="key", how="left")
    )
    both = counts.select(pl.min_horizontal("a", pl.col("b").fill_null(0)).sum()).item() or 0
    return (both / ncu.height if ncu.height else 0.0), nk, tk, shaped


def assign(timeline: Timeline, exports: Sequence[NcuExport]) -> tuple[Assigned, ...]:
    """Pair each process and device of each export with the trace's (rank, device) whose
    kernels share the most match keys with its kernels. Raise MismatchedExportError (naming
    the file) where, over the whole export, under MIN_NAME_OVERLAP_SHARE of the kernels
    share a key with the device they were paired with; a process or device of an export
    that passes but that itself falls under it is left out, with a note."""
    trace = _trace_kernels(timeline)
    devices = trace.select(DEVICE_KEY).unique().sort(DEVICE_KEY).rows()
    out: list[Assigned] = []
    for i, export in enumerate(exports):
        if export.kernels.height == 0:
            raise MismatchedExportError(
                "the Nsight Compute export holds no kernels",
                path=export.path,
                hint="check the ncu filters (-k, --nvtx-include, -c): did they select any kernel?",
            )
        groups = export.kernels.partition_by(
            ["process", "device"], maintain_order=True, as_dict=True
        )
        paired = [
            (key, kernels, _best_device(kernels, trace, devices)) for key, kernels in groups.items()
        ]
        shared = sum(best[0] * kernels.height for _, kernels, best in paired)
        if shared / export.kernels.height < MIN_NAME_OVERLAP_SHARE:
            # the example of a kernel not in the trace: from the group with most of them
            _, _, best = max(paired, key=lambda p: (1 - p[2][0]) * p[1].height)
            raise _mismatch(
                export, export.kernels, shared / export.kernels.height, best[3], best[4]
            )
        left_out = [
            f"process {process} device {ncu_device}: only {best[0]:.0%} of its "
            f"{kernels.height} kernels match the trace's; left out"
            for (process, ncu_device), kernels, best in paired
            if best[0] < MIN_NAME_OVERLAP_SHARE
        ]
        for (process, ncu_device), _, best in paired:
            share, rank, device, nk, tk, shaped = best
            if share < MIN_NAME_OVERLAP_SHARE:
                continue
            out.append(
                Assigned(
                    file=i,
                    path=export.path,
                    process=None if process is None else int(str(process)),
                    ncu_device=None if ncu_device is None else int(str(ncu_device)),
                    rank=int(rank),
                    device=int(device),
                    kernels=nk,
                    names=tk.select("name", "grid", "block", "key"),
                    overlap_share=share,
                    shaped=shaped,
                    present=export.present,
                    missing=export.missing,
                    notes=(*export.notes, *left_out),
                    device_name=export.device_name,
                )
            )
    return tuple(out)


_Best = tuple[float, int, int, pl.DataFrame, pl.DataFrame, bool]


def _best_device(
    kernels: pl.DataFrame, trace: pl.DataFrame, devices: list[tuple[int, int]]
) -> _Best:
    """The overlap share, the trace's (rank, device) sharing most keys with `kernels` (the
    first such), both sides with their keys, and whether the keys hold launch shapes."""
    best: _Best | None = None
    for rank, device in devices:
        mine = trace.filter((pl.col("rank") == rank) & (pl.col("device") == device))
        share, nk, tk, shaped = _overlap(kernels, mine)
        if best is None or share > best[0]:
            best = (share, rank, device, nk, tk, shaped)
    assert best is not None  # the trace has GPU work (checked before)
    return best


def _mismatch(
    export: NcuExport, kernels: pl.DataFrame, share: float, nk: pl.DataFrame, tk: pl.DataFrame
) -> MismatchedExportError:
    absent = nk.join(tk.select("key").unique(), on="key", how="anti")["name"].unique(
        maintain_order=True
    )
    example = absent[0] if absent.len() else ""
    shown = example if len(example) <= 80 else example[:77] + "..."
    return MismatchedExportError(
        f"only {round(share * kernels.height)} of the {kernels.height} kernels Nsight Compute "
        f"profiled ({share:.0%}) match the trace's kernels by name and launch shape; at least "
        f"{MIN_NAME_OVERLAP_SHARE:.0%} must" + (f" (not in the trace: {shown!r})" if shown else ""),
        path=export.path,
        hint="profile the same program and inputs as the trace, and the steps it holds "
        "(ncu --nvtx --nvtx-include 'step_1/' ...), or pass the trace this export belongs to",
    )


# --- matching in the rank stage


#: The per-kernel frame `match` gives: the trace kernel and what ncu measured on its partner.
MATCHED_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "correlation": pl.Int64(),
    "name": pl.String(),
    "grid": pl.String(),
    "block": pl.String(),
    "kernel_class": pl.String(),
    "clipped_ns": pl.Int64(),
    "file": pl.Int64(),
    "ncu_launch": pl.Int64(),
    "ncu_duration_ns": pl.Int64(),
    "dram_bytes": pl.Int64(),
    "dram_source": pl.String(),
    "sm_throughput_share": pl.Float64(),
    "tensor_pipe_share": pl.Float64(),
    "achieved_occupancy_share": pl.Float64(),
    "warps_active": pl.Float64(),
    "registers_per_thread": pl.Int64(),
    "shared_mem_bytes": pl.Int64(),
}


@dataclass(frozen=True, slots=True)
class Matched:
    """What `match` gives for one rank: the matched trace kernels (`MATCHED_SCHEMA`) and one
    row per assigned ncu process and device (NcuJoin.files' columns)."""

    kernels: pl.DataFrame
    files: pl.DataFrame

    def measured_bytes(self) -> pl.DataFrame:
        """rank, device, correlation, dram_bytes: each matched kernel's DRAM bytes (null where
        ncu had none): what the bandwidth table and the roofline read."""
        return self.kernels.select(*DEVICE_KEY, "correlation", "dram_bytes")


def match(
    kernels: pl.DataFrame,
    assigned: Sequence[Assigned],
    devices: Sequence[DeviceInfo],
    threads: pl.DataFrame | None = None,
) -> Matched:
    """Pair the kernels inside the windows (rank, device, correlation, name, grid, block,
    step, kernel_class, clipped_ns, start_ns) with the ncu kernels assigned to their devices
    (see the module docstring); a trace kernel two exports both measure keeps the first's.
    `threads`: rank, device, correlation, launch_tid (the host thread that launched each
    kernel: `windows.linked_work`), for the steps' candidates of one thread."""
    pairs: list[pl.DataFrame] = []
    rows: list[dict[str, object]] = []
    for a in assigned:
        trace = (
            kernels.filter((pl.col("rank") == a.rank) & (pl.col("device") == a.device))
            .with_columns(
                name=pl.col("name").cast(pl.String),
                grid=_shape_text("grid"),
                block=_shape_text("block"),
            )
            .join(a.names, on=["name", "grid", "block"], how="left", nulls_equal=True)
            .select(*_TRACE_COLUMNS, "step", "start_ns", "key")
            .sort("correlation", "start_ns", nulls_last=True)
            .with_row_index("_pos")
        )
        trace = _with_threads(trace, threads)
        by_steps = trace["step"].null_count() < trace.height
        thread = None
        if by_steps:
            thread, found = _by_steps_best(trace, a.kernels)
        else:
            found = _by_anchor(trace, a.kernels)
        found = _with_peak_bytes(found.with_columns(file=pl.lit(a.file, pl.Int64)), devices, a)
        pairs.append(found)
        kernel_ns = int(trace["clipped_ns"].sum() or 0)
        covered = int(found["clipped_ns"].sum() or 0)
        rows.append(
            {
                "file": a.file,
                "path": a.path,
                "process": a.process,
                "ncu_device": a.ncu_device,
                "rank": a.rank,
                "device": a.device,
                "alignment": "steps" if by_steps else "launch order",
                "launch_thread": thread,
                "ncu_kernels": a.kernels.height,
                "matched_ncu_kernels": found["ncu_launch"].n_unique(),
                "name_overlap_share": a.overlap_share,
                "trace_kernels": trace.height,
                "matched_trace_kernels": found.height,
                "kernel_ns": kernel_ns,
                "covered_ns": covered,
                "covered_share": covered / kernel_ns if kernel_ns else None,
                "dram_source": _source_words(found),
                "present": list(a.present),
                "missing": list(a.missing),
                "notes": [*a.notes, *_device_notes(a, devices)],
            }
        )
    every = (
        pl.concat(pairs, how="vertical_relaxed").unique(
            subset=[*DEVICE_KEY, "correlation"], keep="first", maintain_order=True
        )
        if pairs
        else pl.DataFrame(schema=MATCHED_SCHEMA)
    )
    return Matched(
        kernels=every.select(pl.col(c).cast(t) for c, t in MATCHED_SCHEMA.items()),
        files=pl.DataFrame(rows, schema=NcuJoin.SCHEMAS["files"]),
    )


_NCU_MEASURES = [
    "ncu_duration_ns",
    "dram_bytes",
    "dram_source",
    "dram_throughput_share",
    "sm_throughput_share",
    "tensor_pipe_share",
    "achieved_occupancy_share",
    "warps_active",
    "registers_per_thread",
    "shared_mem_bytes",
]
_TRACE_COLUMNS = [*DEVICE_KEY, "correlation", "name", "grid", "block", "kernel_class", "clipped_ns"]


def _with_threads(trace: pl.DataFrame, threads: pl.DataFrame | None) -> pl.DataFrame:
    """The trace kernels with `launch_tid` (null where unknown)."""
    if threads is None:
        return trace.with_columns(launch_tid=pl.lit(None, pl.Int64))
    tids = threads.select(*DEVICE_KEY, "correlation", pl.col("launch_tid").cast(pl.Int64))
    return trace.join(
        tids.unique([*DEVICE_KEY, "correlation"], keep="first"),
        on=[*DEVICE_KEY, "correlation"],
        how="left",
        maintain_order="left",
    )


def _by_steps_best(trace: pl.DataFrame, ncu: pl.DataFrame) -> tuple[int | None, pl.DataFrame]:
    """`_by_steps` over the steps' kernels, or over those one host thread launched, whichever
    ncu's kernels pair best with: the most pairs over the union of both sides (each step
    against ncu's sequence). An NVTX push/pop range is the pushing thread's: `--nvtx-include
    step_1/` profiles what the main thread launched, and the backward kernels autograd's
    thread launches in between are not profiled (a key they share would shift the pairs).
    Returns the thread (None: all) and its pairs."""
    stepped = trace.filter(pl.col("step").is_not_null())
    tids = stepped["launch_tid"].drop_nulls().unique().sort().to_list()
    best: tuple[float, int | None, pl.DataFrame] | None = None
    for tid in [None, *tids]:
        mine = stepped if tid is None else stepped.filter(pl.col("launch_tid") == tid)
        found = _by_steps(mine, ncu)
        union = mine["step"].n_unique() * ncu.height + mine.height - found.height
        score = found.height / union if union else 0.0
        if best is None or score > best[0]:
            best = (score, tid, found)
    assert best is not None
    return best[1], best[2]


def _by_steps(trace: pl.DataFrame, ncu: pl.DataFrame) -> pl.DataFrame:
    """The k-th launch of a key in each step of the trace with the k-th launch of that key
    in ncu."""
    occ = pl.int_range(pl.len()).over("step", "key")
    t = trace.filter(pl.col("step").is_not_null() & pl.col("key").is_not_null()).with_columns(
        _occ=occ
    )
    n = ncu.sort("launch").with_columns(_occ=pl.int_range(pl.len()).over("key"))
    return t.join(
        n.select("key", "_occ", *_NCU_MEASURES, ncu_launch="launch"), on=["key", "_occ"]
    ).select(*_TRACE_COLUMNS, "ncu_launch", *_NCU_MEASURES)


def _by_anchor(trace: pl.DataFrame, ncu: pl.DataFrame) -> pl.DataFrame:
    """The k-th launch of a key in ncu with the k-th launch of that key from the anchor on
    (the launch of ncu's first kernel that pairs most kernels in order; ties: the shortest
    span, then the earliest), pairs out of launch order dropped."""
    n = ncu.sort("launch")
    keys = pl.concat([trace["key"].drop_nulls(), n["key"]]).unique(maintain_order=True)
    code = {k: i for i, k in enumerate(keys.to_list())}
    t_key = trace["key"].replace_strict(code, default=-1, return_dtype=pl.Int64).to_numpy()
    n_key = n["key"].replace_strict(code, default=-1, return_dtype=pl.Int64).to_numpy()
    n_occ = n.select(occ=pl.int_range(pl.len()).over("key"))["occ"].to_numpy()
    best_t = _best_alignment(t_key, n_key, n_occ, len(code))
    if best_t is None:
        best_t = np.full(n.height, -1, dtype=np.int64)
    ok = best_t >= 0
    return _pairs(trace, n, np.flatnonzero(ok), best_t[ok])


def _best_alignment(
    t_key: np.ndarray, n_key: np.ndarray, n_occ: np.ndarray, keys: int
) -> np.ndarray | None:
    """The trace position paired with each ncu launch (-1: none) at the best anchor."""
    m = t_key.size
    if m == 0 or n_key.size == 0:
        return None
    valid_t = t_key >= 0
    pos = np.arange(m, dtype=np.int64)
    order = np.lexsort((pos, t_key))
    order = order[valid_t[order]]
    sorted_key, sorted_pos = t_key[order], pos[order]
    combined = sorted_key * (m + 1) + sorted_pos
    start = np.searchsorted(sorted_key, np.arange(keys), side="left")
    count = np.searchsorted(sorted_key, np.arange(keys), side="right") - start
    first = next((k for k in n_key if k >= 0 and count[k] > 0), None)
    if first is None:
        return None
    anchors = sorted_pos[start[first] : start[first] + count[first]][:MAX_ANCHORS]
    best: tuple[int, int, int] | None = None
    best_t = None
    known = n_key >= 0
    for s in anchors:
        before = np.searchsorted(combined, np.arange(keys) * (m + 1) + s) - start
        idx = np.where(known, before[np.maximum(n_key, 0)] + n_occ, -1)
        ok = known & (idx >= 0) & (idx < count[np.maximum(n_key, 0)])
        t = np.where(ok, sorted_pos[np.minimum(start[np.maximum(n_key, 0)] + idx, m - 1)], -1)
        seen = np.maximum.accumulate(np.concatenate(([-1], t[:-1])))
        in_order = ok & (t > seen)
        t = np.where(in_order, t, -1)
        score = int(in_order.sum())
        span = int(t[in_order].max() - t[in_order].min()) if score else 0
        rank = (score, -span, -int(s))
        if best is None or rank > best:
            best, best_t = rank, t
    return best_t


def _pairs(
    trace: pl.DataFrame,
    ncu: pl.DataFrame,
    ncu_rows: np.ndarray,
    trace_rows: np.ndarray,
) -> pl.DataFrame:
    """The trace rows at `trace_rows` (`_pos`) with the ncu rows at `ncu_rows`, in pairs."""
    link = pl.DataFrame(
        {"_n": ncu_rows.astype(np.int64), "_pos": trace_rows.astype(np.int64)},
        schema={"_n": pl.Int64, "_pos": pl.Int64},
    )
    n = ncu.with_row_index("_n").with_columns(pl.col("_n").cast(pl.Int64))
    t = trace.with_columns(pl.col("_pos").cast(pl.Int64))
    return (
        link.join(t, on="_pos")
        .join(n.select("_n", *_NCU_MEASURES, ncu_launch="launch"), on="_n")
        .sort("_pos")
        .select(*_TRACE_COLUMNS, "ncu_launch", *_NCU_MEASURES)
    )


def _with_peak_bytes(
    found: pl.DataFrame, devices: Sequence[DeviceInfo], a: Assigned
) -> pl.DataFrame:
    """DRAM bytes where the export has none but has the throughput share and ncu's duration:
    at the trace's GPU peak bandwidth (`dram_source` "throughput"), where it is known."""
    info = next((d for d in devices if (d.rank, d.device) == (a.rank, a.device)), None)
    gbps = peak_bandwidth_gbps(info.name, info.memory_bytes) if info else None
    if gbps is None:
        return found
    derived = pl.col("dram_throughput_share") * gbps * pl.col("ncu_duration_ns")
    missing = pl.col("dram_bytes").is_null() & derived.is_not_null()
    return found.with_columns(
        dram_bytes=pl.when(missing).then(derived.round(0).cast(pl.Int64)).otherwise("dram_bytes"),
        dram_source=pl.when(missing).then(pl.lit("throughput")).otherwise("dram_source"),
    )


def _device_notes(a: Assigned, devices: Sequence[DeviceInfo]) -> list[str]:
    """A note where ncu ran on another GPU than the trace's device it was paired with."""
    info = next((d for d in devices if (d.rank, d.device) == (a.rank, a.device)), None)
    if info is None or not info.name or not a.device_name:
        return []

    def bare(name: str) -> str:
        return name.lower().removeprefix("nvidia").strip()

    ncu, trace = bare(a.device_name), bare(info.name)
    if ncu in trace or trace in ncu:
        return []
    return [
        f"Nsight Compute ran on {a.device_name}, the trace's rank {a.rank} device {a.device} "
        f"is {info.name}: the bytes, registers and occupancy are the same kernels', the "
        "utilisation shares are of the other GPU's peaks"
    ]


def _source_words(found: pl.DataFrame) -> str | None:
    """How the matched kernels' DRAM bytes were obtained: "counters", "throughput", both
    ("counters+throughput"), or null where none has bytes."""
    sources = sorted(found["dram_source"].drop_nulls().unique().to_list())
    return "+".join(sources) if sources else None
