"""The verdict line: what bounds the job, from the worst finding or the critical path."""

from __future__ import annotations

from typing import Any

from traceanalyzer.report import verdict
from traceanalyzer.rules.base import Finding, Scope, Severity


def _finding(rule: str, category: str, severity: str, impact: int, share: float) -> Finding:
    return Finding(
        rule=rule,
        slug=rule.lower(),
        category=category,
        severity=Severity(severity),
        title=f"{rule} title",
        message="m",
        scope=Scope(rank=0),
        impact_ns=impact,
        evidence={"impact_share_of_step": share},
        advice="a",
    )


def _device(busy: float) -> Any:
    return {"window_ns": 1000, "busy_ns": round(1000 * busy)}


def _path(**by_kind: int) -> dict[str, Any]:
    kinds = {"gpu_compute": 0, "comm": 0, "copy": 0, "cpu": 0, "sync_wait": 0, "idle": 0}
    kinds.update(by_kind)
    return {"steps": 2, "step_ns": sum(kinds.values()), "by_kind": kinds}


def test_a_serious_finding_names_the_bound() -> None:
    v = verdict(
        [_device(0.3)],
        [_path(cpu=150, gpu_compute=50)],
        [_finding("TA003", "launch_overhead", "critical", 60, 0.6)],
    )
    assert v["bound_by"] == "launch" and v["top_saving_ns"] == 60 and v["step_ns"] == 100
    assert v["headline"].startswith("launch-bound: ") and "TA003" in v["headline"]


def test_a_small_warning_leaves_the_bound_to_the_path() -> None:
    small = _finding("TA010", "dtype_casts", "warning", 5, 0.05)
    v = verdict([_device(0.5)], [_path(cpu=150, gpu_compute=50)], [small])
    assert v["bound_by"] == "host" and "TA010" in v["headline"]


def test_a_busy_gpu_is_never_host_bound_by_the_path_alone() -> None:
    v = verdict([_device(0.9)], [_path(cpu=150, gpu_compute=50)], [])
    assert v["bound_by"] == "gpu_compute"


def test_pageable_copies_that_lead_make_the_job_copy_bound() -> None:
    """Copies are a wall of their own: neither the host's work nor the GPU's compute."""
    copies = _finding("TA009", "pageable_memcpy", "critical", 500, 0.5)
    v = verdict([_device(1.0)], [], [copies])
    assert v["bound_by"] == "copy" and v["headline"].startswith("copy-bound")
    assert "TA009" in v["headline"]


def test_a_gpu_busy_with_copies_is_copy_bound() -> None:
    """Busy 90 % of the window, two thirds of it copies: not GPU-compute-bound."""
    busy = {**_device(0.9), "kernel_ns": 300}
    assert verdict([busy], [_path(cpu=150, gpu_compute=50)], [])["bound_by"] == "copy"
    kernels = {**_device(0.9), "kernel_ns": 800}
    assert verdict([kernels], [_path(cpu=150, gpu_compute=50)], [])["bound_by"] == "gpu_compute"


def _cause(rule: str, category: str, impact: int, share: float, words: str) -> Finding:
    f = _finding(rule, category, "warning", impact, share)
    return Finding(
        **{
            **{k: getattr(f, k) for k in Finding.__dataclass_fields__},
            "evidence": {"impact_share_of_step": share, "cause_words": words, "bound_by": "host"},
        }
    )


def test_the_cause_goes_first_in_the_headline() -> None:
    """A cause that leads names itself and its share of the step after the wall; one that
    does not lead is named with its rule; `cause` is its code either way."""
    cause = _cause("TA014", "recompilation", 80, 0.8, "torch.compile recompiles every step")
    v = verdict([_device(0.1)], [_path(cpu=90, gpu_compute=10)], [cause])
    assert v["cause"] == "TA014" and v["bound_by"] == "host"
    assert v["headline"].startswith("host-bound: torch.compile recompiles every step: ")
    assert " of " in v["headline"] and " per step" in v["headline"]
    wall = _finding("TA001", "gpu_starvation", "critical", 50, 0.5)
    small = _cause("TA015", "allocator_churn", 20, 0.2, "the allocator calls cudaMalloc")
    v = verdict([_device(0.1)], [_path(cpu=90, gpu_compute=10)], [wall, small])
    assert v["cause"] == "TA015" and "(TA015: " in v["headline"]
    assert verdict([_device(0.1)], [_path(cpu=90, gpu_compute=10)], [wall])["cause"] is None


def test_a_host_bound_verdict_on_a_profiled_host_says_so() -> None:
    wall = _finding("TA001", "gpu_starvation", "critical", 50, 0.5)
    stacks = {"profiler_overhead": {"stacks": True, "memory": False, "shapes": True}}
    v = verdict([_device(0.1)], [_path(cpu=90, gpu_compute=10)], [wall], stacks)
    assert "recorded with Python stacks" in v["headline"]
    plain = {"profiler_overhead": {"stacks": False, "memory": False, "shapes": True}}
    assert (
        "recorded with" not in verdict([_device(0.1)], [_path(cpu=90)], [wall], plain)["headline"]
    )
    busy = _finding("TA005", "no_tensor_cores", "critical", 50, 0.5)
    assert (
        "recorded with"
        not in verdict([_device(1.0)], [_path(gpu_compute=90)], [busy], stacks)["headline"]
    )


def test_no_finding_is_never_said_above_a_warning() -> None:
    """A trace-quality warning (TA012) and nothing that bounds the job: the headline says no
    performance finding, and names what warns; without it, no finding at all."""
    quality = _finding("TA012", "trace_quality", "warning", 0, 0.0)
    v = verdict([_device(0.9)], [_path(gpu_compute=150)], [quality])
    assert "no finding at warning or above" not in v["headline"]
    assert "no performance finding at warning or above (TA012 warns: TA012 title)" in v["headline"]
    plain = verdict([_device(0.9)], [_path(gpu_compute=150)], [])
    assert "no finding at warning or above" in plain["headline"]


def test_one_step_time_on_every_sample() -> None:
    """Each bundled sample: the verdict's step time is the job's loop period, inside its
    single steps' range, and the text report's critical-path and Ranks headings carry it."""
    import io

    from tests.conftest import SAMPLES
    from traceanalyzer import api
    from traceanalyzer.render.terminal import TerminalRenderer
    from traceanalyzer.render.units import duration

    for path in (
        SAMPLES / "train_bf16_healthy.json.gz",
        SAMPLES / "tiny_kernels.json.gz",
        SAMPLES / "sampled_2rank",
    ):
        rep = api.report(path)
        doc = rep.to_json_dict()
        job = max((p["period"] for p in doc["critical_path"]), key=lambda q: q["period_ns"])
        step = doc["verdict"]["step_ns"]
        assert step == job["period_ns"], path
        assert job["min_ns"] - 1 <= step <= job["max_ns"] + 1, path
        buf = io.StringIO()
        TerminalRenderer().render(rep, buf)
        assert f"Critical path (what bounds the {duration(step)} step)" in buf.getvalue(), path
        if len(doc["ranks"]) > 1:
            assert f"Ranks (per steady step of {duration(step)}" in buf.getvalue()


def test_busy_shares_are_never_averaged_across_devices() -> None:
    """Two devices at 4 % and 92 % busy: the headline names both; three or more their range;
    shares within 10 points of each other read as one."""
    two = [{"window_ns": 1000, "busy_ns": 40}, {"window_ns": 1000, "busy_ns": 920}]
    assert "GPUs busy 4% and 92%" in verdict(two, [], [])["headline"]
    three = [*two, {"window_ns": 1000, "busy_ns": 500}]
    assert "GPUs busy 4%-92% (3 devices)" in verdict(three, [], [])["headline"]
    close = [{"window_ns": 1000, "busy_ns": 450}, {"window_ns": 1000, "busy_ns": 470}]
    assert "GPU busy 46%" in verdict(close, [], [])["headline"]


def test_nothing_is_per_step_without_steps() -> None:
    """An Nsight export without step markers (a CUDA sample on an RTX 3060 whose pageable
    copies TA009 counts): no finding's message or the headline says "per step" (it said
    "2.0 per step"); the figures are the window's."""
    import pytest

    from tests.conftest import corpus
    from traceanalyzer import api

    root = corpus()
    if root is None:
        pytest.skip("needs the shared corpus (TRACEANALYZER_CORPUS)")
    doc = api.report(root / "public" / "nsys" / "cuda_perf_sandbox_rtx3060.sqlite").to_json_dict()
    assert doc["window"]["basis"] == "trace" and doc["diagnoses"]
    assert "per step" not in doc["verdict"]["headline"]
    for f in doc["diagnoses"]:
        assert "per step" not in f["message"], f["message"]
    assert any("in the window" in f["message"] for f in doc["diagnoses"])
