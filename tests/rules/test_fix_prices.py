"""Prices against what the fix saved, timed without the profiler on the same H200 in the same
run (tests/data/gpu/facts_launch_shapes.json, facts_copies_cold.json): a finding's impact per
step within 30 % of the measured saving."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from traceanalyzer import api

GPU = Path(__file__).parent.parent / "data" / "gpu"
#: A price is right within this share of the measured saving (the profiler slows the host).
WITHIN_SHARE = 0.30


@cache
def _savings() -> dict[str, list[float]]:
    """scenario -> the savings (ms per step) its facts record, in recording order."""
    out: dict[str, list[float]] = {}
    for name in ("facts_launch_shapes.json", "facts_copies_cold.json"):
        doc = json.loads((GPU / name).read_text())
        for scenario, body in doc["scenarios"].items():
            for fact in body["facts"]:
                if "saving_ms" in fact:
                    out.setdefault(scenario, []).append(fact["saving_ms"])
    return out


def _finding(trace: str, rule: str) -> dict[str, Any]:
    doc = api.report(GPU / trace).to_json_dict()
    found = [f for f in doc["diagnoses"] if f["rule"] == rule]
    assert found, f"{rule} does not fire on {trace}"
    return max(found, key=lambda f: f["impact_ns"] or 0)


@pytest.mark.parametrize(
    ("trace", "rule", "scenario", "which"),
    [
        # a Triton kernel launched with grid (1,): grid = cdiv(n, 1024) saved 14.61 ms of 14.68
        ("launch_one_block.json.gz", "TA025", "launch_one_block", 0),
        # .cpu() of 256 MiB into pageable memory each step: a pinned buffer filled
        # non_blocking on a side stream saved 196.7 ms of 206.9
        ("copy_pageable_dtoh.json.gz", "TA009", "copy_pageable_dtoh", 0),
        # the fusion model at three sizes: a hand-written tanh GELU (fp32 under autocast,
        # its casts in and out) in a 2-block MLP of width 1024, 2048, 4096; F.gelu saved
        # 3.46, 6.67 and 12.77 ms a step
        ("gelu_handwritten_w1024.json.gz", "TA004", "gelu_sizes", 0),
        ("gelu_handwritten_w2048.json.gz", "TA004", "gelu_sizes", 1),
        ("gelu_handwritten_w4096.json.gz", "TA004", "gelu_sizes", 2),
    ],
)
def test_price_matches_the_measured_saving(
    trace: str, rule: str, scenario: str, which: int
) -> None:
    saved_ns = _savings()[scenario][which] * 1e6
    f = _finding(trace, rule)
    assert f["impact_ns"] == pytest.approx(saved_ns, rel=WITHIN_SHARE), (f["impact_ns"], saved_ns)
    assert f["impact_ns"] <= f["evidence"]["impact_ceiling_ns"]


def test_managed_memory_price_against_the_prefetch() -> None:
    """A 64 MiB cudaMallocManaged buffer touched by the host, then by a kernel, every step
    (tests/data/counters/managed_memory.sqlite.gz, Nsight with unified-memory fault tracing):
    cudaMemPrefetchAsync before the kernel saved 8.54 ms a step (7.14 ms of it after the
    host's touch), timed without the profiler. TA027 within 30 % of it, the migrations named
    as unified memory, not as copies of unknown memory."""
    path = GPU.parent / "counters" / "managed_memory.sqlite.gz"
    facts = json.loads((path.parent / "facts_counters.json").read_text())
    saving = next(
        f["saving_ms"]
        for f in facts["scenarios"]["managed_memory"]["facts"]
        if "saving_ms" in f and "fault_rounds_ms" in f
    )
    doc = api.report(path).to_json_dict()
    (f,) = [f for f in doc["diagnoses"] if f["rule"] == "TA027"]
    assert f["impact_ns"] == pytest.approx(saving * 1e6, rel=WITHIN_SHARE)
    assert f["impact_ns"] <= f["evidence"]["impact_ceiling_ns"]
    assert doc["verdict"]["bound_by"] == "copy"
    kinds = {(c["copy_kind"], c["src_memory"]) for c in doc["copies"]}
    assert kinds == {("HtoD", "managed"), ("DtoH", "managed")}
    # the page faults, against a count of the export's own rows (README: 698 GPU fault rows
    # holding 3,884 faults, 1,536 CPU fault rows)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "um.sqlite"
        with gzip.open(path) as fin, plain.open("wb") as fout:
            shutil.copyfileobj(fin, fout)
        con = sqlite3.connect(plain)
        rows, faults = con.execute(
            "SELECT count(*), sum(numberOfPageFaults) FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS"
        ).fetchone()
        (cpu,) = con.execute("SELECT count(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS").fetchone()
        con.close()
    ev = f["evidence"]
    assert (
        (ev["gpu_fault_rows"], ev["gpu_page_faults"], ev["cpu_page_faults"])
        == (
            rows,
            faults,
            cpu,
        )
        == (698, 3884, 1536)
    )
    assert "3884 GPU page faults" in f["message"]
