"""The impact models (what fixing a finding saves per steady step, and the most it can) against
plain loops over the summary rows they are computed from, on recorded GPU traces.

Each model is an analysis (`Metrics.<name>_model`); the rules only read it. The loops below
restate each model's docs one row at a time, in plain Python."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from traceanalyzer.analyses import Metrics, analyze
from traceanalyzer.readers import read

GPU = Path(__file__).parent.parent / "data" / "gpu"


@cache
def _metrics(name: str) -> Metrics:
    return analyze(read(GPU / name))


def _steps(m: Metrics) -> dict[tuple[int, int], int]:
    """Steady steps per (rank, device), counted row by row."""
    out: dict[tuple[int, int], int] = {}
    for s in m.steps.iter_rows(named=True):
        out[s["rank"], s["device"]] = out.get((s["rank"], s["device"]), 0) + 1
    return out


def _per_device_step(m: Metrics, ns: int, rank: int, device: int) -> int | None:
    n = _steps(m).get((rank, device), 0) if m.basis == "steps" else 1
    return ns // n if n else None


@pytest.mark.parametrize("name", ["host_sync.json.gz", "host_sync_gpu_bound.json.gz"])
def test_sync_model_against_a_loop(name: str) -> None:
    m = _metrics(name)
    limit = m.launch_gap_max_ns
    models = {s.rank: s for s in m.sync_model}
    assert models, name
    for rank, got in models.items():
        bubble = 0
        for g in m.gaps.iter_rows(named=True):
            if g["rank"] != rank or g["sync_ns"] <= 0:
                continue
            ahead = g["start_ns"] - g["sync_start_ns"] if g["sync_start_ns"] is not None else 0
            bubble += g["sync_ns"] + min(g["gap_ns"] - g["sync_ns"], max(ahead, limit))
        idle = max(d["idle_ns"] for d in m.devices.iter_rows(named=True) if d["rank"] == rank)
        n = max(c for (r, _d), c in _steps(m).items() if r == rank)
        assert got.idle_with_refill_ns == bubble > 0
        assert got.rank_idle_ns == idle
        assert (got.impact_ns, got.ceiling_ns) == (bubble // n, idle // n)
        assert got.impact_ns <= got.ceiling_ns
