"""Steady state: warm-up and outlier steps are found, left out of the window and reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import corpus
from traceanalyzer import api
from traceanalyzer.analyses.timeline.steady import OUTLIER_FACTOR, _flag
from traceanalyzer.rules.examples import Event, launch, launched, step, write_example


def test_leading_step_with_one_time_work_is_warm_up() -> None:
    out = _flag([160, 100, 100, 102, 98], ["cudaMalloc x3", None, None, None, None])
    assert list(out) == [0]
    assert out[0].startswith("warm-up: one-time work (cudaMalloc x3)")


def test_slow_first_step_without_one_time_work_needs_the_outlier_factor() -> None:
    assert _flag([160, 100, 100, 100], [None] * 4) == {}
    out = _flag([100 * OUTLIER_FACTOR + 1, 100, 100, 100], [None] * 4)
    assert list(out) == [0] and out[0].startswith("outlier")


def test_several_leading_and_a_trailing_outlier() -> None:
    out = _flag([900, 400, 100, 100, 100, 350], [None] * 6)
    assert sorted(out) == [0, 1, 5]


def test_bimodal_steps_and_short_runs_are_kept() -> None:
    # a slow loader on odd steps: 28 and 58 ms alternate; nothing is an outlier
    assert _flag([58, 28, 61, 25, 57, 26, 58, 26, 58], [None] * 9) == {}
    assert _flag([900, 100], [None, None]) == {}
    # never fewer than two steady steps
    assert len(_flag([900, 800, 100, 100], [None] * 4)) <= 2


def _cold_start() -> list[Event]:
    """Four steps of 100 µs of GPU work; the first holds cudaMalloc and takes 1 ms."""
    events: list[Event] = [
        step(1, 100, 1000),
        launch(110, 5, 9001, name="cudaMalloc"),
        *launched(1000, 1005, 90, 1, "gemm_a"),
    ]
    for i in range(1, 4):
        t = 1000 + 100 * i
        events += [step(i + 1, t, 20), *launched(t + 1, t + 5, 90, i + 1, "gemm_b")]
    return events


def test_warm_up_step_left_out_of_the_window(tmp_path: Path) -> None:
    path = write_example(_cold_start(), tmp_path, "cold")
    doc = api.report(path).to_json_dict()
    excluded = doc["window"]["excluded_steps"]
    assert [(e["name"], e["reason"].split(":")[0]) for e in excluded] == [
        ("ProfilerStep#1", "warm-up")
    ]
    assert excluded[0]["step_ns"] == 1_000_000  # its host range: longer than its GPU tile
    warm = {s["name"]: s["warmup"] for s in doc["steps"]}
    assert warm == {
        "ProfilerStep#1": True,
        "ProfilerStep#2": False,
        "ProfilerStep#3": False,
        "ProfilerStep#4": False,
    }
    # the window starts with the first steady step's work
    assert doc["window"]["start_ns"] == 1_100_000  # the first steady step's marker
    assert any("left out of the window" in n for n in doc["data_quality"]["notes"])
    # --all-steps keeps it
    every = api.report(path, all_steps=True).to_json_dict()
    assert every["window"]["excluded_steps"] == []
    assert not any(s["warmup"] for s in every["steps"])


def test_work_before_the_window_is_counted_in_data_quality(tmp_path: Path) -> None:
    events = [
        *launched(1, 5, 50, 77, "before_kernel"),  # launched before the first step
        *[
            e
            for i in range(3)
            for e in [
                step(i + 1, 100 + 100 * i, 20),
                *launched(101 + 100 * i, 110 + 100 * i, 50, i + 1, "k"),
            ]
        ],
    ]
    doc = api.report(write_example(events, tmp_path, "before")).to_json_dict()
    outside = doc["data_quality"]["outside_window"]
    assert outside == [
        {
            "rank": 0,
            "device": 0,
            "before_count": 1,
            "before_ns": 50_000,
            "after_count": 0,
            "after_ns": 0,
        }
    ]


def _nsys() -> Path:
    root = corpus()
    if root is None or not (root / "h100" / "nsys_train_bf16.sqlite").is_file():
        pytest.skip("TRACEANALYZER_CORPUS not set")
    return root / "h100" / "nsys_train_bf16.sqlite"


def test_nsight_capture_from_process_start_drops_its_cold_first_step() -> None:
    doc = api.report(_nsys()).to_json_dict()
    excluded = doc["window"]["excluded_steps"]
    assert [e["name"] for e in excluded] == ["step_0"]
    assert excluded[0]["reason"].startswith("warm-up: one-time work")
    # a plain loop over the steady steps: the window starts where the first of them does
    steady = [s for s in doc["steps"] if not s["warmup"]]
    assert doc["window"]["start_ns"] == min(s["start_ns"] for s in steady)
    cold = next(s for s in doc["steps"] if s["warmup"])
    assert cold["end_ns"] - cold["start_ns"] > 5 * max(s["end_ns"] - s["start_ns"] for s in steady)
    # the verdict rests on steady steps: host-bound (every 2nd step waits for a slow loader:
    # TA018 names the slow kind, TA001 the rest of the wait), priced below a steady step
    top = doc["diagnoses"][0]
    step_ns = doc["critical_path"][0]["step_ns"]
    assert doc["verdict"]["bound_by"] == "host"
    assert top["rule"] in ("TA018", "TA001") and top["impact_ns"] <= step_ns
    json.dumps(doc)  # the report stays JSON


def test_empty_edge_steps_and_steady_one_time_calls() -> None:
    # a last ProfilerStep with no GPU work (closed by the profiler's stop) is left out
    out = _flag([9_300, 50], [None, None], [False, True])
    assert out == {1: "empty: no GPU work launched in it"}
    # every step empty: nothing to compare, nothing left out
    assert _flag([50, 50], [None, None], [True, True]) == {}


def test_leading_step_launching_far_more_work_is_warm_up() -> None:
    out = _flag([170, 100, 100, 100], [None] * 4, [False] * 4, [1800, 1000, 1000, 1000])
    assert list(out) == [0] and "GPU operations" in out[0]
    # as slow, but the same work: kept
    assert _flag([170, 100, 100, 100], [None] * 4, [False] * 4, [1000] * 4) == {}
