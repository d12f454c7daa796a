"""Refusals that name the real cause (issue 33): a trace with nothing to analyse is refused
with exit 2 and one `error:` line, and the line says why there is nothing, not a cause
that sends the user the wrong way. One small file shaped like each case."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.builders import write_trace
from traceanalyzer.cli import cli


def _refusal(path: Path) -> str:
    result = CliRunner().invoke(cli, ["report", str(path)])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def _op(i: int) -> dict[str, object]:
    return {
        "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
        "ts": 100 + 50 * i, "dur": 40, "args": {"External id": i},
    }  # fmt: skip


def _runtime(name: str, i: int, ext: int | None = None) -> dict[str, object]:
    args: dict[str, object] = {"correlation": 10 + i}
    if ext is not None:
        args["External id"] = ext
    return {
        "ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1,
        "ts": 110 + 50 * i, "dur": 5, "args": args,
    }  # fmt: skip


def test_events_without_categories_are_another_tools(tmp_path: Path) -> None:
    """A JSON list of kernel-named events and `[MEMCPY] HtoD` rows with no `cat` (written
    by another tool) is not "a CPU-only trace (empty)"."""
    events = []
    for i in range(150):
        events.append(
            {
                "ph": "X",
                "name": f"void gemm_{i % 3}<float>(float*)",
                "pid": 0,
                "tid": 7,
                "ts": 1000 + 10 * i,
                "dur": 5,
            }
        )
        events.append({"ph": "X", "name": "[MEMCPY] HtoD", "pid": 0, "tid": 7,
                       "ts": 1005 + 10 * i, "dur": 2})  # fmt: skip
    path = tmp_path / "other_tool.json"
    path.write_text(json.dumps(events))
    line = _refusal(path)
    assert "300 events carry no category" in line
    assert "another tool" in line and "CPU-only" not in line


def test_cuda_calls_without_launches_ran_on_the_cpu(tmp_path: Path) -> None:
    """CUDA runtime calls but no launch: CUDA activity was on, nothing ran on the GPU; the
    hint is not "profile with activities=[CPU, CUDA]"."""
    events = [_op(i) for i in range(20)]
    events += [_runtime("cudaGetDeviceCount", 0), _runtime("cudaDeviceSynchronize", 1)]
    line = _refusal(write_trace(tmp_path / "cpu_model.json", events))
    assert "nothing ran on the GPU" in line and "2 runtime calls" in line
    assert "activities=" not in line


def test_few_launches_without_activity_mean_tracing_was_off(tmp_path: Path) -> None:
    """4 launches and no GPU activity record: no buffer can have filled up; the likelier
    cause is CUPTI being unavailable, not lost buffers."""
    events = [_op(i) for i in range(4)]
    events += [_runtime("cudaLaunchKernel", i, ext=i) for i in range(4)]
    line = _refusal(write_trace(tmp_path / "few.json", events))
    assert "launched 4 kernels" in line
    assert "unavailable" in line and "lost its GPU buffers" not in line


def test_many_launches_without_activity_mean_lost_buffers(tmp_path: Path) -> None:
    events = [_op(i) for i in range(1200)]
    events += [_runtime("cudaLaunchKernel", i, ext=i) for i in range(1200)]
    line = _refusal(write_trace(tmp_path / "many.json", events))
    assert "launched 1200 kernels" in line and "lost its GPU buffers" in line


def test_a_memory_timeline_is_named_for_what_it_is(tmp_path: Path) -> None:
    """torch.profiler's export_memory_timeline JSON ([times], [[bytes per category]]) is not
    a CPU-only trace: it is named, with the export that gives a trace."""
    path = tmp_path / "memory.json"
    path.write_text(json.dumps([[1000, 2000, 3000], [[1, 2, 3, 4, 5, 6, 7, 8]] * 3]))
    err = _refusal(path)
    assert "export_memory_timeline" in err and "export_chrome_trace" in err
    assert "CPU-only" not in err


def test_a_perfetto_protobuf_is_named_with_its_converter(tmp_path: Path) -> None:
    path = tmp_path / "run.pftrace"
    path.write_bytes(b"\x0a\x10\x08\x01" * 8)
    err = _refusal(path)
    assert "Perfetto protobuf" in err and "traceconv" in err
