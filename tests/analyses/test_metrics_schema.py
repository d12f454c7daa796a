"""Every analysis result has a declared schema, checked where Metrics is built."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from tests.conftest import SAMPLES
from traceanalyzer import api
from traceanalyzer.analyses.metrics import FRAME_SCHEMAS, Metrics, SchemaDriftError, check_frame


def test_every_frame_field_is_declared() -> None:
    frames = {f.name for f in dataclasses.fields(Metrics) if f.type in ("pl.DataFrame",)}
    assert frames == set(FRAME_SCHEMAS)


def test_a_renamed_or_retyped_column_fails_where_it_is_made() -> None:
    metrics = api.run(api.load(SAMPLES / "train_bf16_healthy.json.gz")).metrics
    devices = metrics.devices
    check_frame("devices", devices)  # as built
    with pytest.raises(SchemaDriftError, match="columns"):
        check_frame("devices", devices.rename({"idle_share": "idle_fraction"}))
    with pytest.raises(SchemaDriftError, match="busy_ns: Float64"):
        check_frame("devices", devices.with_columns(pl.col("busy_ns").cast(pl.Float64)))
    with pytest.raises(SchemaDriftError):
        dataclasses.replace(metrics, gaps=metrics.gaps.drop("cause"))
