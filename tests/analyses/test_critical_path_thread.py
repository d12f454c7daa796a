"""The critical path's tables built beside the windows (many cores) or before them (few):
the same report, and the tables on the critical-path thread only where they are beside.
(One process: the ranks of a folder are analysed in worker processes the patch does not
reach.)"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLES, corpus
from traceanalyzer import api
from traceanalyzer.analyses.distributed import rank
from traceanalyzer.config import Settings
from traceanalyzer.render import RENDERERS


def _json(path: Path) -> str:
    out = io.StringIO()
    RENDERERS["json"].render(api.report(path, settings=Settings()), out)
    return out.getvalue()


def _cases() -> list[Path]:
    cases = [SAMPLES / "train_bf16_healthy.json.gz", SAMPLES / "tiny_kernels.json.gz"]
    root = corpus()
    if root is not None:  # CUDA graphs and NCCL, and an Nsight export
        cases += [
            root / "public/hta/a100_cudagraph_nccl_rank0/rank0.json.gz",
            root / "h100/nsys_train_bf16.sqlite",
        ]
    return cases


@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.name)
def test_tables_beside_the_windows_give_the_same_report(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    tables = rank._tables

    def recorded(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return tables(*args)

    monkeypatch.setattr(rank, "_tables", recorded)
    monkeypatch.setattr(rank, "TABLES_BESIDE_FROM", 10**6)
    before = _json(path)
    assert threads and all(t == "MainThread" for t in threads)
    threads.clear()
    monkeypatch.setattr(rank, "TABLES_BESIDE_FROM", 1)
    assert _json(path) == before
    assert threads and all(t.startswith("critical-path") for t in threads)
