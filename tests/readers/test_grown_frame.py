"""A large file's events made one frame as they are read (`chrome_fields.keep`): the same
timeline as the blocks' frames kept apart and joined at the end, and every column in one
piece.

Small blocks (`BLOCK_BYTES`) and a low threshold (`GROW_FROM_ROWS`) put these traces
through the growing frame for most of their blocks; the reference keeps every block's frame
apart (the threshold out of reach), as reading a small file does.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.conftest import SAMPLES, corpus
from traceanalyzer.readers import chrome_fields, chrome_trace
from traceanalyzer.readers.chrome_trace import ChromeTraceReader


def _cases() -> list[Path]:
    cases = [SAMPLES / "train_bf16_healthy.json.gz", SAMPLES / "tiny_kernels.json.gz"]
    root = corpus()
    if root is not None:  # ROCm text ids, the 2021 schema, memory events, collectives, stacks
        public = root / "public"
        cases += [
            public / "hta/amd_mi250_minitoy/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
            public / "kineto/resnet50_v1_schema/worker0.pt.trace.json.gz",
            public / "param/dlrm_8rank_v100/worker0_step_12.1694128201545.pt.trace.json.gz",
            public / "hta/a100_cudagraph_nccl_rank0/rank0.json.gz",
            public / "tracelens/b200_eager_rank0/eager_trace.json.gz",
        ]
    return cases


def _read(path: Path, grow_from: int, monkeypatch: pytest.MonkeyPatch) -> tuple[pl.DataFrame, int]:
    """The events of `path` read in 64 KB blocks, growing one frame from `grow_from` events,
    and how many frames the blocks left for the read's end."""
    monkeypatch.setattr(chrome_trace, "BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(chrome_fields, "GROW_FROM_ROWS", grow_from)
    left: list[int] = []
    contiguous = chrome_trace._contiguous

    def counted(part: chrome_fields.Parsed) -> pl.DataFrame:
        left.append(len(part.frames))
        return contiguous(part)

    monkeypatch.setattr(chrome_trace, "_contiguous", counted)
    events = ChromeTraceReader().read(path).events
    return events, left[0]


@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.parent.name + "/" + p.name)
def test_the_grown_frame_is_the_blocks_frames_joined(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apart, frames_apart = _read(path, 10**12, monkeypatch)
    grown, frames_grown = _read(path, 10, monkeypatch)
    assert frames_apart > 2  # many blocks, each its own frame
    assert frames_grown == 1  # one frame, grown in place
    assert grown.schema == apart.schema
    assert grown.equals(apart)
    assert set(grown.n_chunks("all")) == {1}


def test_keep_grows_one_frame_from_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chrome_fields, "GROW_FROM_ROWS", 5)
    parsed = chrome_fields.Parsed(path=Path("x.json"), header={})
    blocks = [
        pl.DataFrame({"a": list(range(i * 3, i * 3 + 3)), "s": ["x", None, "y"]}) for i in range(4)
    ]
    heights = []
    for block in blocks:
        chrome_fields.keep((block, chrome_fields.Counter({"bad": 1})), parsed)
        heights.append([f.height for f in parsed.frames])
    assert heights == [[3], [6], [9], [12]]  # apart, then one frame at 6 >= 5 events
    assert parsed.dropped == {"bad": 4}
    assert parsed.frames[0].equals(pl.concat(blocks))
    chrome_fields.keep((None, chrome_fields.Counter()), parsed)
    assert parsed.event_count == 12
