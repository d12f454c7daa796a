"""Communication per timeline bin, against a plain loop over the real 2-rank sample."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.conftest import SAMPLES
from traceanalyzer import api


def _comm_kernels(folder: Path) -> dict[int, list[tuple[int, int]]]:
    """rank -> [(start_ns, end_ns)] of the NCCL kernels, straight from the JSON files."""
    out: dict[int, list[tuple[int, int]]] = {}
    for path in sorted(folder.glob("*.json*")):
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        rank = doc["distributedInfo"]["rank"]
        for ev in doc["traceEvents"]:
            if ev.get("ph") == "X" and ev.get("cat") == "kernel" and "nccl" in ev["name"].lower():
                start = round(ev["ts"] * 1000)
                out.setdefault(rank, []).append((start, start + round(ev["dur"] * 1000)))
    return out


def test_comm_per_bin_matches_a_plain_loop() -> None:
    folder = SAMPLES / "sampled_2rank"
    report = api.report(folder)
    kernels = _comm_kernels(folder)
    assert set(kernels) == {0, 1}
    for b in report.timeline_bins:
        spans = sorted(kernels[b["rank"]])
        covered, reach = 0, b["start_ns"]
        for s, e in spans:  # the union of the spans, clipped to the bin
            s, e = max(s, reach, b["start_ns"]), min(e, b["end_ns"])
            if e > s:
                covered += e - s
                reach = e
        assert b["comm_ns"] == covered, b
        assert 0 <= b["comm_wait_ns"] <= b["comm_ns"] <= b["busy_ns"] + 1
    waits = {r["rank"]: r["wait_ns"] for r in report.communication["ranks"]}
    for rank, wait in waits.items():
        assert sum(b["comm_wait_ns"] for b in report.timeline_bins if b["rank"] == rank) == wait
    # one device per rank here: the device's wait is its rank's
    assert {d["rank"]: d["comm_wait_ns"] for d in report.devices} == waits
