"""The legacy `torch.autograd.profiler` export (torch 1.x, `use_kineto=False`): a bare JSON
array of events with no category, `pid` "CPU functions" for operators and "CUDA functions"
for each operator's GPU range (measured with CUDA events, `tid` the device), flow events
between them. It is a trace: read where it carries GPU ranges, with a note on what it lacks;
refused clearly where it holds none (recorded without use_cuda=True)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.reference import union_length
from traceanalyzer import api
from traceanalyzer.errors import NoGpuEventsError

OPS = (("aten::conv2d", 40, 300), ("aten::relu", 10, 50), ("aten::addmm", 20, 200))


def _legacy(with_cuda: bool = True, calls: int = 3) -> list[dict[str, Any]]:
    """Events as torch 1.x's export_chrome_trace wrote them (times in µs from the start)."""
    events: list[dict[str, Any]] = []
    t, flow = 10.0, 0
    for _ in range(calls):
        for name, cpu_us, gpu_us in OPS:
            events.append(
                {"name": name, "ph": "X", "ts": t, "dur": cpu_us, "tid": 1,
                 "pid": "CPU functions", "args": {}}
            )  # fmt: skip
            if with_cuda:
                gpu = t + 30
                events += [
                    {"name": name, "ph": "s", "ts": t, "tid": 1, "pid": "CPU functions",
                     "id": flow, "cat": "cpu_to_cuda", "args": {}},
                    {"name": name, "ph": "f", "ts": gpu, "tid": 0, "pid": "CUDA functions",
                     "id": flow, "cat": "cpu_to_cuda", "args": {}},
                    {"name": name, "ph": "X", "ts": gpu, "dur": gpu_us, "tid": 0,
                     "pid": "CUDA functions", "args": {}},
                ]  # fmt: skip
                flow += 1
            t += cpu_us + 5
        t += 400
    return events


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    # one line, ", " between events, as the legacy exporter wrote it
    path.write_text("[" + ", ".join(json.dumps(e) for e in events) + "]")
    return path


def test_a_legacy_export_with_gpu_ranges_is_read(tmp_path: Path) -> None:
    events = _legacy()
    rep = api.report(_write(tmp_path / "legacy.json", events))
    assert rep.source["producer"] == "torch.autograd.profiler (legacy export)"
    notes = rep.to_json_dict()["data_quality"]["notes"]
    assert any("legacy torch.autograd.profiler export" in n for n in notes)
    (dev,) = rep.devices
    ranges = [
        (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
        for e in events
        if e["ph"] == "X" and e["pid"] == "CUDA functions"
    ]
    assert dev["kernel_count"] == len(ranges) == 9
    assert dev["busy_ns"] == union_length(ranges)
    assert dev["window_ns"] == max(e for _, e in ranges) - min(s for s, _ in ranges)


def test_a_legacy_export_without_gpu_time_is_refused_clearly(tmp_path: Path) -> None:
    path = _write(tmp_path / "cpu_only.json", _legacy(with_cuda=False))
    with pytest.raises(NoGpuEventsError, match=r"legacy torch\.autograd\.profiler export"):
        api.report(path)
    done = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", "report", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "use_cuda=True" in line and str(path) in line
