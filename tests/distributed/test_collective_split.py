"""The collectives matched across ranks and their time split (analyses/distributed/collectives.py)
against plain loops: a real two-rank trace and tiny hand-made ones."""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from tests.conftest import corpus
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.distributed.imbalance import impact_model
from traceanalyzer.readers import read
from traceanalyzer.rules.examples import kernel, launch, on_rank, step, write_example

CORPUS = corpus()
H200X2 = CORPUS / "h200x2" if CORPUS else None


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _inside(merged: list[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in merged)


@pytest.mark.skipif(H200X2 is None, reason="TRACEANALYZER_CORPUS not set")
def test_split_of_a_real_two_rank_job_against_a_loop(tmp_path: Path) -> None:
    """Every NCCL kernel of both ranks of the host-straggler job: the n-th of each kind on
    each stream of both ranks is one collective; the shortest kernel is the transfer, the
    rest waiting; exposed = not overlapped by any other kernel of the rank's device."""
    job = tmp_path / "job"
    job.mkdir()
    raw: dict[int, list[dict]] = {}
    for rank in (0, 1):
        name = f"ddp_host_straggler_rank{rank}.json.gz"
        (job / name).symlink_to(H200X2 / name)  # type: ignore[operator]
        with gzip.open(job / name) as f:
            events = orjson.loads(f.read())["traceEvents"]
        raw[rank] = [e for e in events if e.get("cat") == "kernel"]
    m = analyze(read(job))
    got = m.collective_split.kernels
    assert got.height and got["instance"].is_not_null().all()
    # the kernels the analysis took (inside the windows), found again in the raw trace
    ours = {(r, s, e) for r, s, e in got.select("rank", "start_ns", "end_ns").iter_rows()}
    comm: dict[int, list[dict]] = defaultdict(list)
    compute: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for rank, kernels in raw.items():
        for k in kernels:
            start = round(k["ts"] * 1000)
            end = start + round(k["dur"] * 1000)
            if k["name"].startswith("nccl"):
                if (rank, start, end) in ours:
                    comm[rank].append({"start": start, "end": end, "stream": k["args"]["stream"]})
            else:
                compute[rank].append((start, end))
    seqs: dict[tuple, list[tuple[int, dict]]] = defaultdict(list)
    for rank in comm:
        count: dict[int, int] = defaultdict(int)
        for k in sorted(comm[rank], key=lambda k: k["start"]):
            seqs[(k["stream"], count[k["stream"]])].append((rank, k))
            count[k["stream"]] += 1
    want: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for members in seqs.values():
        assert len(members) == 2
        transfer = min(k["end"] - k["start"] for _, k in members)
        for rank, k in members:
            merged = _merged(compute[rank])
            wait = k["end"] - k["start"] - transfer
            w_end = k["start"] + wait
            w = want[rank]
            w["wait_ns"] += wait
            w["transfer_ns"] += transfer
            w["exposed_wait_ns"] += wait - _inside(merged, k["start"], w_end)
            w["exposed_transfer_ns"] += transfer - _inside(merged, w_end, k["end"])
    for row in m.collective_split.per_rank.iter_rows(named=True):
        for col, value in want[row["rank"]].items():
            assert row[col] == pytest.approx(value, rel=1e-3, abs=2_000), (row["rank"], col)
    # the slowest rank (rank 1 sleeps before each step) never waits; rank 0 does
    waits = dict(m.collective_split.per_rank.select("rank", "wait_ns").iter_rows())
    assert waits[1] == 0 and waits[0] > 0


def test_wait_and_transfer_of_tiny_collectives(tmp_path: Path) -> None:
    """Rank 1 arrives 60 µs late at a 40 µs all-reduce: rank 0 waits 60 µs, half of it
    beside a compute kernel; both transfer 40 µs; the message is 1 MiB of bf16 over two ranks:
    bus bandwidth 2(n-1)/n x S / t."""
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    msg = {"Collective name": "allreduce", "In msg nelems": 524288, "dtype": "BFloat16"}
    events = [
        *on_rank(0, [kernel(100, 100, nccl, stream=20, **msg), kernel(100, 30, "gemm_a")]),
        *on_rank(1, [kernel(160, 40, nccl, device=1, stream=20, **msg)]),
    ]
    m = analyze(read(write_example(events, tmp_path, "tiny")))
    rows = {r["rank"]: r for r in m.collective_split.per_rank.iter_rows(named=True)}
    assert (rows[0]["wait_ns"], rows[0]["transfer_ns"]) == (60_000, 40_000)
    assert (rows[0]["exposed_wait_ns"], rows[0]["exposed_transfer_ns"]) == (30_000, 40_000)
    assert (rows[1]["wait_ns"], rows[1]["transfer_ns"]) == (0, 40_000)
    assert rows[1]["busbw_gbps"] == pytest.approx(2 * 0.5 * 1048576 / 40_000)


def test_own_time_and_price_of_a_gpu_straggler(tmp_path: Path) -> None:
    """Rank 1 computes 300 µs, rank 0 100 µs before a shared all-reduce, each host waiting
    for its step's end: rank 0's own time is 200 µs shorter; moving the extra work saves
    half of that on two ranks (the mean), never the summed wait."""
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"

    def rank_step(compute: float, allreduce: float) -> list[dict]:
        end = 110 + compute + allreduce
        return [
            step(1, 100, 500),
            launch(105, 2, 1),
            kernel(110, compute, "sm90_gemm", corr=1),
            launch(106, 2, 2),
            kernel(110 + compute, allreduce, nccl, stream=20, corr=2),
            launch(108, end - 108, 3, name="cudaStreamSynchronize"),
        ]

    events = [*on_rank(0, rank_step(100, 250)), *on_rank(1, rank_step(300, 50))]
    b = analyze(read(write_example(events, tmp_path, "gpu"))).balance
    own = dict(b.ranks.select("rank", "own_ns").iter_rows())
    assert own[1] - own[0] == 200_000 and b.slowest == 1 and b.cause == "gpu"
    assert b.impact_ns == 100_000


def test_impact_model_bounds() -> None:
    own = {0: 50.0, 1: 52.0, 2: 51.0, 3: 80.0}
    # extra host time vanishes: the median of the others
    assert impact_model(own, 3, "host") == 29
    # extra GPU work is spread: the mean of all, below the median of the others' bound
    assert impact_model(own, 3, "gpu") == round(80 - (50 + 52 + 51 + 80) / 4)
    assert impact_model({0: 10.0, 1: 9.0}, 0, "host") == 1
    assert impact_model({0: 10.0}, 0, "host") == 0


def test_send_recv_matched_only_where_every_rank_runs_as_many(tmp_path: Path) -> None:
    """Three ranks. An all-to-all made of sends and receives (each rank one SendRecv kernel,
    rank 2 last): matched, ranks 0 and 1 wait. Pipeline-like traffic (rank 1 runs two,
    the others one): the order tells no pairs, nothing is matched."""
    p2p = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"

    def job(name: str, starts: dict[int, list[float]]) -> Path:
        events = []
        for rank, times in starts.items():
            for t in times:
                events += on_rank(rank, [kernel(t, 200 - (t % 100), p2p, device=rank, stream=20)])
        return write_example(events, tmp_path / name, name)

    even = analyze(read(job("even", {0: [100], 1: [120], 2: [160]}))).collective_split
    assert even.kernels["instance"].is_not_null().all()
    waits = dict(even.per_rank.select("rank", "wait_ns").iter_rows())
    assert waits[2] == 0 and waits[0] > waits[1] > 0
    uneven = analyze(read(job("uneven", {0: [100], 1: [120, 400], 2: [160]}))).collective_split
    assert uneven.kernels["instance"].is_null().all()
    assert uneven.per_rank["wait_ns"].sum() == 0
