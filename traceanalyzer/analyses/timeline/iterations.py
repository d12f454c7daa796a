"""Iterations found from what repeats, for a trace without step markers.

A trace recorded without a schedule (`profile()` around a few calls of a model, an
inference benchmark, a compiled region called in a loop) has no `ProfilerStep#N`: its window
is one "step", and a slow first call (cuDNN's autotuning, a lazy module load) is priced as
if it were the loop. But the calls repeat, and the trace shows it: one host range per call
whose name comes back.

**A call range** is a host range that marks one call of the program's work: a user range
(`record_function`, NVTX), `Torch-Compiled Region: N/M` (a compiled frame's call),
`CompiledFunction`, or a module's call (`nn.Module: ResNet_0`, `with_modules=True`: one
name per module instance, so a layer is once per call of the model). On a host thread, the
outermost ranges of one name are **iterations** where

- there are at least `MIN_CALLS` of them;
- they launch at least `MIN_COVERAGE` of the GPU time the thread launched after the first;
- no other call range encloses two of them (a layer's range inside one model call, not a
  loop: a single forward pass is not split into layers).

Of the names that pass, the one with fewest ranges (the coarsest period), then the most GPU
time inside them, then the earliest, is the iteration. Iteration k runs from the start of
range k to the start of range k+1 (so the work between calls, a backward or an optimizer
step outside the compiled forward, is its iteration's), the last to the end of its range or
of the rank's last launch (at most the longest iteration after its start), whichever is
later, and is left out where that is under `CUT_SHARE` of the shortest (the trace cut it):
they tile the calls as step markers do, and the steady state leaves out a first call that
is slow (warm-up) as it leaves out a first step.
"""

from __future__ import annotations

import itertools

import polars as pl

from traceanalyzer.model import GPU_KINDS, Kind, Timeline

#: The fewest repeats that make a loop (a first call left out leaves two to compare).
MIN_CALLS = 3
#: The share of the thread's GPU time (launched from the first range on) the ranges must
#: launch themselves.
MIN_COVERAGE = 0.25
#: A last iteration shorter than this share of the shortest other was cut by the trace's end.
CUT_SHARE = 0.8
#: Host ranges other than user ranges that mark a call: a compiled frame's call, a compiled
#: autograd function, a module's call.
CALL_NAMES = r"^(?:Torch-Compiled Region: |nn\.Module: |CompiledFunction$)"
#: Host ranges that are not calls of the program's work (the profiler's own).
NOT_CALLS = r"^(?:ProfilerStep#|\[memory\]|PyTorch Profiler)"

_THREAD = ["rank", "pid", "tid"]
_SCHEMA = {
    "rank": pl.Int32,
    "step": pl.Int64,
    "name": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}
_CALL_SCHEMA = {**_SCHEMA, "call": pl.String}


def repeated_calls(timeline: Timeline, cycles: bool = True) -> tuple[pl.DataFrame, str | None]:
    """The iterations of each rank (see the module docstring) as step markers: rank, step
    (1, 2, ...), name (`iteration 1`, ...), start_ns, end_ns; with what repeats (the first
    rank's call range, or its cycle of kernels where no call range repeats). Empty, and None,
    where nothing repeats. `cycles` False: from call ranges only (an Nsight Compute export of
    a process's first kernels pairs with the whole capture's launch order, which a kernels'
    cycle would cut, leaving its cold first kernels out)."""
    found = _iterations(timeline)
    if found.height == 0 and cycles:
        found = kernel_cycles(timeline)
    if found.height == 0:
        return found.drop("call"), None
    call = str(found["call"][0])
    named = found.with_columns(name=pl.lit("iteration ") + pl.col("step").cast(pl.String))
    return named.drop("call"), call


def _iterations(timeline: Timeline) -> pl.DataFrame:
    ev = timeline.events.lazy()
    name = pl.col("name").cast(pl.String)
    kind = pl.col("kind")
    calls = (
        ev.filter(
            (
                (kind == Kind.ANNOTATION.value)
                | (
                    kind.is_in([Kind.CPU_OP.value, Kind.PYTHON.value])
                    & name.str.contains(CALL_NAMES)
                )
            )
            & ~name.str.contains(NOT_CALLS)
            & (pl.col("end_ns") > pl.col("start_ns"))
        )
        .select(*_THREAD, name.alias("name"), "start_ns", "end_ns")
        .collect()
    )
    if calls.height < MIN_CALLS:
        return pl.DataFrame(schema=_CALL_SCHEMA)
    outer = (
        calls.sort([*_THREAD, "name", "start_ns", "end_ns"], descending=[False] * 5 + [True])
        .with_columns(
            _before=pl.col("end_ns").cum_max().shift(1).over([*_THREAD, "name"]),
        )
        .filter(pl.col("_before").is_null() | (pl.col("start_ns") >= pl.col("_before")))
        .drop("_before")
        .with_columns(n=pl.len().over([*_THREAD, "name"]))
        .filter(pl.col("n") >= MIN_CALLS)
    )
    if outer.height == 0:
        return pl.DataFrame(schema=_CALL_SCHEMA)
    launched = _launched_gpu_time(timeline, outer.select(_THREAD).unique())
    if launched.height == 0:
        return pl.DataFrame(schema=_CALL_SCHEMA)
    scored = _scored(outer, launched, calls)
    if scored.height == 0:
        return pl.DataFrame(schema=_CALL_SCHEMA)
    chosen = scored.sort(
        ["rank", "n", "coverage", "first_ns"], descending=[False, False, True, False]
    )
    chosen = chosen.group_by("rank", maintain_order=True).first()
    picked = outer.join(chosen.select([*_THREAD, "name"]), on=[*_THREAD, "name"]).sort(
        "rank", "start_ns"
    )
    # the last call ends where its range or the rank's launches after it end, at most a
    # median iteration after its start (what follows the loop is not its work)
    last_launch = _last_launch_end(timeline)
    steps = (
        picked.join(last_launch, on="rank", how="left")
        .with_columns(
            step=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("rank"),
            _next=pl.col("start_ns").shift(-1).over("rank"),
        )
        .with_columns(
            _longest=(pl.col("_next") - pl.col("start_ns")).max().over("rank"),
            _shortest=(pl.col("_next") - pl.col("start_ns")).min().over("rank"),
        )
    )
    last_end = pl.max_horizontal(
        "end_ns",
        pl.min_horizontal(pl.col("start_ns") + pl.col("_longest"), pl.col("_last")),
    )
    # a last call cut short by the trace's end (its iteration's launches stop early) is
    # no iteration to compare
    end = pl.coalesce("_next", last_end)
    whole = pl.col("_next").is_not_null() | (
        end - pl.col("start_ns") >= CUT_SHARE * pl.col("_shortest")
    )
    return steps.filter(whole).select(
        pl.col("rank").cast(pl.Int32),
        "step",
        "name",
        pl.col("name").alias("call"),
        pl.col("start_ns").cast(pl.Int64),
        end.cast(pl.Int64).alias("end_ns"),
    )


def _last_launch_end(timeline: Timeline) -> pl.DataFrame:
    """rank, _last: the end of the rank's last runtime call that launched GPU work."""
    return (
        timeline.events.lazy()
        .filter(
            pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value])
            & pl.col("correlation").is_not_null()
        )
        .group_by("rank")
        .agg(pl.col("end_ns").max().alias("_last"))
        .collect()
    )


def _launched_gpu_time(timeline: Timeline, threads: pl.DataFrame) -> pl.DataFrame:
    """Each launch of GPU work on the candidates' threads: rank, pid, tid, launch_ns,
    launch_end_ns, gpu_ns (the work's duration), sorted by launch, with `cum_ns` (the GPU
    time launched on the thread up to and including it)."""
    ev = timeline.events.lazy()
    work = ev.filter(pl.col("kind").is_in([k.value for k in GPU_KINDS])).select(
        "rank", "correlation", gpu_ns=pl.col("end_ns") - pl.col("start_ns")
    )
    calls = ev.filter(
        pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value])
        & pl.col("correlation").is_not_null()
    ).select(*_THREAD, "correlation", launch_ns="start_ns", launch_end_ns="end_ns")
    return (
        work.join(calls, on=["rank", "correlation"])
        .join(threads.lazy(), on=_THREAD, how="semi")
        .group_by([*_THREAD, "launch_ns", "launch_end_ns"])
        .agg(pl.col("gpu_ns").sum())
        .sort([*_THREAD, "launch_ns"])
        .with_columns(cum_ns=pl.col("gpu_ns").cum_sum().over(_THREAD))
        .collect()
    )


def _scored(outer: pl.DataFrame, launched: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Per candidate (thread, name): n, coverage (the GPU time its ranges launch over the
    thread's from its first range on), first_ns; the ones that pass the module's tests."""
    cum = launched.select([*_THREAD, "launch_ns", "cum_ns"]).sort("launch_ns")
    ranges = outer.sort("start_ns")

    def cum_at(col: str) -> pl.DataFrame:
        return (
            ranges.select([*_THREAD, "name", "start_ns", "end_ns"])
            .sort(col)
            .join_asof(
                cum.rename({"launch_ns": col}),
                on=col,
                by=_THREAD,
                strategy="backward",
                check_sortedness=False,
            )
        )

    # GPU time launched strictly before each range starts and before it ends
    at_start = cum_at("start_ns").rename({"cum_ns": "_s"})
    at_end = cum_at("end_ns").rename({"cum_ns": "_e"})
    inside = at_start.join(at_end, on=[*_THREAD, "name", "start_ns", "end_ns"]).with_columns(
        own_ns=pl.col("_e").fill_null(0) - pl.col("_s").fill_null(0)
    )
    totals = launched.group_by(_THREAD).agg(pl.col("cum_ns").max().alias("_total"))
    per_name = (
        inside.sort("start_ns")
        .group_by([*_THREAD, "name"])
        .agg(
            n=pl.len(),
            own_ns=pl.col("own_ns").sum(),
            before_ns=pl.col("_s").fill_null(0).first(),
            first_ns=pl.col("start_ns").first(),
        )
        .join(totals, on=_THREAD)
        .with_columns(coverage=pl.col("own_ns") / (pl.col("_total") - pl.col("before_ns")).clip(1))
        .filter(pl.col("coverage") >= MIN_COVERAGE)
    )
    if per_name.height == 0:
        return per_name
    enclosed = _enclosed_twice(
        outer.join(per_name.select([*_THREAD, "name"]), on=[*_THREAD, "name"]), calls
    )
    return per_name.join(enclosed, on=[*_THREAD, "name"], how="anti")


def _enclosed_twice(outer: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """The candidates (thread, name) two consecutive ranges of which one call range of the
    thread encloses: the latest end among the call ranges that start at or before a range
    reaches past the next range's end."""
    reach = (
        calls.sort("start_ns")
        .with_columns(reach_ns=pl.col("end_ns").cum_max().over(_THREAD))
        .select([*_THREAD, "start_ns", "reach_ns"])
    )
    pairs = (
        outer.sort([*_THREAD, "name", "start_ns"])
        .with_columns(next_end=pl.col("end_ns").shift(-1).over([*_THREAD, "name"]))
        .filter(pl.col("next_end").is_not_null())
        .with_columns(_at=pl.col("start_ns") - 1)
        .sort("_at")
    )
    # the ranges that start before this one (strictly: not itself or a range it opens)
    found = pairs.join_asof(
        reach.rename({"start_ns": "_at"}),
        on="_at",
        by=_THREAD,
        strategy="backward",
        check_sortedness=False,
    )
    return (
        found.filter(pl.col("reach_ns") >= pl.col("next_end")).select([*_THREAD, "name"]).unique()
    )


def kernel_cycles(timeline: Timeline) -> pl.DataFrame:
    """Iterations from a cycle of kernels, where no host range marks the calls (an Nsight
    export of a program without NVTX, a plain CUDA loop): on each rank's busiest stream (the
    most kernel time; its kernels whose launch the trace records, where it records any), a
    kernel name that comes back `n` times cuts the stream's kernels into
    `n` segments, from each of its runs to the next. They are iterations where

    - the segments after the first (which may hold a cold call's extra work) are two or more
      runs of one cycle of at least `MIN_CYCLE_KERNELS` kernels (the same names in the same
      order), at least `CYCLE_MATCH_SHARE` of those segments and of their kernel time (a
      layer that repeats inside a step is no cycle: the step's other work is most of the
      time; a name run twice a step cuts it into two segments that differ);
    - the cycle's runs take about the same kernel time (`CYCLE_STEADY_SHARE` of them within
      `CYCLE_TOLERANCE` of their median: a kernel relaunched over varying work is no loop);
    - they span at least `MIN_CYCLE_COVERAGE` of the rank's GPU time (kernels, copies and
      memsets on every stream: a program whose copies are most of its work is not its loop);
    - `n` is between `MIN_CALLS` and `MAX_CYCLES`.

    Of the counts `n` that names reach (the fewest first: the coarsest period), the first
    that passes, with the name of that count whose first run is earliest, is the cycle.
    Iteration k runs from the launch of the name's run k (its start, where no launch is
    recorded; for the first, of the stream's first kernel) to the next's; the last, where the
    stream holds the whole cycle after it (else it is left out: the trace cut it), to the end
    of the launch of its cycle's last kernel or a median iteration after its start, whichever
    is later, but not past the next kernel's launch on the stream; the last may be cut short
    of its cycle's last kernels (`CUT_SHARE` of them are enough: an iteration that begins
    before the name's run ends with the kernels that come before it). Columns as `_iterations`';
    `call` says "a cycle of L kernels from NAME"."""
    ev = timeline.events.lazy()
    launches = ev.filter(
        pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value])
        & pl.col("correlation").is_not_null()
    ).select("rank", "correlation", launch_ns=pl.col("start_ns"), launch_end_ns=pl.col("end_ns"))
    work = (
        ev.filter(pl.col("kind").is_in([k.value for k in GPU_KINDS]))
        .select("rank", "device", "stream", "kind", "name", "start_ns", "end_ns", "correlation")
        .join(launches.unique(["rank", "correlation"]), on=["rank", "correlation"], how="left")
        .with_columns(
            dur_ns=pl.col("end_ns") - pl.col("start_ns"),
            at_ns=pl.coalesce("launch_ns", "start_ns"),
            done_ns=pl.coalesce("launch_end_ns", "end_ns"),
        )
        .collect()
    )
    # where the rank records launches, the kernels it launched: those that ran before their
    # launch was recorded (queued before the capture began) belong to no iteration
    kernels = work.lazy().filter(
        (pl.col("kind") == Kind.KERNEL.value)
        & (pl.col("launch_ns").is_not_null() | pl.col("launch_ns").is_null().all().over("rank"))
    )
    busiest = (
        kernels.group_by(["rank", "device", "stream"])
        .agg(t=pl.col("dur_ns").sum())
        .sort(["rank", "t", "device", "stream"], descending=[False, True, False, False])
        .group_by("rank", maintain_order=True)
        .first()
        .drop("t")
    )
    seq = (
        kernels.join(busiest, on=["rank", "device", "stream"], how="semi")
        .sort(["rank", "start_ns", "end_ns"])
        .select(
            "rank",
            "name",
            "dur_ns",
            "at_ns",
            "done_ns",
            i=pl.int_range(pl.len(), dtype=pl.Int64).over("rank"),
            code=pl.col("name").cast(pl.String).hash(),
        )
        .collect()
    )
    if seq.height < MIN_CALLS:
        return pl.DataFrame(schema=_CALL_SCHEMA)
    found = [
        _cycle_of_rank(
            seq.filter(pl.col("rank") == rank),
            work.filter(pl.col("rank") == rank).select("at_ns", "dur_ns"),
        )
        for rank in seq["rank"].unique().sort().to_list()
    ]
    kept = [f for f in found if f.height]
    return pl.concat(kept) if kept else pl.DataFrame(schema=_CALL_SCHEMA)


#: The share of the segments (after the first), and of their kernel time, that must be runs
#: of the cycle.
CYCLE_MATCH_SHARE = 0.75
#: The fewest kernels in a cycle (one kernel relaunched is a call, not an iteration's work).
MIN_CYCLE_KERNELS = 2
#: The share of the cycle's runs whose kernel time must lie within `CYCLE_TOLERANCE` of the
#: runs' median.
CYCLE_STEADY_SHARE = 0.75
CYCLE_TOLERANCE = 0.25
#: The share of the rank's GPU time the cycles must span.
MIN_CYCLE_COVERAGE = 0.5
#: The most cycles a trace is cut into (a loop of one kernel run 100,000 times is no loop of
#: iterations a person reads per step).
MAX_CYCLES = 5_000
#: The counts tried, the fewest first.
MAX_CYCLE_CANDIDATES = 8


def _cycle_of_rank(seq: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """One rank's cycle (see `kernel_cycles`) from its busiest stream's kernels `seq`, with
    all its GPU work `work` (at_ns, dur_ns); empty where none passes."""
    counts = (
        seq.group_by("name")
        .agg(n=pl.len(), first=pl.col("i").min())
        .filter(pl.col("n").is_between(MIN_CALLS, MAX_CYCLES))
        .sort(["n", "first"])
    )
    anchors = counts.group_by("n", maintain_order=True).first().head(MAX_CYCLE_CANDIDATES)
    for anchor in anchors["name"].to_list():
        got = _cycles_from(seq, anchor, work)
        if got.height:
            return got
    return pl.DataFrame(schema=_CALL_SCHEMA)


def _cycles_from(seq: pl.DataFrame, anchor: str, work: pl.DataFrame) -> pl.DataFrame:
    """The iterations that runs of `anchor` cut `seq` into, where they pass `kernel_cycles`'
    tests; empty where not."""
    none = pl.DataFrame(schema=_CALL_SCHEMA)
    cut = seq.with_columns(seg=pl.col("name").cast(pl.String).eq(anchor).cum_sum()).filter(
        pl.col("seg") > 0
    )
    cut = cut.with_columns(pos=pl.int_range(pl.len(), dtype=pl.Int64).over("seg"))
    # an order-sensitive digest of each segment: its names at their positions
    cut = cut.with_columns(h=(pl.struct("code", "pos").hash() % (1 << 40)).cast(pl.Int64))
    segs = (
        cut.group_by("seg")
        .agg(
            n=pl.len(),
            h=pl.col("h").sum(),
            dur_ns=pl.col("dur_ns").sum(),
            start_ns=pl.col("at_ns").first(),
        )
        .sort("seg")
    )
    last = int(segs["seg"].max())  # type: ignore[arg-type]
    middle = segs.filter((pl.col("seg") > 1) & (pl.col("seg") < last))
    if middle.height < 1:
        return none
    modal = middle.group_by(["n", "h"]).agg(k=pl.len()).sort(["k", "n"], descending=True).row(0)
    length, digest = int(modal[0]), int(modal[1])
    if length < MIN_CYCLE_KERNELS:
        return none
    # the last segment is a run of the cycle where its first kernels are the cycle's first,
    # `CUT_SHARE` of them or more (the cycle's kernels before its name's run, in a loop whose
    # iteration starts before it, have no next iteration to come from)
    tail = cut.filter((pl.col("seg") == last) & (pl.col("pos") < length))
    runs_of = middle.filter((pl.col("n") == length) & (pl.col("h") == digest))
    model = cut.filter(pl.col("seg") == runs_of["seg"][0]).head(tail.height)
    whole_last = tail.height >= CUT_SHARE * length and int(tail["h"].sum()) == int(model["h"].sum())
    runs = runs_of["dur_ns"].to_list()
    runs += [int(tail["dur_ns"].sum())] if whole_last else []
    segments = middle.height + int(whole_last)
    held_ns = int(middle["dur_ns"].sum()) + (runs[-1] if whole_last else 0)
    if (
        len(runs) < 2
        or len(runs) < CYCLE_MATCH_SHARE * segments
        or sum(runs) < CYCLE_MATCH_SHARE * held_ns
    ):
        return none
    median = sorted(runs)[len(runs) // 2]
    steady = sum(abs(r - median) <= CYCLE_TOLERANCE * median for r in runs)
    if steady < CYCLE_STEADY_SHARE * len(runs):
        return none
    # the first iteration from the stream's first kernel: what ran before the cycle's first
    # run (a cold call's set-up) is its work, and a slow first one is left out as warm-up
    starts = [int(seq.select(pl.col("at_ns").min()).item()), *segs["start_ns"].to_list()[1:]]
    ends: list[int] = starts[1:]
    if whole_last:  # to its cycle's last launch, or a steady iteration's length after its
        # start where that is later and no other kernel is launched on the stream before
        after = cut.filter((pl.col("seg") == last) & (pl.col("pos") == length))["at_ns"]
        steady_ns = sorted(b - a for a, b in itertools.pairwise(starts[1:]))
        typical = starts[-1] + steady_ns[len(steady_ns) // 2]
        cap = int(after[0]) if after.len() else typical
        ends.append(max(int(tail.select(pl.col("done_ns").max()).item()), min(typical, cap)))
    spanned = work.filter(pl.col("at_ns").is_between(starts[0], ends[-1], closed="left"))
    if int(spanned["dur_ns"].sum()) < MIN_CYCLE_COVERAGE * int(work["dur_ns"].sum()):
        return none
    rank = int(seq["rank"][0])
    shown = anchor if len(anchor) <= 60 else anchor[:57] + "..."
    call = f"a cycle of {length} kernels from {shown}"
    n = len(ends)
    return pl.DataFrame(
        {
            "rank": [rank] * n,
            "step": list(range(1, n + 1)),
            "name": [call] * n,
            "call": [call] * n,
            "start_ns": starts[:n],
            "end_ns": ends,
        },
        schema=_CALL_SCHEMA,
    )
