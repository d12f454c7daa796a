"""Advice for the program that ran: the context's `framework` read off the trace's names,
and no PyTorch advice (torch.compile, DataLoader, ...) for a program without PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import corpus
from traceanalyzer import api
from traceanalyzer.analyses.context import _framework
from traceanalyzer.model import TraceMeta
from traceanalyzer.rules import ALL_RULES
from traceanalyzer.rules.base import PYTORCH_ADVICE

NSYS = TraceMeta(path="x.sqlite", format="nsys-sqlite", producer="Nsight Systems")
KINETO = TraceMeta(path="x.json", format="chrome", producer="torch.profiler (Kineto)")


@pytest.mark.parametrize(
    ("meta", "host", "kernels", "framework"),
    [
        (KINETO, set(), {"k"}, "pytorch"),
        (NSYS, {"aten::mm", "cudaLaunchKernel"}, {"k"}, "pytorch"),
        (NSYS, {"cudaLaunchKernel"}, {"triton_poi_fused_add_0"}, "pytorch"),
        (NSYS, {"cudaLaunchKernel"}, {"bitonicSortShared"}, "cuda"),
        (NSYS, {"ExecutionContext::enqueueV3"}, {"sm50_xmma_pooling_max"}, "tensorrt"),
        (NSYS, {"cuLaunchKernel"}, {"loop_add_fusion", "input_reduce_fusion_1"}, "xla"),
        (TraceMeta(path="x.json", format="chrome"), set(), {"k"}, None),
    ],
)
def test_the_framework_from_the_names(
    meta: TraceMeta, host: set[str], kernels: set[str], framework: str | None
) -> None:
    assert _framework(meta, frozenset(host), frozenset(kernels)) == framework


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_every_rule_has_advice_without_pytorch(rule: type) -> None:
    """The advice a program without PyTorch gets never names PyTorch's tools."""
    assert not PYTORCH_ADVICE.search(rule.advice_neutral), rule.code


def _nsys_traces() -> list[Path]:
    root = corpus()
    if root is None:
        return []
    return sorted(
        p for p in (root / "public" / "nsys").glob("*.sqlite") if "NOKERNELS" not in p.name
    )


@pytest.mark.skipif(corpus() is None, reason="TRACEANALYZER_CORPUS not set")
@pytest.mark.parametrize("path", _nsys_traces(), ids=lambda p: p.name)
def test_no_pytorch_advice_for_other_programs(path: Path) -> None:
    """The public Nsight exports of CUDA, C++, OpenMP and TensorRT programs: their findings'
    advice names no PyTorch tool."""
    rep = api.report(path)
    if rep.context["framework"] in (None, "pytorch"):
        pytest.skip(f"{path.name} is a PyTorch program")
    for f in rep.findings:
        assert not PYTORCH_ADVICE.search(f.advice), (f.rule, f.advice)
