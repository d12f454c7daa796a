"""GEMM-class kernels that do not run on Tensor Cores, and the evidence for each verdict.

Analyses stage. `tensor_cores.tensor_core_summary` says how much GEMM time ran off Tensor
Cores; this summary says which kernels it was and why the tool thinks so (the name evidence,
e.g. "name: sgemm (SIMT)", or "op dtype fp32, no TF32 token"), with the precision of the
operator that launched them, so a diagnosis can tell FP32-without-TF32 from 16-bit GEMMs that
fell off the fast path.

`tensor_core_impact` prices moving them onto the Tensor Cores (TA005's impact model).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.tensor_cores import DEPTHWISE_EVIDENCE
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, StepCounts

#: How many kernels per device the summary keeps.
DEFAULT_TOP_NON_TC = 5


def non_tensor_core_gemms(kernels: pl.DataFrame, top_n: int = DEFAULT_TOP_NON_TC) -> pl.DataFrame:
    """Per (rank, device, name, evidence, op_dtype) of GEMM-class kernels with verdict "no"
    (depthwise convolutions, which have no Tensor Core form, left out):
    count and total_ns (time inside the window); the `top_n` by time per device, most time
    first.

    `kernels`: kernels inside the windows with kernel_class, verdict, evidence, op_dtype and
    clipped_ns (as `analyze` classifies them).
    """
    return (
        kernels.lazy()
        .filter(
            (pl.col("kernel_class").cast(pl.String) == "gemm")
            & (pl.col("verdict").cast(pl.String) == "no")
            & (pl.col("evidence").cast(pl.String) != DEPTHWISE_EVIDENCE)
        )
        .group_by(
            *DEVICE_KEY,
            name=pl.col("name").cast(pl.String),
            evidence=pl.col("evidence").cast(pl.String),
            op_dtype=pl.col("op_dtype").cast(pl.String),
        )
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("clipped_ns").sum().cast(pl.Int64))
        .sort(*DEVICE_KEY, "total_ns", "name", descending=[False, False, True, False])
        .group_by(DEVICE_KEY, maintain_order=True)
        .head(top_n)
        .collect()
    )


def non_tc_kernels(non_tc: pl.DataFrame, rank: int, device: int, n: int) -> list[dict[str, Any]]:
    """The first `n` GEMM kernels of (rank, device) judged off the Tensor Cores, with their
    evidence (name, evidence, op_dtype, count, total_ns): `non_tc` is
    `non_tensor_core_gemms`' summary (Metrics.gemm_units.off_tensor_cores), most time first."""
    cols = ["name", "evidence", "op_dtype", "count", "total_ns"]
    mine = non_tc.filter((pl.col("rank") == rank) & (pl.col("device") == device))
    return mine.head(n).select(cols).to_dicts()


#: How much faster GEMMs get on the Tensor Cores, conservatively (peak ratios are 7-16x).
TC_SPEEDUP = 3.0


@dataclass(frozen=True, slots=True)
class TensorCoreImpact:
    """What moving one device's GEMMs onto the Tensor Cores saves (TA005's impact model,
    `tensor_core_impact`).

    - `gemm_ns`, `kernel_ns`, `tc_ns`, `unknown_ns`: the device's GEMM-class kernel time, all
      its kernel time, the GEMM time on the Tensor Cores and the GEMM time no verdict was
      reached for (Metrics.devices);
    - `non_tc_ns`: the GEMM time judged off the Tensor Cores that could run on them (never
      negative): depthwise convolutions (`no_tc_form_ns`), which have no Tensor Core form,
      are left out;
    - `impact_ns`: what running it TC_SPEEDUP times faster saves per steady step (None
      without steps); `ceiling_ns`: `non_tc_ns` per steady step (None without steps).
    """

    rank: int
    device: int
    gemm_ns: int
    kernel_ns: int
    tc_ns: int | None
    unknown_ns: int | None
    non_tc_ns: int
    impact_ns: int | None
    ceiling_ns: int | None


def tensor_core_impact(
    devices: pl.DataFrame,
    critical_steps: pl.DataFrame,
    savings: Mapping[tuple[int, str], int],
    counts: StepCounts,
) -> tuple[TensorCoreImpact, ...]:
    """Each device's TensorCoreImpact, in the order of `devices` (Metrics.devices.summary).

    The off-Tensor-Core GEMMs made TC_SPEEDUP times faster save `1 - 1/TC_SPEEDUP` of their
    time. On the critical path, that is the `gemm_2x` what-if (`savings[rank, "gemm_2x"]`:
    every GEMM twice as fast) scaled to the off share of GEMM time and to the gain, and no
    more than that share and gain of the GEMM time on the path (`critical_steps`' mean
    `gpu_gemm_ns`): a host-bound step gains nothing from faster kernels. Without a critical
    path, the gain of the off time per step. `counts`: the steps each device's window
    holds."""
    gain = 1 - 1 / TC_SPEEDUP
    out = []
    for d in devices.iter_rows(named=True):
        rank, device = d["rank"], d["device"]
        gemm, kernel = d["gemm_ns"] or 0, d["kernel_ns"] or 0
        # depthwise convolutions have no Tensor Core form: no dtype or shape moves them
        off = max(0, gemm - (d["tc_ns"] or 0) - (d["unknown_ns"] or 0) - (d["no_tc_form_ns"] or 0))
        share = off / gemm if gemm else 0.0
        saving_2x = savings.get((rank, "gemm_2x"))
        path = critical_steps.filter(pl.col("rank") == rank)["gpu_gemm_ns"].mean()
        impact: int | None
        if saving_2x is None or path is None:
            per_step = counts.per_step(off, rank, device)
            impact = round(per_step * gain) if per_step is not None else None
        else:
            scaled = saving_2x * share * gain / 0.5
            impact = round(min(scaled, float(path) * share * gain))  # type: ignore[arg-type]
        out.append(
            TensorCoreImpact(
                rank=rank,
                device=device,
                gemm_ns=gemm,
                kernel_ns=kernel,
                tc_ns=d["tc_ns"],
                unknown_ns=d["unknown_ns"],
                non_tc_ns=off,
                impact_ns=impact,
                ceiling_ns=counts.per_step(off, rank, device),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class GemmUnits:
    """The GEMM kernels off the Tensor Cores (Metrics.gemm_units).

    - `off_tensor_cores`: rank, device, name, evidence, op_dtype, count, total_ns: per
      device and kernel name, most time first (`non_tensor_core_gemms`).

    Its frame is checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "off_tensor_cores": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "name": pl.String,
            "evidence": pl.String,
            "op_dtype": pl.String,
            "count": pl.Int64,
            "total_ns": pl.Int64,
        }
    }

    off_tensor_cores: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.gemm_units", self.SCHEMAS)
