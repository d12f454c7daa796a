"""Every analysis result has a declared schema, checked where Metrics is built."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from tests.conftest import SAMPLES
from traceanalyzer import api
from traceanalyzer.analyses.metrics import FRAME_SCHEMAS, Metrics, SchemaDriftError, check_frame


def test_every_frame_field_is_declared() -> None:
    """Metrics' own frames and those of its typed results (each declares its `SCHEMAS`,
    named `<field>.<frame>` in FRAME_SCHEMAS)."""
    metrics = api.run(api.load(SAMPLES / "train_bf16_healthy.json.gz")).metrics
    frames = set()
    for f in dataclasses.fields(Metrics):
        value = getattr(metrics, f.name)
        if isinstance(value, pl.DataFrame):
            frames.add(f.name)
        elif hasattr(value, "SCHEMAS"):
            own = {g.name for g in dataclasses.fields(value) if g.type == "pl.DataFrame"}
            assert own == set(value.SCHEMAS), f.name
            frames |= {f"{f.name}.{name}" for name in value.SCHEMAS}
    assert frames == set(FRAME_SCHEMAS)


def test_a_renamed_or_retyped_column_fails_where_it_is_made() -> None:
    metrics = api.run(api.load(SAMPLES / "train_bf16_healthy.json.gz")).metrics
    devices = metrics.devices.summary
    check_frame("devices.summary", devices)  # as built
    with pytest.raises(SchemaDriftError, match="columns"):
        check_frame("devices.summary", devices.rename({"idle_share": "idle_fraction"}))
    with pytest.raises(SchemaDriftError, match="busy_ns: Float64"):
        check_frame("devices.summary", devices.with_columns(pl.col("busy_ns").cast(pl.Float64)))
    with pytest.raises(SchemaDriftError, match=r"Metrics\.steps\.windows: columns"):
        dataclasses.replace(metrics.steps, windows=metrics.steps.windows.drop("end_ns"))
    with pytest.raises(SchemaDriftError):
        dataclasses.replace(metrics.idle, gaps=metrics.idle.gaps.drop("cause"))
    top = metrics.kernels.top
    check_frame("kernels.top", top)
    with pytest.raises(SchemaDriftError, match=r"Metrics\.kernels\.top: columns"):
        dataclasses.replace(metrics.kernels, top=top.drop("share"))
