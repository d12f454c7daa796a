"""Rule base class, Finding, Severity and the context rules read.

Pipeline position: Metrics (and the critical path's what-ifs) -> rules -> Findings -> Report.
A rule compares and explains; every number it reports comes from an analysis.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.model import TraceMeta

CATEGORIES = (
    "gpu_starvation",
    "host_sync",
    "launch_overhead",
    "memory_bound",
    "no_tensor_cores",
    "comm_not_overlapped",
    "rank_imbalance",
    "pageable_memcpy",
    "odd_shapes",
    "dtype_casts",
    "memory_growth",
    "trace_quality",
    "unfused_attention",
    "recompilation",
    "allocator_churn",
    "anomaly_detection",
    "layout_conversion",
    "uneven_steps",
    "activation_recompute",
    "zero_grad_fill",
    "host_built_batch",
    "library_setup",
    "graph_breaks",
    "ddp_no_sync",
    "underfilled_launches",
    "managed_memory",
    "clock_throttling",
    "copy_bound",
)
#: A fix that saves at least this share of step time is critical / a warning; less is info.
CRITICAL_SHARE = 0.30
WARNING_SHARE = 0.03
#: A finding priced in time whose fix saves less than this share of a step is not reported.
MIN_IMPACT_SHARE = 0.01


@dataclass(frozen=True, slots=True)
class ImpactPolicy:
    """How every rule priced in time turns its impact into a severity, in one place
    (settings: `[tool.traceanalyzer.rules.impact]`, or `--set impact.min_share=0.02`)."""

    critical_share: float = field(
        default=CRITICAL_SHARE,
        metadata={"help": "impact as a share of the steady step at which a finding is critical"},
    )
    warning_share: float = field(
        default=WARNING_SHARE,
        metadata={"help": "impact as a share of the steady step at which it is a warning"},
    )
    min_share: float = field(
        default=MIN_IMPACT_SHARE,
        metadata={"help": "impact share of a step under which a finding is not reported"},
    )


DOC_SECTIONS = ("What it detects", "Why it matters", "How to fix", "Known false positives")


class Severity(StrEnum):
    """How bad a finding is; ordered."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """0 for info, 1 for warning, 2 for critical."""
        return list(Severity).index(self)


def severity_for(
    impact_share: float | None, default: Severity, policy: ImpactPolicy | None = None
) -> Severity:
    """Severity by the share of step time a fix would save (field notes: a problem costing
    0.1 % of step time is at most info); the rule's default where the impact is unknown."""
    p = policy or ImpactPolicy()
    if impact_share is None:
        return default
    if impact_share >= p.critical_share:
        return Severity.CRITICAL
    if impact_share >= p.warning_share:
        return Severity.WARNING
    return Severity.INFO


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a finding applies; None fields apply everywhere."""

    rank: int | None = None
    device: int | None = None
    window: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis, as the contract defines it."""

    rule: str
    slug: str
    category: str
    severity: Severity
    title: str
    message: str
    scope: Scope
    impact_ns: int | None
    evidence: dict[str, Any]
    advice: str
    #: The time the price claims (the rule's `claims`): findings that claim the same time
    #: are alternatives, never a sum.
    claims: str = ""

    def to_json(self) -> dict[str, Any]:
        """The contract's diagnosis object."""
        return {
            "rule": self.rule,
            "category": self.category,
            "severity": self.severity.value,
            "title": self.title,
            "message": self.message,
            "scope": {
                "rank": self.scope.rank,
                "device": self.scope.device,
                "window": (
                    {"start_ns": self.scope.window[0], "end_ns": self.scope.window[1]}
                    if self.scope.window
                    else None
                ),
            },
            "impact_ns": self.impact_ns,
            "claims": self.claims,
            "evidence": self.evidence,
            "advice": self.advice,
        }


@dataclass(frozen=True, slots=True)
class Context:
    """What rules read: the analyses' metrics, the trace's meta, and the critical path's
    what-if savings per step (scenario -> mean ns saved per step, per rank), when known."""

    metrics: Metrics
    meta: TraceMeta
    what_if: dict[tuple[int, str], int] = field(default_factory=dict)
    step_ns: dict[int, int] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    policy: ImpactPolicy = field(default_factory=ImpactPolicy)

    def uses(self, key: str) -> bool:
        """True when the run context says the run uses `key` (torch_compile, cuda_graphs...);
        a partial use (`"partial"`) is not a use."""
        return self.run.get(key) is True

    @property
    def amd(self) -> bool:
        """True on AMD GPUs (ROCm): advice names HIP, RCCL and Matrix Cores."""
        return self.run.get("vendor") == "amd"

    def step_of(self, rank: int | None) -> int | None:
        """The mean steady step time of `rank` (the longest rank's when None)."""
        steps = [v for r, v in self.step_ns.items() if rank is None or r == rank]
        return max(steps) if steps else None

    def saving(self, rank: int | None, scenario: str) -> int | None:
        """Mean step time saved on `rank` (worst rank when None) under a what-if scenario."""
        if rank is not None:
            return self.what_if.get((rank, scenario))
        values = [v for (r, s), v in self.what_if.items() if s == scenario]
        return max(values) if values else None

    def share_of_step(self, rank: int | None, ns: int | None) -> float | None:
        """`ns` as a share of the mean step time of `rank` (or the longest one)."""
        if ns is None:
            return None
        steps = [v for r, v in self.step_ns.items() if rank is None or r == rank]
        step = max(steps) if steps else None
        return ns / step if step else None

    def steps_on(self, rank: int, device: int) -> int:
        """How many steps the window of (rank, device) holds (without step markers, the
        window counts as one step): `Metrics.steps.counts`."""
        return self.metrics.steps.counts.on(rank, device)

    def per_step(self, ns: int, rank: int, device: int) -> int | None:
        """`ns` spread over the steps of (rank, device); None without steps."""
        return self.metrics.steps.counts.per_step(ns, rank, device)

    def devices(self) -> Iterable[dict[str, Any]]:
        """The per-device metrics rows."""
        return self.metrics.devices.rows()


#: NVIDIA words and their AMD (ROCm) counterparts, for findings on AMD GPUs.
_AMD_WORDS = (
    ("Tensor Cores", "Matrix Cores"),
    ("Tensor Core", "Matrix Core"),
    ("CUDA graphs", "HIP graphs"),
    ("NCCL", "RCCL"),
    ("cudaDeviceSynchronize", "hipDeviceSynchronize"),
    ("cudaStreamSynchronize", "hipStreamSynchronize"),
    ("cuBLAS", "hipBLASLt"),
)


def _vendor_words(text: str) -> str:
    for nvidia, amd in _AMD_WORDS:
        text = text.replace(nvidia, amd)
    return text


def _same(text: str) -> str:
    return text


#: "per step" in a message, said of a trace without steps (its window is the one step).
_PER_STEP = re.compile(r" per (?:steady )?step\b")


#: Advice only a PyTorch program can take (its modules, calls and options).
PYTORCH_ADVICE = re.compile(
    r"torch|DataLoader|AdamW|autocast|channels_last|\bF\.\w|\bnn\.|prof\.step|zero_grad|"
    r"no_sync|\.item\(\)|pin_memory|non_blocking|record_function|optimizer\.|\.to\(|"
    r"Inductor|GradScaler|set_to_none|checkpoint\("
)


class Rule:
    """A diagnosis rule: subclass it, set the class attributes, write `check`.

    The class docstring holds the docs in Markdown sections (DOC_SECTIONS); `Thresholds` is a
    frozen dataclass whose fields carry a `help` metadata string and a unit in their name.
    """

    code: ClassVar[str]
    slug: ClassVar[str]
    title: ClassVar[str]
    category: ClassVar[str]
    default_severity: ClassVar[Severity]
    advice: ClassVar[str]

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        """No thresholds."""

    #: Reported even when its impact is under the policy's floor (at the severity its impact
    #: gives): for a habit that costs little now but blocks the fixes of others.
    below_floor: ClassVar[bool] = False
    #: Its findings are a risk to the job (it will crash), not a cost per step: they come
    #: before the time-priced findings of the same severity.
    risk: ClassVar[bool] = False

    #: The time a finding's price is taken from (`claims` in the JSON): two findings that
    #: claim the same time (the host's idle, the step's critical path) are not to be summed.
    claims: ClassVar[str] = "critical_path"

    #: The advice for a program that is not PyTorch's (TensorRT, XLA, a CUDA program of its
    #: own: the context's `framework`), where the rule's own advice names PyTorch's tools.
    advice_neutral: ClassVar[str] = (
        "Give the GPU fewer, larger launches and keep it fed: fuse small kernels, keep data on "
        "the device and copies asynchronous (pinned memory, streams), and capture repeated "
        "launch sequences in CUDA graphs."
    )

    #: Tiny example traces: events (Chrome-trace dicts) the rule fires on / stays quiet on.
    example_bad: ClassVar[list[dict[str, Any]]] = []
    example_good: ClassVar[list[dict[str, Any]]] = []

    def check(self, ctx: Context, t: Any) -> Iterable[Finding]:
        """Yield the findings (none when the trace is healthy)."""
        raise NotImplementedError

    def finding(
        self,
        ctx: Context,
        message: str,
        evidence: dict[str, Any],
        scope: Scope | None = None,
        impact_ns: int | None = None,
        advice: str | None = None,
        severity: Severity | None = None,
        ceiling_ns: int | None = None,
    ) -> Finding:
        """Build a finding; its impact is capped at the steady step time (a fix cannot save
        more than the step takes) and its severity follows its impact share unless given.

        `ceiling_ns`: the most the fix can save per step, from physics or from what the fix
        changes (the rule's docs say which), computed apart from the impact model: recorded
        as `evidence.impact_ceiling_ns`, and the tests check every price against it."""
        scope = scope or Scope()
        if ceiling_ns is not None:
            evidence = {**evidence, "impact_ceiling_ns": max(0, ceiling_ns)}
        cap = ctx.step_of(scope.rank)
        if impact_ns is not None:
            impact_ns = max(0, impact_ns if cap is None else min(impact_ns, cap))
        share = ctx.share_of_step(scope.rank, impact_ns)
        advice = advice or self.advice
        if ctx.run.get("framework") not in (None, "pytorch") and PYTORCH_ADVICE.search(advice):
            advice = self.advice_neutral  # never torch.compile for a program without PyTorch
        words = _vendor_words if ctx.amd else _same
        if ctx.metrics.basis == "trace":
            # no step markers: the window is the one "step" every figure is counted over
            message = _PER_STEP.sub(" in the window", message)
        elif ctx.metrics.basis == "iterations":
            # no step markers, but calls that repeat: each is a step, and said so
            message = _PER_STEP.sub(" per iteration", message)
        return Finding(
            rule=self.code,
            slug=self.slug,
            category=self.category,
            severity=severity or severity_for(share, self.default_severity, ctx.policy),
            title=words(self.title),
            message=words(message),
            scope=scope,
            impact_ns=impact_ns,
            evidence={**evidence, "impact_share_of_step": share},
            advice=words(advice),
            claims=self.claims,
        )

    @classmethod
    def docs(cls) -> dict[str, str]:
        """The docstring's sections, by heading."""
        text = inspect.cleandoc(cls.__doc__ or "")
        parts = re.split(r"^## +(.+)$", text, flags=re.MULTILINE)
        return {parts[i].strip(): parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}

    @classmethod
    def threshold_fields(cls) -> list[dataclasses.Field[Any]]:
        """The tunable thresholds."""
        return list(dataclasses.fields(cls.Thresholds))
