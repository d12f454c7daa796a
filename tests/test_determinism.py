"""Same trace, same report: the JSON report of a run is byte-identical from one run to the
next, order of every list included (people diff reports, and scripts take `[0]`).

Parallel sorts and hash group-bys leave ties in any order; every ordered table must break
them. Checked in-process (the thread pool differs from run to run) on traces with many ties:
eight ranks with the same sync sites and copies, CUDA graphs, and the Nsight export.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, corpus
from traceanalyzer import api
from traceanalyzer.config import Settings
from traceanalyzer.render import RENDERERS


def _json(path: Path) -> str:
    out = io.StringIO()
    RENDERERS["json"].render(api.report(path, settings=Settings()), out)
    return out.getvalue()


def _cases() -> list[Path]:
    cases = [SAMPLES / "sampled_2rank"]
    root = corpus()
    if root is not None:
        cases += [
            root / "public/param/dlrm_8rank_v100",
            root / "public/hta/a100_cudagraph_nccl_rank0",
            root / "h100/nsys_train_bf16.sqlite",
        ]
    return cases


@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.name)
def test_report_is_the_same_every_run(path: Path) -> None:
    first = _json(path)
    for _ in range(3):
        assert _json(path) == first
