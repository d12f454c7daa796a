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


def repeated_calls(timeline: Timeline) -> tuple[pl.DataFrame, str | None]:
    """The iterations of each rank (see the module docstring) as step markers: rank, step
    (1, 2, ...), name (`iteration 1`, ...), start_ns, end_ns; with the name of the call range
    whose repeats they are (the first rank's). Empty, and None, where nothing repeats."""
    found = _iterations(timeline)
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
