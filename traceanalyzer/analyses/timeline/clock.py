"""Clock consistency: GPU work that starts before the host call that launched it.

Analyses stage. A kernel, memcpy or memset cannot start before its launch call began on the
host: the correlation id ties the two together. Where the GPU timestamp is earlier, host and
device clocks disagree (CUPTI's clock conversion drifted, traces of several hosts were merged
without aligning them, or the producer wrote wrong timestamps). Small differences are normal
(timestamp rounding to whole microseconds in older Kineto traces), so only work starting more
than a tolerance before its launch counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY
from traceanalyzer.model import Timeline

#: GPU work starting earlier than its launch by more than this is a clock problem.
EARLY_START_TOLERANCE_NS = 5_000


def early_starts(
    timeline: Timeline,
    tolerance_ns: int = EARLY_START_TOLERANCE_NS,
    *,
    work: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per (rank, device) with linked launches: linked (GPU operations whose launch call is
    recorded), early (those starting more than `tolerance_ns` before their launch began),
    early_share (early / linked) and max_early_ns (the largest lead, 0 where none).

    `work`: the GPU work with `launch_ns` (windows.linked_work), where already computed.
    """
    lead = pl.col("launch_start_ns") - pl.col("start_ns")
    links = (
        timeline.launch_links()
        if work is None
        else work.lazy().select(*DEVICE_KEY, "start_ns", launch_start_ns="launch_ns")
    )
    return (
        links.filter(pl.col("launch_start_ns").is_not_null())
        .group_by(DEVICE_KEY)
        .agg(
            linked=pl.len().cast(pl.Int64),
            early=(lead > tolerance_ns).sum().cast(pl.Int64),
            max_early_ns=lead.max().clip(lower_bound=0).cast(pl.Int64),
        )
        .with_columns(early_share=pl.col("early") / pl.col("linked"))
        .select(*DEVICE_KEY, "linked", "early", "early_share", "max_early_ns")
        .sort(DEVICE_KEY)
        .collect()
    )


@dataclass(frozen=True, slots=True)
class EarlyStarts:
    """GPU work that starts before the host call that launched it (Metrics.early_starts).

    - `summary`: rank, device, linked, early, early_share, max_early_ns: per device, the
      linked launches, how many start early, their share and the earliest
      (`early_starts`).

    Its frame is checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "summary": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "linked": pl.Int64,
            "early": pl.Int64,
            "early_share": pl.Float64,
            "max_early_ns": pl.Int64,
        }
    }

    summary: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.early_starts", self.SCHEMAS)
