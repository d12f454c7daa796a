"""Kernels shorter than a launch: the host's waits between them are launch overhead (TA003),
whatever the length of each, not starvation (TA001); longer kernels, or waits longer than
issuing an operator takes, stay TA001's (analyses/host/host_bound.launch_bound)."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceanalyzer import api
from traceanalyzer.config import Settings
from traceanalyzer.rules.examples import Event, launched, step, write_example

_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>"


def _rules(tmp_path: Path, every_us: float, kernel_us: float) -> dict[str, int | None]:
    """200 kernels of `kernel_us`, the host launching one every `every_us` (each kernel starts
    5 µs after its launch: the GPU waits for every launch): rule -> impact."""
    events: list[Event] = [step(1, 100, 200 * every_us + 100)]
    for i in range(200):
        at = 110 + every_us * i
        events += launched(at, at + 5, kernel_us, i + 1, _ADD)
    path = write_example(events, tmp_path, "launches")
    report = api.report(path, settings=Settings(select=("TA001", "TA003")))
    return {f.rule: f.impact_ns for f in report.findings}


@pytest.mark.parametrize("every_us", [30.0, 80.0])
def test_tiny_kernels_waits_are_launch_overhead(tmp_path: Path, every_us: float) -> None:
    """2 µs kernels: gaps of 23 µs (short) and of 73 µs (over the 50 µs launch-gap limit)
    alike are the cost of issuing each operator."""
    found = _rules(tmp_path, every_us, 2.0)
    assert set(found) == {"TA003"}
    # the whole wait of each of the 199 gaps between kernels, in one step
    assert found["TA003"] == pytest.approx(199 * (every_us - 2.0) * 1000, rel=0.02)


def test_longer_kernels_waits_are_the_hosts(tmp_path: Path) -> None:
    """20 µs kernels (longer than a launch) with 60 µs gaps: the host is late, not launching."""
    assert set(_rules(tmp_path, 80.0, 20.0)) == {"TA001"}


def test_tiny_kernels_long_waits_are_the_hosts(tmp_path: Path) -> None:
    """2 µs kernels, one every 400 µs: ~400 µs of host work per kernel is more than issuing an
    operator takes; the host did other work."""
    assert set(_rules(tmp_path, 400.0, 2.0)) == {"TA001"}
