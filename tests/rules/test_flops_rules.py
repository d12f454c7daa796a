"""Advice from where the kernels come from, and attention computed by hand (TA013)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, SAMPLES
from traceanalyzer import api
from traceanalyzer.analyses import analyze
from traceanalyzer.readers import read
from traceanalyzer.rules.examples import write_example
from traceanalyzer.rules.ta013_unfused_attention import UnfusedAttention

GPU = REPO / "tests" / "data" / "gpu"


def test_tiny_kernels_from_a_per_parameter_optimizer_get_fused_advice() -> None:
    """launch_bound_train runs AdamW(foreach=False): 63 % of its tiny kernels are launched
    inside optimizer.step. TA003 names it, advises fused=True and prices those launches'
    share of the launch overhead."""
    m = analyze(read(GPU / "launch_bound_train.json.gz"))
    phases = {r["phase"]: r for r in m.host_phases.kernels.iter_rows(named=True)}
    assert sum(r["kernels"] for r in phases.values()) == 4 * 1892  # every steady kernel
    assert phases["optimizer"]["tiny"] / sum(r["tiny"] for r in phases.values()) > 0.5
    rep = api.report(GPU / "launch_bound_train.json.gz")
    (f,) = [f for f in rep.findings if f.rule == "TA003"]
    assert "fused=True" in f.advice and "optimizer.step" in f.message
    share = f.evidence["tiny_kernel_share_from_optimizer"]
    assert 0.5 < share < 0.8


def test_a_fused_optimizer_is_not_told_to_fuse() -> None:
    """The healthy sample's tiny kernels come from forward and backward, not the optimizer:
    no optimizer advice."""
    m = analyze(read(SAMPLES / "train_bf16_healthy.json.gz"))
    phases = {r["phase"]: r["tiny"] for r in m.host_phases.kernels.iter_rows(named=True)}
    assert phases.get("optimizer", 0) < 0.1 * sum(phases.values())


def test_unfused_attention_example(tmp_path: Path) -> None:
    bad = api.report(write_example(UnfusedAttention.example_bad, tmp_path, "bad"))
    (f,) = [f for f in bad.findings if f.rule == "TA013"]
    shape = f.evidence["shapes"][0]
    assert (shape["n"], shape["t"], shape["s"], shape["d"]) == (8, 256, 256, 64)
    assert f.impact_ns is not None and 0 <= f.impact_ns <= f.evidence["kernel_ns_per_step"]
    assert "scaled_dot_product_attention" in f.advice
    good = api.report(write_example(UnfusedAttention.example_good, tmp_path, "good"))
    assert "TA013" not in [f.rule for f in good.findings]


def test_fused_attention_runs_no_finding() -> None:
    """The healthy sample uses cuDNN SDPA: no hand-written attention."""
    m = analyze(read(SAMPLES / "train_bf16_healthy.json.gz"))
    assert m.attention.unfused.height == 0
    rep = api.report(SAMPLES / "train_bf16_healthy.json.gz")
    assert "TA013" not in [f.rule for f in rep.findings]


def test_a_big_softmax_is_not_attention() -> None:
    """memory_bound.json.gz softmaxes 64 x 1024 x 1024 activations that no Q·Kᵀ product
    makes: not attention."""
    m = analyze(read(GPU / "memory_bound.json.gz"))
    assert m.attention.unfused.height == 0
