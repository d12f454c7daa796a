"""Launch shapes: the occupancy arithmetic on shapes worked out by hand, the underfilled
launches of small traces built for each case, and a real trace's shapes against a plain loop
over its kernel events."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import orjson
import polars as pl
import pytest

from tests.conftest import REPO
from traceanalyzer import api
from traceanalyzer.analyses.counters import launch_shapes as ls
from traceanalyzer.model import DeviceInfo
from traceanalyzer.readers import read
from traceanalyzer.rules.examples import (
    Event,
    device_properties,
    kernel,
    launch,
    step,
    synchronize,
    write_example,
)

GPU = REPO / "tests" / "data" / "gpu"
H100 = DeviceInfo(
    rank=0,
    device=0,
    name="NVIDIA H100 80GB HBM3",
    compute_capability="9.0",
    sm_count=132,
    max_threads_per_sm=2048,
    regs_per_sm=65536,
    shared_mem_per_sm=233472,
)


def _shape(grid: list[int], block: list[int], regs: int | None, smem: int | None) -> dict:
    frame = pl.DataFrame(
        {
            "rank": [0],
            "device": [0],
            "grid": [grid],
            "block": [block],
            "registers": [regs],
            "shared_mem_bytes": [smem],
        },
        schema={
            "rank": pl.Int32,
            "device": pl.Int32,
            "grid": pl.List(pl.Int32),
            "block": pl.List(pl.Int32),
            "registers": pl.Int32,
            "shared_mem_bytes": pl.Int64,
        },
    )
    return ls.shaped(frame.lazy(), ls.device_limits([H100])).collect().row(0, named=True)


@pytest.mark.parametrize(
    ("grid", "block", "regs", "smem", "per_sm", "limited", "occupancy", "fill"),
    [
        # 8 warps a block: 64 / 8 = 8 by warps; 32 regs x 32 = 1024 a warp, 64 warps: 8
        ([1024, 1, 1], [256, 1, 1], 32, 0, 8, "warps", 1.0, 1.0),
        # 168 regs: 5376 a warp rounded to 5376 (21 x 256); 65536 // 5376 = 12 warps: 1 block
        # of 12 warps (384 threads); 213188 + 1024 reserved -> 214272 a block: 1 by smem too
        # (a tie: the first of warps, blocks, registers, shared memory is named)
        ([2, 66, 1], [384, 1, 1], 168, 213188, 1, "registers", 12 / 64, 1.0),
        # one block of 1024 threads: 2 resident by warps; it fills 1 of 132 SMs
        ([1, 1, 1], [1024, 1, 1], 16, 0, 2, "warps", 1.0, 1 / 132),
        # 140 blocks of one per SM (200000 B of smem): 1.06 waves, the last 8 blocks: 140 / 264
        ([140, 1, 1], [128, 1, 1], 64, 200000, 1, "shared memory", 4 / 64, 140 / 264),
        # 64 tiny blocks, 40 regs: 40 x 32 = 1280 a warp -> 51 warps; 51 // 1 = 51 blocks,
        # capped at 32 by the block slots
        ([64, 1, 1], [32, 1, 1], 40, 0, 32, "blocks", 0.5, 64 / 132),
    ],
)
def test_occupancy_by_hand(
    grid: list[int],
    block: list[int],
    regs: int,
    smem: int,
    per_sm: int,
    limited: str,
    occupancy: float,
    fill: float,
) -> None:
    r = _shape(grid, block, regs, smem)
    assert r["blocks"] == math.prod(grid)
    assert r["blocks_per_sm"] == per_sm
    assert r["limited_by"] == limited
    assert r["occupancy_share"] == pytest.approx(occupancy)
    assert r["sm_fill_share"] == pytest.approx(fill)


def test_unknown_registers_and_amd_limits() -> None:
    """Without registers or shared memory (ROCm), warps and block slots are the limits; an
    AMD GPU's wavefronts are 64 lanes."""
    mi300 = DeviceInfo(rank=0, device=0, name="AMD Instinct MI300X", sm_count=304)
    limits = ls.device_limits([mi300])
    assert limits.row(0, named=True)["warp_size"] == 64
    frame = pl.DataFrame(
        {"rank": [0], "device": [0], "grid": [[16, 1, 1]], "block": [[256, 1, 1]]},
        schema={
            "rank": pl.Int32,
            "device": pl.Int32,
            "grid": pl.List(pl.Int32),
            "block": pl.List(pl.Int32),
        },
    ).with_columns(registers=pl.lit(None, pl.Int32), shared_mem_bytes=pl.lit(None, pl.Int64))
    r = ls.shaped(frame.lazy(), limits).collect().row(0, named=True)
    assert r["blocks_per_sm"] == 8  # 32 wavefronts / 4 a block
    assert r["sm_fill_share"] == pytest.approx(16 / 304)


def _report(tmp_path: Path, events: list[Event]) -> api.Done:
    return api.analyze_path(write_example([device_properties(), *events], tmp_path, "t"))


def test_a_kernel_beside_another_stream_is_priced_for_its_time_alone(tmp_path: Path) -> None:
    """A one-block kernel of 1000 us, 600 us of it beside a full kernel on another stream:
    it runs alone 400 us, and the fill model removes 400 us at most (1000 - 1000/132 would
    be 992)."""
    events = [
        step(1, 100, 1040),
        launch(105, 2, 1),
        kernel(120, 1000, "one_block", corr=1, grid=[1, 1, 1], block=[256, 1, 1]),
        launch(108, 2, 2),
        kernel(120, 600, "full", stream=8, corr=2, grid=[4096, 1, 1], block=[256, 1, 1]),
        synchronize(112, 1010),
    ]
    row = _report(tmp_path, events).metrics.launch_shapes.per_device.row(0, named=True)
    assert row["underfilled_count"] == 1
    assert row["underfilled_ns"] == 1_000_000
    assert row["alone_ns"] == 400_000
    assert row["removed_ns"] == 400_000


def test_short_launches_and_chunk_remainders_are_not_underfilled(tmp_path: Path) -> None:
    """A 10 us one-block launch is fixed cost; a name whose other launches fill the GPU (a
    multi-tensor apply's last chunk) is chunked work: neither is counted."""
    events = [
        step(1, 100, 400),
        launch(101, 1, 1),
        kernel(110, 10, "tiny_reduce", corr=1, grid=[1, 1, 1], block=[512, 1, 1]),
        launch(102, 1, 2),
        kernel(130, 200, "chunked", corr=2, grid=[264, 1, 1], block=[512, 1, 1]),
        launch(103, 1, 3),
        kernel(340, 50, "chunked", corr=3, grid=[8, 1, 1], block=[512, 1, 1]),
        synchronize(104, 300),
    ]
    done = _report(tmp_path, events)
    assert done.metrics.launch_shapes.per_device.row(0, named=True)["underfilled_count"] == 0
    assert not [f for f in done.report.findings if f.rule == "TA025"]


def test_the_report_carries_launch_shapes(tmp_path: Path) -> None:
    events = [
        step(1, 100, 2040),
        launch(105, 2, 1),
        kernel(120, 1900, "loop_kernel", corr=1, grid=[1, 1, 1], block=[1024, 1, 1]),
        synchronize(110, 1915),
    ]
    doc = _report(tmp_path, events).report.to_json_dict()
    (dev,) = doc["devices"]
    assert dev["launch"]["sm_count"] == 132
    assert dev["launch"]["sm_fill_share"] == pytest.approx(1 / 132, rel=1e-4)
    assert dev["launch"]["underfilled_count"] == 1
    (k,) = doc["kernels"]["launch_shapes"]
    assert (k["name"], k["blocks"], k["threads_per_block"], k["origin"]) == (
        "loop_kernel",
        1,
        1024,
        "custom",
    )
    assert "but its kernels fill 1% of the SMs" in doc["verdict"]["headline"]
    (f,) = [f for f in doc["diagnoses"] if f["rule"] == "TA025"]
    assert f["impact_ns"] <= f["evidence"]["impact_ceiling_ns"]


def _plain_shapes(path: Path) -> list[tuple[int, int, int | None]]:
    """(blocks, blocks per SM, fill in millionths) of every kernel with a grid, in file order,
    by a plain loop over the JSON: the occupancy calculator's steps written out."""
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    props = doc["deviceProperties"][0]
    sms, max_warps = props["numSms"], props["maxThreadsPerMultiprocessor"] // 32
    regs_sm, smem_sm = props["regsPerMultiprocessor"], props["sharedMemPerMultiprocessor"]
    out = []
    for ev in doc["traceEvents"]:
        a = ev.get("args") or {}
        if ev.get("cat") != "kernel" or "grid" not in a:
            continue
        blocks = a["grid"][0] * a["grid"][1] * a["grid"][2]
        threads = a["block"][0] * a["block"][1] * a["block"][2]
        warps = -(-threads // 32)
        limits = [32, max_warps // warps]
        regs = a.get("registers per thread") or 0
        if regs:
            per_warp = -(-regs * 32 // 256) * 256
            limits.append((regs_sm // per_warp) // warps)
        smem = a.get("shared memory") or 0
        if smem:
            limits.append(smem_sm // (-(-(smem + 1024) // 128) * 128))
        per_sm = min(limits)
        if blocks < sms:
            fill = blocks / sms
        else:
            waves = blocks / (sms * per_sm)
            fill = waves / math.ceil(waves) if waves > 1 else 1.0
        out.append((blocks, per_sm, round(fill * 1e6)))
    return out


def test_real_trace_shapes_against_a_plain_loop() -> None:
    """Every kernel of a compiled H100 training trace (Triton, nvjet, cuDNN attention):
    blocks, blocks per SM and SM fill as the plain loop computes them."""
    path = GPU / "compiled.json.gz"
    t = read(path)
    k = (
        t.events.filter(pl.col("kind") == "kernel")
        .sort("start_ns", maintain_order=True)
        .select("rank", "device", "start_ns", "grid", "block", "registers", "shared_mem_bytes")
    )
    got = (
        ls.shaped(k.lazy(), ls.device_limits(t.meta.devices))
        .collect()
        .select("blocks", "blocks_per_sm", (pl.col("sm_fill_share") * 1e6).round().cast(pl.Int64))
        .rows()
    )
    plain = _plain_shapes(path)
    assert len(got) == len(plain) > 1000
    assert sorted(got) == sorted(plain)


def test_nsight_compute_measures_the_underfilled_kernel(tmp_path: Path) -> None:
    """With `--ncu`, TA025's evidence carries what Nsight Compute measured of the kernel: a
    one-block kernel's SMs at 1 % of their throughput."""
    from tests.readers.test_ncu import kernel_row, ncu_csv

    events = [
        device_properties(),
        *[
            e
            for i in range(3)
            for e in (
                step(i + 1, 100 + 2000 * i, 1940),
                launch(105 + 2000 * i, 2, i + 1),
                kernel(
                    120 + 2000 * i,
                    1900,
                    "loop_kernel",
                    corr=i + 1,
                    grid=[1, 1, 1],
                    block=[1024, 1, 1],
                ),
                synchronize(110 + 2000 * i, 1915),
            )
        ],
    ]
    trace = write_example(events, tmp_path, "t")
    export = ncu_csv(
        tmp_path / "k.csv",
        [
            kernel_row(
                "loop_kernel",
                grid="(1, 1, 1)",
                block="(1024, 1, 1)",
                **{
                    "gpu__time_duration.sum": "1,900,000",
                    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "0.76",
                    "sm__warps_active.avg.pct_of_peak_sustained_active": "49.8",
                },
            )
        ],
    )
    doc = api.analyze_path(trace, ncu=[export]).report.to_json_dict()
    (f,) = [f for f in doc["diagnoses"] if f["rule"] == "TA025"]
    assert f["evidence"]["measured"]["sm_throughput_share"] == pytest.approx(0.0076)
    assert "Nsight Compute: SM throughput 1%" in f["message"]
