"""Rules: the registry (an explicit list), checks at import time, and running them."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from traceanalyzer.config import Settings
from traceanalyzer.errors import ConfigError
from traceanalyzer.rules.base import (
    CATEGORIES,
    DOC_SECTIONS,
    Context,
    Finding,
    ImpactPolicy,
    Rule,
    Severity,
)
from traceanalyzer.rules.causes import cause_first
from traceanalyzer.rules.one_price import one_price
from traceanalyzer.rules.ta001_gpu_starvation import GpuStarvation
from traceanalyzer.rules.ta002_host_sync import HostSync
from traceanalyzer.rules.ta003_launch_overhead import LaunchOverhead
from traceanalyzer.rules.ta004_memory_bound import MemoryBound
from traceanalyzer.rules.ta005_no_tensor_cores import NoTensorCores
from traceanalyzer.rules.ta006_odd_shapes import OddShapes
from traceanalyzer.rules.ta007_comm_not_overlapped import CommNotOverlapped
from traceanalyzer.rules.ta008_rank_imbalance import RankImbalance
from traceanalyzer.rules.ta009_pageable_memcpy import PageableMemcpy
from traceanalyzer.rules.ta010_dtype_casts import DtypeCasts
from traceanalyzer.rules.ta011_memory_growth import MemoryGrowth
from traceanalyzer.rules.ta012_trace_quality import TraceQuality, damaged
from traceanalyzer.rules.ta013_unfused_attention import UnfusedAttention
from traceanalyzer.rules.ta014_recompilation import Recompilation
from traceanalyzer.rules.ta015_allocator_churn import AllocatorChurn
from traceanalyzer.rules.ta016_anomaly_detection import AnomalyDetection
from traceanalyzer.rules.ta017_layout_conversion import LayoutConversion
from traceanalyzer.rules.ta018_uneven_steps import UnevenSteps
from traceanalyzer.rules.ta019_activation_recompute import ActivationRecompute
from traceanalyzer.rules.ta020_zero_grad_fill import ZeroGradFill
from traceanalyzer.rules.ta021_host_built_batch import HostBuiltBatch
from traceanalyzer.rules.ta022_library_setup import LibrarySetup
from traceanalyzer.rules.ta023_graph_breaks import GraphBreaks
from traceanalyzer.rules.ta024_ddp_no_sync import DdpNoSync
from traceanalyzer.rules.ta025_underfilled_launches import UnderfilledLaunches
from traceanalyzer.rules.ta026_clock_below_max import ClockBelowMax
from traceanalyzer.rules.ta027_managed_memory import ManagedMemory
from traceanalyzer.rules.ta028_copy_bound import CopyBound

ALL_RULES: list[type[Rule]] = [
    GpuStarvation,
    HostSync,
    LaunchOverhead,
    MemoryBound,
    NoTensorCores,
    OddShapes,
    CommNotOverlapped,
    RankImbalance,
    PageableMemcpy,
    DtypeCasts,
    MemoryGrowth,
    TraceQuality,
    UnfusedAttention,
    Recompilation,
    AllocatorChurn,
    AnomalyDetection,
    LayoutConversion,
    UnevenSteps,
    ActivationRecompute,
    ZeroGradFill,
    HostBuiltBatch,
    LibrarySetup,
    GraphBreaks,
    DdpNoSync,
    UnderfilledLaunches,
    ClockBelowMax,
    ManagedMemory,
    CopyBound,
]


def _check_registry() -> None:
    """A broken rule fails at import (and so in the test suite), not in a user's report."""
    codes = [r.code for r in ALL_RULES]
    slugs = [r.slug for r in ALL_RULES]
    assert len(set(codes)) == len(codes), f"duplicate rule codes: {codes}"
    assert len(set(slugs)) == len(slugs), f"duplicate rule slugs: {slugs}"
    for rule in ALL_RULES:
        assert re.fullmatch(r"TA\d{3}", rule.code), rule.code
        assert rule.category in CATEGORIES, (rule.code, rule.category)
        docs = rule.docs()
        missing = [s for s in DOC_SECTIONS if not docs.get(s)]
        assert not missing, f"{rule.code} lacks doc sections {missing}"
        assert dataclasses.is_dataclass(rule.Thresholds), rule.code
        assert rule.Thresholds.__dataclass_params__.frozen, rule.code  # type: ignore[attr-defined]
        for f in rule.threshold_fields():
            assert f.metadata.get("help"), f"{rule.code}.{f.name} has no help text"


_check_registry()
BY_CODE: dict[str, type[Rule]] = {r.code: r for r in ALL_RULES}


#: The settings key of the impact policy (`[tool.traceanalyzer.rules.impact]`).
IMPACT_KEY = "impact"


def thresholds_for(rule: type[Rule], settings: Settings) -> Any:
    """The rule's Thresholds with the settings' values; unknown keys are a ConfigError."""
    return _typed(rule.code, rule.Thresholds, settings)


def impact_policy(settings: Settings) -> ImpactPolicy:
    """The impact policy with the settings' values."""
    return _typed(IMPACT_KEY, ImpactPolicy, settings)  # type: ignore[no-any-return]


def _typed(code: str, kind_: Any, settings: Settings) -> Any:
    values = dict(settings.thresholds.get(code, {}))
    fields = {f.name: f for f in dataclasses.fields(kind_)}
    unknown = set(values) - set(fields)
    if unknown:
        raise ConfigError(
            f"{code} has no threshold {sorted(unknown)}",
            path=settings.source,
            hint=f"valid: {', '.join(fields) or '(none)'}",
        )
    typed: dict[str, Any] = {}
    for name, value in values.items():
        kind: type[Any] = type(fields[name].default)
        try:
            typed[name] = kind(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"{code}.{name} must be a {kind.__name__}, not {value!r}", path=settings.source
            ) from exc
    return kind_(**typed)


def run_rules(ctx: Context, settings: Settings) -> list[Finding]:
    """Every enabled rule's findings, worst first: by severity (which follows the impact's
    share of a step for rules priced in time, and for risks such as memory growth how soon
    the job fails), risks before costs, then impact (unknown impact after known), code and
    scope. Findings whose impact is under the policy's floor are left out, and all but
    TA012's where TA012 finds the trace damaged (GPU events it could not read)."""
    unknown_codes = set(settings.thresholds) - set(BY_CODE) - {IMPACT_KEY}
    if unknown_codes:
        raise ConfigError(
            f"unknown rule codes {sorted(unknown_codes)}",
            path=settings.source,
            hint=f"known: {', '.join(BY_CODE)}",
        )
    policy = impact_policy(settings)
    ctx = dataclasses.replace(ctx, policy=policy)
    findings: list[Finding] = []
    for rule in ALL_RULES:  # a dozen rules, not events
        if settings.enabled(rule.code):
            found = rule().check(ctx, thresholds_for(rule, settings))
            findings.extend(f for f in found if rule.below_floor or not _trivial(ctx, f, policy))
    # a wall's time that a cause explains is the cause's: priced once, by the cause
    findings = cause_first(ctx, findings)
    # one cause on several ranks is one finding; two findings of one interval, one price
    findings = one_price(ctx, findings)
    t012 = thresholds_for(TraceQuality, settings)
    if damaged(ctx.meta.quality, t012.max_dropped_gpu_share):
        # the trace lost GPU events it needs: a verdict only on what was read, so no
        # performance finding on a timeline with holes, whatever rules are selected
        findings = [f for f in findings if f.rule == "TA012"]
        if not any(f.evidence.get("damaged") for f in findings):
            findings += list(TraceQuality().damaged_finding(ctx, t012))
    return sorted(
        findings,
        key=lambda f: (
            -f.severity.rank,
            not BY_CODE[f.rule].risk,
            f.impact_ns is None,
            -(f.impact_ns or 0),
            f.rule,
            f.scope.rank if f.scope.rank is not None else -1,
            f.scope.device if f.scope.device is not None else -1,
        ),
    )


def _trivial(ctx: Context, f: Finding, policy: ImpactPolicy) -> bool:
    """A finding priced in time whose fix saves under the floor's share of a step."""
    share = ctx.share_of_step(f.scope.rank, f.impact_ns)
    return share is not None and share < policy.min_share


def worst(findings: list[Finding]) -> Severity | None:
    """The highest severity among the findings."""
    return max((f.severity for f in findings), key=lambda s: s.rank, default=None)


__all__ = ["ALL_RULES", "BY_CODE", "Context", "Finding", "Rule", "Severity", "run_rules"]
