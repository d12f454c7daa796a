"""TA028: direct copies hold the GPU. A copy-bound job whose copies are pinned already is
told to keep its data on the device or overlap, never to pin, and priced by what overlap
saves (at most the kernels beside the copies); pageable copies stay TA009's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import corpus
from traceanalyzer import api
from traceanalyzer.rules.examples import (
    device_properties,
    gpu_op,
    launch,
    launched,
    step,
    write_example,
)


def _job(memory: str, tmp_path: Path) -> Path:
    """Three steps of a 2 ms host-to-device copy from `memory` and 0.3 ms of kernels after
    it, on an H100."""
    events = [device_properties()]
    t, corr = 100.0, 1
    for n in range(1, 4):
        start = t
        events.append(launch(t + 1, 3, corr, name="cudaMemcpyAsync"))
        events.append(
            gpu_op(
                "gpu_memcpy",
                t + 5,
                2000,
                f"Memcpy HtoD ({memory.title()} -> Device)",
                stream=8,
                corr=corr,
                bytes=40_000_000,
            )
        )
        corr += 1
        for k in range(3):
            events += launched(t + 10 + k, t + 2010 + k * 100, 100, corr, "k(float*)")
            corr += 1
        t += 2400
        events.append(step(n, start, t - start))
        t += 1
    return write_example(events, tmp_path, f"copies_{memory}")


def test_pinned_copies_that_hold_the_gpu(tmp_path: Path) -> None:
    rep = api.report(_job("pinned", tmp_path))
    assert rep.verdict is not None and rep.verdict["bound_by"] == "copy"
    (f,) = [f for f in rep.findings if f.rule == "TA028"]
    assert "TA009" not in [g.rule for g in rep.findings]
    # overlap hides the 0.3 ms of kernels a step, no more; keeping the data saves the copy
    assert f.impact_ns is not None and 0.25e6 <= f.impact_ns <= 0.3e6
    assert f.impact_ns <= f.evidence["impact_ceiling_ns"]
    assert 1.9e6 <= f.evidence["resident_ns"] <= 2.1e6
    assert "pin" not in f.advice.replace("pinning changes nothing", "")
    assert "keep the data on the GPU" in f.advice


def test_pageable_copies_are_not_its(tmp_path: Path) -> None:
    rep = api.report(_job("pageable", tmp_path))
    rules = [f.rule for f in rep.findings]
    assert "TA009" in rules and "TA028" not in rules


@pytest.mark.skipif(corpus() is None, reason="TRACEANALYZER_CORPUS not set")
def test_an_inference_job_fed_by_pinned_copies() -> None:
    """nsys-ai's H100 inference capture (its README: kernels 2.3 % busy, pinned
    host-to-device copies keep the GPU 99 % busy): copy-bound, TA028 on both GPUs as one
    finding, priced at the kernels' time (what overlap can hide)."""
    root = corpus()
    assert root is not None
    rep = api.report(root / "public" / "nsys" / "nsysai_h100x2_infer_1s.sqlite")
    assert rep.verdict is not None and rep.verdict["bound_by"] == "copy"
    (f,) = [f for f in rep.findings if f.rule == "TA028"]
    assert f.evidence["ranks"] == [0, 1]
    kernels = max(d["kernel_ns"] for d in rep.devices)
    assert f.impact_ns is not None and f.impact_ns <= kernels
