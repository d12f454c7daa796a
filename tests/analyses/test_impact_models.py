"""The impact models (what fixing a finding saves per steady step, and the most it can) against
plain loops over the summary rows they are computed from, on recorded GPU traces.

Each model is an analysis (`Metrics.<name>_model`); the rules only read it. The loops below
restate each model's docs one row at a time, in plain Python."""

from __future__ import annotations

import gzip
import statistics
from functools import cache
from pathlib import Path

import orjson
import polars as pl
import pytest

from traceanalyzer.analyses import Metrics, analyze
from traceanalyzer.analyses.gpu.shapes import fewer_rows_ns
from traceanalyzer.readers import read

GPU = Path(__file__).parent.parent / "data" / "gpu"


@cache
def _metrics(name: str) -> Metrics:
    return analyze(read(GPU / name))


def _steps(m: Metrics) -> dict[tuple[int, int], int]:
    """Steady steps per (rank, device), counted row by row."""
    out: dict[tuple[int, int], int] = {}
    for s in m.steps.steady.iter_rows(named=True):
        out[s["rank"], s["device"]] = out.get((s["rank"], s["device"]), 0) + 1
    return out


def _per_device_step(m: Metrics, ns: int, rank: int, device: int) -> int | None:
    n = _steps(m).get((rank, device), 0) if m.basis == "steps" else 1
    return ns // n if n else None


@pytest.mark.parametrize("name", ["host_sync.json.gz", "host_sync_gpu_bound.json.gz"])
def test_sync_model_against_a_loop(name: str) -> None:
    m = _metrics(name)
    limit = m.idle.launch_gap_max_ns
    models = {s.rank: s for s in m.sync_model}
    assert models, name
    for rank, got in models.items():
        bubble = 0
        for g in m.idle.gaps.iter_rows(named=True):
            if g["rank"] != rank or g["sync_ns"] <= 0:
                continue
            ahead = g["start_ns"] - g["sync_start_ns"] if g["sync_start_ns"] is not None else 0
            bubble += g["sync_ns"] + min(g["gap_ns"] - g["sync_ns"], max(ahead, limit))
        idle = max(d["idle_ns"] for d in m.devices.rows() if d["rank"] == rank)
        n = max(c for (r, _d), c in _steps(m).items() if r == rank)
        assert got.idle_with_refill_ns == bubble > 0
        assert got.rank_idle_ns == idle
        assert (got.impact_ns, got.ceiling_ns) == (bubble // n, idle // n)
        assert got.impact_ns <= got.ceiling_ns
        # the sites called at least once per step, most per step first
        sites = [
            s
            for s in m.idle.sync_sites.iter_rows(named=True)
            if s["rank"] == rank and s["per_step"] is not None and s["per_step"] >= 1.0
        ]
        sites.sort(key=lambda s: (-s["per_step"], -s["idle_ns"], s["name"], s["op"], s["site"]))
        frequent = got.frequent(1.0)
        assert list(frequent.rows) == sites and sites
        assert frequent.per_step == pytest.approx(sum(s["per_step"] for s in sites), rel=1e-12)
        assert frequent.idle_ns == sum(s["idle_ns"] for s in sites)


def test_pageable_model_against_a_loop() -> None:
    """Both directions: each device's pageable copies less the same bytes at the pinned rate
    (its own pinned copies of the direction, else of the other, else the GPU's assumed
    link: H100, PCIe 5.0 x16, 50 GB/s), no more than their time outside kernels."""
    m = _metrics("pageable_copies.json.gz")
    sums: dict[tuple[int, int, str, str], list[int]] = {}
    for c in m.copies.summary.iter_rows(named=True):
        if c["copy_kind"] in ("HtoD", "DtoH"):
            host = c["src_memory"] if c["copy_kind"] == "HtoD" else c["dst_memory"]
            key = (c["rank"], c["device"], c["copy_kind"], host)
            total = sums.setdefault(key, [0, 0, 0, 0])
            total[0] += c["count"]
            total[1] += c["bytes"] or 0
            total[2] += c["time_ns"] or 0
            total[3] += c["under_kernels_ns"]
    expected = []
    for direction in ("HtoD", "DtoH"):
        other = "DtoH" if direction == "HtoD" else "HtoD"
        for (rank, device, way, memory), (count, size, time, under) in sorted(sums.items()):
            if memory != "pageable" or way != direction:
                continue
            pinned = sums.get((rank, device, direction, "pinned"), [0, 0, 0, 0])
            if pinned[1] < 1_000_000:
                pinned = sums.get((rank, device, other, "pinned"), pinned)
            gbps = 50.0
            if pinned[1] >= 1_000_000 and pinned[2]:
                gbps = max(pinned[1] / pinned[2], 50.0 / 4)
            excess = min(max(0, round(time - size / gbps)), max(0, time - under))
            expected.append(
                (
                    (rank, device, direction, count, size, time, gbps, excess),
                    (
                        _per_device_step(m, excess, rank, device),
                        _per_device_step(m, time, rank, device),
                    ),
                )
            )
    got = [
        (
            (c.rank, c.device, c.direction, c.count, c.bytes, c.time_ns, c.pinned_gbps),
            c.excess_ns,
            (c.impact_ns, c.ceiling_ns),
        )
        for c in m.pageable_model
    ]
    assert [(g[0] + (g[1],), g[2]) for g in got] == expected and expected
    assert all(0 < c.excess_ns <= c.time_ns for c in m.pageable_model)


def test_copies_under_kernels_against_a_loop() -> None:
    """`under_kernels_ns`: per copy, its overlap with the union of the device's kernels, by
    a plain sweep over the trace's events."""
    path = GPU / "copy_pageable_dtoh.json.gz"
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    kernels = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "kernel"
    )
    merged: list[list[float]] = []
    for a, b in kernels:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    m = _metrics("copy_pageable_dtoh.json.gz")
    wins = m.steps.windows.row(0, named=True)
    lo, hi = wins["start_ns"] / 1e3, wins["end_ns"] / 1e3
    under = 0.0
    for e in doc["traceEvents"]:
        if e.get("cat") != "gpu_memcpy" or "DtoH" not in e["name"] or "Pageable" not in e["name"]:
            continue
        a, b = e["ts"], e["ts"] + e["dur"]
        if b < lo or a > hi:
            continue
        under += sum(max(0.0, min(b, y) - max(a, x)) for x, y in merged)
    (row,) = m.copies.summary.filter(
        (pl.col("copy_kind") == "DtoH") & (pl.col("dst_memory") == "pageable")
    ).iter_rows(named=True)
    assert row["under_kernels_ns"] == pytest.approx(under * 1e3, abs=row["count"] * 2)


def _mean_by_rank(rows: list[dict], column: str, **match: object) -> dict[int, float]:
    """The mean of `column` per rank over the rows that match."""
    sums: dict[int, list[float]] = {}
    for r in rows:
        if all(r[k] == v for k, v in match.items()):
            total = sums.setdefault(r["rank"], [0.0, 0.0])
            total[0] += r[column]
            total[1] += 1
    return {rank: s / n for rank, (s, n) in sums.items()}


@pytest.mark.parametrize("name", ["fp32_no_tc.json.gz", "tf32.json.gz"])
def test_tensor_core_model_against_a_loop(name: str) -> None:
    m = _metrics(name)
    saved = _mean_by_rank(m.critical_path.what_if.to_dicts(), "saved_ns", scenario="gemm_2x")
    on_path = _mean_by_rank(m.critical_path.steps.to_dicts(), "gpu_gemm_ns")
    got = {(d.rank, d.device): d for d in m.tensor_core_model}
    assert len(got) == m.devices.summary.height
    off_somewhere = False
    for d in m.devices.rows():
        rank, device = d["rank"], d["device"]
        off = max(0, d["gemm_ns"] - (d["tc_ns"] or 0) - (d["unknown_ns"] or 0))
        share = off / d["gemm_ns"] if d["gemm_ns"] else 0.0
        if rank in saved and rank in on_path:  # the critical path's what-if, scaled
            impact = round(
                min(round(saved[rank]) * share * 2 / 3 / 0.5, on_path[rank] * share * 2 / 3)
            )
        else:
            per_step = _per_device_step(m, off, rank, device)
            impact = round(per_step * 2 / 3) if per_step is not None else None
        model = got[rank, device]
        assert (model.gemm_ns, model.non_tc_ns) == (d["gemm_ns"], off)
        assert model.impact_ns == impact
        assert model.ceiling_ns == _per_device_step(m, off, rank, device)
        off_somewhere |= off > 0
        assert model.impact_ns is None or 0 <= model.impact_ns <= (model.ceiling_ns or 0)
    assert off_somewhere or name == "tf32.json.gz"


def test_shape_model_against_a_loop() -> None:
    """odd_shapes: an H100 whose GEMMs are all misaligned: priced at 80 % of the bf16 peak."""
    m = _metrics("odd_shapes.json.gz")
    names = {(d.rank, d.device): d.name for d in read(GPU / "odd_shapes.json.gz").meta.devices}
    got = {(d.rank, d.device): d for d in m.shape_model}
    assert len(got) == m.devices.summary.height
    for d in m.devices.rows():
        rank, device = d["rank"], d["device"]
        rows = [
            s
            for s in m.shapes.matmuls.iter_rows(named=True)
            if (s["rank"], s["device"]) == (rank, device)
        ]
        odd = [
            s
            for s in rows
            if s["misaligned"] is not None and not (s["misaligned"] == "M" and s["m"] < s["align"])
        ]
        flop_ops = ("aten::mm", "aten::addmm", "aten::linear")
        aligned = [
            s
            for s in rows
            if s["misaligned"] is None
            and s["align"] is not None
            and s["op_name"] in flop_ops
            and s["kernel_ns"] > 0
        ]
        assert not aligned  # every GEMM of this trace is misaligned: the GPU's peak prices it
        assert "H100" in (names[rank, device] or "")
        tput = 990e12 * 0.8
        excess = sum(
            max(0.0, s["kernel_ns"] - 2 * s["m"] * s["n"] * s["k"] * s["calls"] / tput * 1e9)
            for s in odd
            if s["op_name"] in flop_ops
        )
        model = got[rank, device]
        assert model.misaligned.to_dicts() == odd
        assert model.misaligned_ns == sum(s["kernel_ns"] for s in odd) > 0
        assert model.reference_flops == tput
        assert model.excess_ns is not None and abs(model.excess_ns - excess) <= 1
        assert model.token_rows == {
            s["m"] for s in rows if s["op_name"] in ("aten::linear", "aten::addmm")
        }
        assert model.impact_ns == _per_device_step(m, model.excess_ns, rank, device)
        assert model.ceiling_ns == _per_device_step(m, model.misaligned_ns, rank, device)
        assert model.impact_ns is not None and model.ceiling_ns is not None
        assert 0 < model.impact_ns <= model.ceiling_ns


def test_overlap_model_against_a_loop() -> None:
    """sampled_2rank: two ranks whose matched all-reduces wait for each other, with less
    compute alone than exposed transfers."""
    m = analyze(read(Path(__file__).parents[2] / "sample_traces" / "sampled_2rank"))
    per_rank = {r["rank"]: r for r in m.collective_split.per_rank.iter_rows(named=True)}
    got = {(d.rank, d.device): d for d in m.overlap_model}
    assert len(got) == m.devices.summary.height
    for d in m.devices.rows():
        rank, device = d["rank"], d["device"]
        exposed, comm = d["exposed_comm_ns"], d["comm_ns"]
        transfer = per_rank[rank]["exposed_transfer_ns"]  # matched across the two ranks
        hideable = min(exposed, transfer)
        alone = max(0, d["busy_ns"] - comm)
        colls = [
            c
            for c in m.communication.collectives.iter_rows(named=True)
            if (c["rank"], c["device"]) == (rank, device)
        ]
        colls.sort(key=lambda c: (-c["exposed_ns"], c["collective"]))
        model = got[rank, device]
        assert [c["exposed_ns"] for c in model.collectives] == [c["exposed_ns"] for c in colls]
        assert (model.hideable_ns, model.compute_alone_ns) == (hideable, alone)
        assert model.wait_ns == per_rank[rank]["wait_ns"]
        assert model.impact_ns == _per_device_step(m, min(hideable, alone), rank, device)
        assert model.ceiling_ns == _per_device_step(m, min(exposed, alone), rank, device)
        assert model.impact_ns is not None and model.ceiling_ns is not None
        assert 0 < model.impact_ns <= model.ceiling_ns
        assert hideable < exposed  # the waits for the other rank are not overlap's to hide


@pytest.mark.parametrize("name", ["grad_scaler_fp16.json.gz", "startup_nosteps.json.gz"])
def test_cast_model_against_a_loop(name: str) -> None:
    m = _metrics(name)
    casts = count = compute = 0
    for c in m.kernels.classes.iter_rows(named=True):
        if c["kernel_class"] != "comm":
            compute += c["total_ns"]
        if c["kernel_class"] == "copy_cast":
            casts, count = c["total_ns"], c["count"]
    if m.basis == "trace":  # the window is one step
        ceiling: int | None = casts
        impact: int | None = casts
    else:
        ceiling = round(casts / max(_steps(m).values()))
        impact = None
    if m.critical_path.steps.height:  # the worst rank's mean copy/cast time on the path
        impact = round(
            max(_mean_by_rank(m.critical_path.steps.to_dicts(), "gpu_copy_cast_ns").values())
        )
    if impact is not None and ceiling is not None:
        impact = min(impact, ceiling)
    model = m.cast_model
    assert (model.copy_cast_ns, model.copy_cast_count, model.compute_ns) == (casts, count, compute)
    assert (model.impact_ns, model.ceiling_ns) == (impact, ceiling)
    assert casts > 0 and model.top_kernels
    assert all(k["total_ns"] <= casts for k in model.top_kernels)


def test_memory_runway_against_a_loop() -> None:
    """leak: a step peak that grows every step on an H100 of known memory."""
    m = _metrics("leak.json.gz")
    sizes = {(d.rank, d.device): d.memory_bytes for d in read(GPU / "leak.json.gz").meta.devices}
    assert len(m.memory.runway) == m.memory.growth.height > 0
    for g, row in zip(m.memory.runway, m.memory.growth.iter_rows(named=True), strict=True):
        peaks = [
            p["peak_bytes"]
            for p in m.memory.peaks.iter_rows(named=True)
            if (p["rank"], p["device"]) == (g.rank, g.device)
        ]
        total = sizes[g.rank, g.device]
        assert total and row["per_step_bytes"] > 0
        left = total - row["last_peak_bytes"]
        assert (g.rank, g.device, g.growth_bytes) == (
            row["rank"],
            row["device"],
            row["growth_bytes"],
        )
        assert g.step_peaks_bytes == tuple(peaks) and len(peaks) == g.steps
        assert g.device_memory_bytes == total
        assert g.steps_to_oom == max(0, int(left // row["per_step_bytes"]))


@pytest.mark.parametrize(
    "name", ["cold_start.json.gz", "startup_nosteps.json.gz", "cold_first_call.json.gz"]
)
def test_startup_model_against_a_loop(name: str) -> None:
    """cold_first_call holds the process's start-up in its window; cold_start's warm-up step
    is left out of the window, and its start-up with it, as is startup_nosteps' first
    iteration (its kernels' cycle gives the iterations)."""
    m = _metrics(name)
    got = {(d.rank, d.device): d for d in m.startup_model}
    assert len(got) == m.devices.summary.height
    for d in m.devices.rows():
        key = (d["rank"], d["device"])
        once = [r for r in m.startup.idle.iter_rows(named=True) if (r["rank"], r["device"]) == key]
        calls = [
            c for c in m.startup.calls.iter_rows(named=True) if (c["rank"], c["device"]) == key
        ]
        kept: list[dict] = []
        for c in calls[:50]:  # the longest first; one inside a listed one is the same work
            if not any(k["start_ns"] <= c["start_ns"] <= c["end_ns"] <= k["end_ns"] for k in kept):
                kept.append(c)
        model = got[key]
        assert model.window_ns == d["window_ns"]
        assert model.startup_ns == sum(r["startup_ns"] for r in once)
        assert model.idle_ns == sum(r["idle_ns"] for r in once)
        assert [c["name"] for c in model.calls] == [c["name"] for c in kept[:3]]
        assert [c["dur_ns"] for c in model.calls] == sorted(
            (c["dur_ns"] for c in model.calls), reverse=True
        )
    assert any(d.startup_ns > 0 and d.calls for d in m.startup_model) == (
        name == "cold_first_call.json.gz"
    )


def test_step_counts_against_a_loop() -> None:
    m = _metrics("host_sync.json.gz")
    distinct: dict[int, set[int]] = {}
    for s in m.steps.steady.iter_rows(named=True):
        distinct.setdefault(s["rank"], set()).add(s["step"])
    assert m.steps.counts.by_steps
    assert dict(m.steps.counts.counts) == _steps(m)
    assert dict(m.steps.counts.ranks) == {r: len(s) for r, s in distinct.items()}
    assert m.steps.counts.most_on(0) == max(_steps(m).values())


@pytest.mark.parametrize("name", ["gelu_manual.json.gz", "memory_bound.json.gz"])
def test_memory_impact_model_against_a_loop(name: str) -> None:
    """The device whose fusion saves most, priced from its memory model row: the
    memory_bound_2x what-if scaled to the fusible share, under the share of the path's
    memory-bound time and under the roof's ceiling."""
    m = _metrics(name)
    saved = _mean_by_rank(
        m.critical_path.what_if.to_dicts(), "saved_ns", scenario="memory_bound_2x"
    )
    on_path = _mean_by_rank(m.critical_path.steps.to_dicts(), "gpu_memory_bound_ns")
    best: tuple[int, int | None, dict] | None = None
    for row in m.fusion.model.iter_rows(named=True):
        rank, device = row["rank"], row["device"]
        n = _steps(m).get((rank, device), 0) if m.basis == "steps" else 1
        share = row["fusible_share"]
        # the chains' casts are priced with them: the what-if, which shortens the
        # memory-bound kernels only, scaled by their time with the casts over without
        total = row["memory_bound_ns"] + row["cast_ns"]
        scale = total / row["memory_bound_ns"] if row["memory_bound_ns"] else 1.0
        ceiling = (row["ceiling_ns"] if share is not None else total) // n
        share = 0.5 if share is None else share
        if rank in saved and rank in on_path:
            price = min(round(saved[rank]) * share / 0.5, on_path[rank] * share) * scale
        else:
            price = total * share / n
        price = max(0, round(min(price, ceiling)))
        if best is None or price > best[0]:
            best = (price, ceiling, row)
    assert best is not None and best[0] > 0
    got = m.memory_impact_model
    assert (got.impact_ns, got.ceiling_ns, got.model) == best
    patterns = [
        p["pattern"]
        for p in m.fusion.patterns.iter_rows(named=True)
        if (p["rank"], p["device"]) == (best[2]["rank"], best[2]["device"])
    ]
    assert list(got.patterns) == patterns
    assert got.top_chain is not None and got.top_chain["pattern"] == patterns[0]


def test_fewer_rows_against_a_loop() -> None:
    """decode_greedy_b1: one sequence decoded a token at a time: most GEMM time in M = 1
    products."""
    m = _metrics("decode_greedy_b1.json.gz")
    rows = list(m.shapes.matmuls.iter_rows(named=True))
    few = sum(s["kernel_ns"] for s in rows if s["m"] < 8)
    assert fewer_rows_ns(m.shapes.matmuls, 8) == (few, sum(s["kernel_ns"] for s in rows))
    assert few > sum(s["kernel_ns"] for s in rows) / 2


def _host_bound_inputs(m: Metrics) -> tuple[bool, dict[int, float]]:
    """Whether the run replays CUDA graphs (a graph launch among its host calls), and each
    rank's mean saving per sampled step with host time closed."""
    graphs = any("GraphLaunch" in n for n in m.facts.host)
    what_if = m.critical_path.what_if.to_dicts()
    return graphs, _mean_by_rank(what_if, "saved_ns", scenario="host_gaps_closed")


def _launch_bound(d: dict, graphs: bool) -> bool:
    """Kernels averaging under 10 µs over at least 100, and waits inside steps of at most
    100 µs per kernel (not in a run that replays CUDA graphs)."""
    count, inside = d["kernel_count"], d["host_wait_ns"] - d["host_wait_between_steps_ns"]
    return (
        not graphs
        and count >= 100
        and d["kernel_ns"] < 10_000 * count
        and inside <= 100_000 * count
    )


def _capped(saving: float | None, per_step: int | None) -> int | None:
    if saving is None:
        return per_step
    return round(saving) if per_step is None else min(round(saving), per_step)


@pytest.mark.parametrize(
    "name",
    [
        "slow_loader.json.gz",
        "cpu_preprocess_inside.json.gz",
        "launch_bound_train.json.gz",
        "startup_steps.json.gz",
        "cuda_graphs.json.gz",
    ],
)
def test_host_wait_model_against_a_loop(name: str) -> None:
    """TA001's model: the host-wait idle less start-up (only the waits between steps where
    the device is launch-bound), priced at the critical path's host_gaps_closed saving, no
    more than that wait per step."""
    m = _metrics(name)
    graphs, saved = _host_bound_inputs(m)
    once = {(s.rank, s.device): s.idle_ns for s in m.startup_model}
    got = list(m.host_wait_model)
    assert len(got) == m.devices.summary.height
    waited = False
    for model, d in zip(got, m.devices.rows(), strict=True):
        rank, device = d["rank"], d["device"]
        assert (model.rank, model.device) == (rank, device)
        bound = _launch_bound(d, graphs)
        wait = d["host_wait_between_steps_ns"] if bound else d["host_wait_ns"]
        startup = min(wait, once.get((rank, device), 0))
        wait -= startup
        between = min(d["host_wait_between_steps_ns"], wait)
        phases: dict[str, list[int]] = {}
        for s in m.host_phases.steps.iter_rows(named=True):
            if s["rank"] == rank:
                for p in ("data_loading", "optimizer", "backward", "forward", "other"):
                    phases.setdefault(p, []).append(s[f"{p}_ns"])
        assert model.launch_bound == bound
        assert (model.host_wait_ns, model.startup_idle_ns) == (wait, startup)
        assert (model.between_steps_ns, model.inside_steps_ns) == (between, wait - between)
        assert model.host_wait_share == (wait / d["window_ns"] if d["window_ns"] else None)
        assert model.phases == (
            {p: round(statistics.median(v)) for p, v in phases.items()} if phases else None
        )
        per_step = _per_device_step(m, wait, rank, device)
        assert model.impact_ns == _capped(saved.get(rank), per_step)
        idle = max(0, d["idle_ns"] - once.get((rank, device), 0))
        assert model.ceiling_ns == _per_device_step(m, idle, rank, device)
        waited |= wait > 0
    assert waited or graphs  # cuda_graphs: replayed, GPU-dense


@pytest.mark.parametrize(
    "name", ["launch_bound_train.json.gz", "compiled.json.gz", "cuda_graphs.json.gz"]
)
def test_launch_model_against_a_loop(name: str) -> None:
    """TA003's model: the short launch gaps plus, where the device is launch-bound, its waits
    inside steps, priced at the critical path's host_gaps_closed saving, no more than those
    waits per step; the optimizer's share of it where the rank's tiny kernels come from
    optimizer.step."""
    m = _metrics(name)
    graphs, saved = _host_bound_inputs(m)
    assert graphs == (name == "cuda_graphs.json.gz")
    got = list(m.launch_model)
    assert len(got) == m.devices.summary.height
    for model, d in zip(got, m.devices.rows(), strict=True):
        rank, device = d["rank"], d["device"]
        assert (model.rank, model.device) == (rank, device)
        inside = 0
        if _launch_bound(d, graphs):
            inside = d["host_wait_ns"] - d["host_wait_between_steps_ns"]
        launch = d["launch_overhead_ns"] + inside
        tiny = optimizer = 0
        for k in m.host_phases.kernels.iter_rows(named=True):
            if k["rank"] == rank:
                tiny += k["tiny"]
                optimizer += k["tiny"] if k["phase"] == "optimizer" else 0
        share = optimizer / tiny if tiny else None
        impact = _capped(saved.get(rank), _per_device_step(m, launch, rank, device))
        assert (model.short_gap_ns, model.inside_steps_ns) == (d["launch_overhead_ns"], inside)
        assert model.launch_overhead_ns == launch
        assert model.launch_overhead_share == (launch / d["window_ns"] if d["window_ns"] else None)
        assert model.mean_kernel_ns == d["kernel_ns"] // d["kernel_count"]
        assert model.optimizer_share == share
        assert model.impact_ns == impact
        assert model.optimizer_impact_ns == (
            None if impact is None or share is None else round(impact * share)
        )
        assert model.ceiling_ns == _per_device_step(m, d["idle_ns"], rank, device)
    if name == "launch_bound_train.json.gz":  # launch-bound: its waits inside steps count
        assert got[0].inside_steps_ns > 0 and (got[0].optimizer_share or 0) > 0.3
