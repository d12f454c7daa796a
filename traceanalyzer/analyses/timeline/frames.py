"""Declared frame schemas and their check, shared by every room's typed results.

A result type (`kernels.Kernels`, ...) declares the columns of each of its frames in a
`SCHEMAS` class variable (frame field -> column -> dtype, in order; `pl.Enum` stands for an
Enum of any categories) and checks its frames against them when it is built, so a renamed
or retyped column fails at the analysis that made it, not silently in the published JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import polars as pl

#: A result type's declared frames: frame field -> column -> dtype, in order.
Schemas = Mapping[str, Mapping[str, Any]]


class SchemaDriftError(AssertionError):
    """An analysis produced a frame that does not match its declared schema (a bug)."""


def _matches(dtype: pl.DataType, declared: Any) -> bool:
    if declared is pl.Enum:
        return isinstance(dtype, pl.Enum)
    return bool(dtype == declared)


def check_schema(
    label: str,
    frame: pl.DataFrame,
    declared: Mapping[str, Any],
    optional: Mapping[str, Any] | None = None,
) -> None:
    """Raise SchemaDriftError (naming `label`) where `frame` is not `declared` (plus the
    `optional` columns, at the end, in order)."""
    declared = dict(declared)
    optional = dict(optional or {})
    names = list(frame.columns)
    extra = names[len(declared) :]
    if names[: len(declared)] != list(declared) or extra != list(optional)[: len(extra)]:
        raise SchemaDriftError(
            f"{label}: columns {names}, declared {list(declared)}"
            + (f" (+ optional {list(optional)})" if optional else "")
        )
    declared |= optional
    wrong = [
        f"{col}: {dtype} (declared {declared[col]})"
        for col, dtype in frame.schema.items()
        if not _matches(dtype, declared[col])
    ]
    if wrong:
        raise SchemaDriftError(f"{label}: {', '.join(wrong)}")


def check_frames(
    result: Any, label: str, schemas: Schemas, optional: Schemas | None = None
) -> None:
    """Check each frame of the typed `result` named in `schemas` (its field -> columns)."""
    for name, declared in schemas.items():
        extra = (optional or {}).get(name)
        check_schema(f"{label}.{name}", getattr(result, name), declared, extra)


def per_distinct(
    name: pl.Expr, decide: Callable[[pl.Expr], pl.Expr], dtype: pl.DataType
) -> pl.Expr:
    """Apply `decide` to the distinct values of `name` only, then map every row.

    Kernel names repeat (a trace of millions of kernels has a few hundred distinct names)
    and are long, so the regex tables run once per distinct name instead of once per row.
    Both sides keep first-occurrence order, so they line up. Keeps `name`'s output name.
    """
    # As Categorical (the timeline's dtype already), `unique` and the mapping hash small
    # integers, not long strings; `decide` may refer to the distinct values many times.
    key = name.cast(pl.Categorical())
    distinct = key.unique(maintain_order=True)
    return key.replace_strict(distinct, decide(distinct), return_dtype=dtype)
