"""The per-rank view: jitter is not imbalance, a big job's table stays readable, and the host
step's phases against a plain loop."""

from __future__ import annotations

import gzip
import itertools
import re
from pathlib import Path

import orjson
import pytest

from tests.conftest import SAMPLES
from traceanalyzer import api
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.host.host_phases import ALL_PHASES
from traceanalyzer.readers import read
from traceanalyzer.render.ranks import SHOW_ALL, rank_table
from traceanalyzer.rules.examples import kernel, launch, on_rank, step, write_example

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def _steps(computes: list[float]) -> list[dict]:
    """One rank's steps: a GEMM of the given length, an all-reduce that ends with the slowest
    rank's, and a sync at the step's end."""
    events: list[dict] = []
    slowest = 400.0
    for i, compute in enumerate(computes):
        t0 = 1000.0 * i
        end = t0 + 10 + slowest + 20
        corr = 10 * i
        events += [
            step(i + 1, t0, 900),
            launch(t0 + 1, 2, corr + 1),
            kernel(t0 + 10, compute, "sm90_gemm", corr=corr + 1),
            launch(t0 + 2, 2, corr + 2),
            kernel(t0 + 10 + compute, end - (t0 + 10 + compute), NCCL, stream=20, corr=corr + 2),
            launch(t0 + 3, end - t0 - 3, corr + 3, name="cudaStreamSynchronize"),
        ]
    return events


def test_jitter_is_not_imbalance(tmp_path: Path) -> None:
    """Each rank is the slowest in half of the steps: no rank-imbalance finding."""
    events = [
        *on_rank(0, _steps([400, 200, 400, 200])),
        *on_rank(1, _steps([200, 400, 200, 400])),
    ]
    rep = api.report(write_example(events, tmp_path, "jitter"), jobs=1)
    assert "TA008" not in [f.rule for f in rep.findings]
    assert rep.communication["imbalance"] is not None
    assert rep.communication["imbalance"]["slowest_share"] <= 0.5


def test_a_steady_straggler_is(tmp_path: Path) -> None:
    """Rank 1 computes twice rank 0's work in every step: it is the straggler, GPU work."""
    events = [
        *on_rank(0, _steps([200, 200, 200, 200])),
        *on_rank(1, _steps([400, 400, 400, 400])),
    ]
    rep = api.report(write_example(events, tmp_path, "straggler"), jobs=1)
    (f,) = [f for f in rep.findings if f.rule == "TA008"]
    assert f.scope.rank == 1 and f.evidence["cause"] == "gpu"
    assert "2.0x the work" in f.message
    assert f.impact_ns == 100_000  # (400 - 200) / 2: the extra work spread over two ranks


def test_a_big_job_is_folded() -> None:
    ranks = [{"rank": r, "own_ns": 100_000_000 + (r % 7) * 100_000} for r in range(256)]
    ranks[17]["own_ns"] = 130_000_000  # a straggler
    ranks[200]["own_ns"] = 80_000_000  # a rank far faster
    table = rank_table(ranks)
    assert table is not None
    shown = {row["rank"]: label for label, row in table.rows}
    assert shown[17] == "slowest" and shown[200] == "fastest"
    assert "median" in shown.values()
    assert len(shown) <= SHOW_ALL and table.folded == 256 - len(shown)
    small = rank_table(ranks[:4])
    assert small is not None and small.folded == 0 and len(small.rows) == 4
    assert rank_table(ranks[:1]) is None


def test_host_phases_against_a_loop() -> None:
    """The healthy sample's host steps cut into phases: each against a loop over its events
    (each phase's union, less the phases before it, in the step's range)."""
    path = SAMPLES / "train_bf16_healthy.json.gz"
    with gzip.open(path) as f:
        events = [
            e
            for e in orjson.loads(f.read())["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
        ]
    got = analyze(read(path)).host_phases.steps
    assert got.height == 4
    for row in got.iter_rows(named=True):
        marker = next(
            e for e in events if e["name"] == f"ProfilerStep#{row['step']}" and e["dur"] > 1000
        )
        lo, hi = marker["ts"] * 1000, (marker["ts"] + marker["dur"]) * 1000

        def spans(test: object, lo: float = lo, hi: float = hi) -> list[tuple[float, float]]:
            return [
                (max(e["ts"] * 1000, lo), min((e["ts"] + e["dur"]) * 1000, hi))
                for e in events
                if test(e) and lo <= e["ts"] * 1000 < hi  # type: ignore[operator]
            ]

        bwd = spans(
            lambda e: (
                e["name"].startswith(("autograd::engine::evaluate_function", "torch::autograd::"))
                or re.fullmatch(r"[A-Z]\w*Backward\d*", e["name"]) is not None
            )
        )
        first_bwd = min((s for s, _ in bwd), default=hi)
        phases = {
            "data_loading": spans(lambda e: e["name"].startswith("enumerate(DataLoader)")),
            "optimizer": spans(
                lambda e: e["name"].startswith(("Optimizer.step#", "Optimizer.zero_grad#"))
            ),
            "backward": bwd,
            "forward": [s for s in spans(lambda e: e.get("cat") == "cpu_op") if s[0] < first_bwd],
        }
        # a loop over 1 µs-resolution boundaries: each instant goes to the first phase that
        # covers it
        cuts = sorted({lo, hi, *(t for v in phases.values() for s in v for t in s)})
        want = dict.fromkeys(ALL_PHASES, 0.0)
        for a, b in itertools.pairwise(cuts):
            mid = (a + b) / 2
            owner = next((p for p, v in phases.items() if any(s <= mid < e for s, e in v)), "other")
            want[owner] += b - a
        for phase in ALL_PHASES:
            assert row[f"{phase}_ns"] == pytest.approx(want[phase], abs=2_000), phase
