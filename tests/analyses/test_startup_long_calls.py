"""Start-up's long calls (`startup.long_calls`): each call of at least MIN_NS with its place
among its name's calls on the rank, their count and median, against a loop over the events.
The names with no long call are left out before ranking; the loop ranks every name."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from traceanalyzer.analyses.timeline import startup
from traceanalyzer.model import Kind
from traceanalyzer.readers import read

GPU_DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"
KINDS = [
    [Kind.RUNTIME.value, Kind.DRIVER.value],
    [Kind.ANNOTATION.value, Kind.CPU_OP.value, Kind.PYTHON.value],
    [Kind.CPU_OP.value],
]


def _loop(rows: list[dict], kinds: list[str], min_ns: int) -> set[tuple]:
    calls: dict[tuple, list[tuple[int, dict]]] = defaultdict(list)
    for i, e in enumerate(rows):
        if e["kind"] in kinds:
            calls[(e["rank"], e["name"])].append((i, e))
    want = set()
    for group in calls.values():
        durs = [e["end_ns"] - e["start_ns"] for _, e in group]
        for i, e in group:
            if e["end_ns"] - e["start_ns"] < min_ns:
                continue
            order = 1 + sum(1 for j, o in group if (o["start_ns"], j) < (e["start_ns"], i))
            want.add(
                (
                    e["rank"],
                    e["pid"],
                    e["tid"],
                    e["start_ns"],
                    e["end_ns"],
                    e["name"],
                    order,
                    len(group),
                    float(statistics.median(durs)),
                )
            )
    return want


@pytest.mark.parametrize(
    "path",
    [SAMPLES / "train_bf16_healthy.json.gz", GPU_DATA / "startup_steps.json.gz"],
    ids=lambda p: p.name,
)
@pytest.mark.parametrize("min_ns", [startup.MIN_NS, 20_000])
def test_long_calls_against_a_loop(
    path: Path, min_ns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(startup, "MIN_NS", min_ns)
    events = read(path).events
    rows = (
        events.select("rank", "pid", "tid", "start_ns", "end_ns", "kind", "name")
        .with_columns(events["kind"].cast(str), events["name"].cast(str))
        .to_dicts()
    )
    found = 0
    for kinds in KINDS:
        got = startup.long_calls(events.lazy(), kinds).collect()
        got_rows = {
            (
                r["rank"],
                r["pid"],
                r["tid"],
                r["start_ns"],
                r["end_ns"],
                r["name"],
                r["order"],
                r["n"],
                float(r["median"]),
            )
            for r in got.to_dicts()
        }
        assert got.height == len(got_rows)
        assert got_rows == _loop(rows, kinds, min_ns)
        found += got.height
    assert found > 0


def test_a_single_cold_call_is_start_up(tmp_path: Path) -> None:
    """One pass of a program (one step): a convolution whose first call holds the host 30 ms
    with the GPU idle and no launch is cuDNN's set-up, done once; the same in two steps, each
    a first call of a new shape, is the loop's (TA022's), not start-up."""
    from tests.builders import cpu_op, kernel, launch, step
    from traceanalyzer import api
    from traceanalyzer.rules.examples import write_example

    def one_step(n: int, t0: float) -> list[dict]:
        return [
            step(n, t0, 31_000),
            cpu_op(t0 + 10, 30_500, "aten::cudnn_convolution"),
            launch(t0 + 30_400, 5, n),
            kernel(t0 + 30_410, 200, "sm90_xmma_fprop_implicit_gemm", corr=n),
        ]

    cold = api.analyze_path(write_example(one_step(1, 100), tmp_path, "cold"))
    calls = cold.metrics.startup.calls
    assert "aten::cudnn_convolution" in calls["name"].to_list()
    assert not [f for f in cold.report.findings if f.rule == "TA022"]
    twice = api.analyze_path(
        write_example([*one_step(1, 100), *one_step(2, 40_000)], tmp_path, "twice")
    )
    assert "aten::cudnn_convolution" not in twice.metrics.startup.calls["name"].to_list()
