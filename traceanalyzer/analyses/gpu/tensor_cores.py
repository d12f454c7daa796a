"""Tensor Core verdicts: did each GPU kernel run on Tensor Cores, and on what evidence.

Analyses stage, after `classify.py`. The report contract's `tensor_core` block
(`tc_ns`, `gemm_ns`, `kernel_ns`, `share_of_gemm`, `share_of_kernel`, `unknown_ns`) is
computed by `tensor_core_summary` from the per-kernel verdicts of `kernel_verdicts`.

A verdict is one of `TC_VERDICT`: "tc" (runs on Tensor Cores / matrix cores), "no" (it
does not), "unknown" (the trace cannot tell). It rests on two kinds of evidence, and says
which one it used (`evidence` column):

**1. The kernel name** (`name_verdict`, rules in `TC_NAME_RULES`, first match wins):

- Kernels of class comm, memory_bound or copy_cast do no matrix math: "no".
- Positive tokens: the instruction (`hmma`, `gmma`/`wgmma`, `imma`, AMD `mfma` or Tensile
  `MI16x16x1`), `tensorop`/`wmma`, an MMA tile (`tensor16x8x16`, the TensorRT/xmma form),
  an MMA shape (`s16816gemm`, `s1688gemm`, `h884gemm`, `s884gemm`, `s1688cudnn`,
  `i8816`...), cuBLAS's Hopper/Blackwell JIT GEMMs `nvjet_*` (built on wgmma/tcgen05, all
  "tc", TF32 or 16-bit alike), cuDNN fused attention (`*native_sdpa*`), FlashAttention 2/3
  (16-bit only), and memory-efficient attention `fmha_cutlass*` on Sm80+ (its f32 variant
  uses TF32-emulated MMA there) or 16-bit on Sm70+.
- Negative tokens: `ffma`, `simt`, `sgemm` (volta_/ampere_/maxwell_sgemm, cutlass simt,
  `implicit_convolve_sgemm`), hgemm/dgemm/cgemm, GEMV and other level-2 cuBLAS kernels,
  cuDNN `scudnn` kernels, legacy cuDNN engines (Winograd, FFT, `wgrad_alg0_engine`,
  depthwise), fp32 xmma kernels without tf32 (`xmma_..._f32f32_f32f32_f32`), and
  `fmha_cutlass*` f32 before Sm80 / anything before Sm70.
- Dtype tokens in a GEMM-library name (cuBLAS/cuBLASLt, CUTLASS, xmma, cuDNN, Tensile,
  TensorRT-LLM): `tf32`, `bf16`/`f16`/`fp16`/`half`, `e4m3`/`e5m2`/`e2m1`/`fp8`, `int8`.
- Otherwise "unknown" (e.g. `triton_tem_fused_mm_0`: Triton does not say which
  instruction its `tl.dot` became).

Instruction tokens are checked before SIMT tokens, and SIMT tokens before dtype tokens:
a name that says `tensorop` is believed over everything else, and a GEMV that says
`__nv_bfloat16` is still a GEMV. This beats the public allow-lists, which miss Hopper
cuBLAS (`nvjet_*`, `sm90_xmma_*`) and count FP32 FFMA xmma kernels as Tensor Core work.

**2. The launching operator's dtype** (`dtype_verdict`), where the trace links a kernel
to its CPU operator (Kineto with `record_shapes=True`: kernel → runtime launch by
(rank, correlation) → the launch's `external_id` → the `cpu_op` with the same
(rank, external_id)). All floating inputs `float` → "fp32"; any `c10::BFloat16`,
`c10::Half` or `c10::Float8_*` input → "half"; otherwise null. An fp32 matmul with TF32 off
runs on no Tensor Core whatever library runs it; with TF32 on, cuBLAS/cuDNN pick kernels
whose names say so (`tf32`, `tensor16x8x8`, `s1688gemm`), so an fp32 op whose kernel name
shows no Tensor Core token is "no". A 16-bit op on a GEMM-library kernel (Volta and
newer) runs on Tensor Cores.

**Combining** (`kernel_verdicts`), for gemm-class kernels: name "tc" → tc; name "no" → no;
name unknown and op dtype fp32 → no ("op dtype fp32, no TF32 token"); name unknown, op
dtype half and a GEMM-library kernel (`GEMM_LIBRARY_REGEX`, incl. Inductor templates) →
tc ("op dtype 16-bit, GEMM library kernel"); otherwise unknown ("no evidence"). Other
kernels keep their name verdict. Nsight exports and traces without `record_shapes` have no
operator dtype, so only the name speaks there.

Known limits: a hand-written 16-bit SIMT matmul named like a library kernel would be
called "tc"; Pascal-era 16-bit kernels are recognised only by their SIMT tokens
(`hgemm`, `hcudnn`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from polars.expr.whenthen import ChainedThen, Then

from traceanalyzer.analyses.gpu.classify import (
    MMA_SHAPE_REGEX,
    TENSOROP_REGEX,
    class_of,
    kernel_base_name,
    with_launching_op,
)
from traceanalyzer.analyses.gpu.devices import share
from traceanalyzer.analyses.timeline.frames import per_distinct
from traceanalyzer.model import Kind, Timeline

TC_VERDICT = pl.Enum(["tc", "no", "unknown"])
#: The launching operator's input precision, as `dtype_verdict` reads it.
OP_DTYPE = pl.Enum(["fp32", "half"])
DEVICE_KEY = ["rank", "device"]

#: GEMM libraries whose kernels run 16-bit inputs on Tensor Cores (Volta and newer).
GEMM_LIBRARY_REGEX = (
    r"xmma|cutlass|cublas|nvjet|cudnn|cijk_|hipblaslt|rocblas|^bmm_|fmha|(?:^|[^b])gemm|triton_tem_"
    r"|matmul|native_sdpa|flash"
)


@dataclass(frozen=True, slots=True)
class NameRule:
    """One row of the name-evidence table."""

    key: str
    verdict: str  # "tc" or "no"
    regex: str  # case-insensitive, on the name without its parameter list
    evidence: str  # what `kernel_verdicts` writes in `evidence`
    library_only: bool = False  # only for gemm-class kernels of a GEMM library


#: The evidence of depthwise convolution kernels: off the Tensor Cores with no form on them.
DEPTHWISE_EVIDENCE = "name: depthwise convolution (no Tensor Core form)"

#: Name evidence, in order (first match wins). Applied to gemm- and other-class kernels.
TC_NAME_RULES: tuple[NameRule, ...] = (
    NameRule(
        "fmha_simt",
        "no",
        r"fmha_cutlass\w*_sm[56]\d|fmha_cutlass[fb]_f32\w*_sm7\d",
        "name: fmha f32 before Sm80 (SIMT)",
    ),
    NameRule("fmha_mma", "tc", r"fmha_cutlass", "name: fmha_cutlass on Sm70+/Sm80+ (mma)"),
    NameRule("gmma", "tc", r"w?gmma|tcgen05", "name: wgmma"),
    NameRule("hmma", "tc", r"hmma|imma|qmma", "name: hmma/imma"),
    NameRule(
        "mfma",
        "tc",
        r"mfma|_mi\d+x\d+x\d+_|_xdl_|xdlops",
        "name: AMD MFMA (matrix core)",
    ),
    # CUTLASS's `_tensorop_` / `TensorOpMultiplicand`, not MIOpen's elementwise
    # `SubTensorOpWithScalar1d` nor Composable Kernel's namespace `ck::tensor_operation`,
    # which every CK kernel carries, elementwise ones too
    NameRule("tensorop", "tc", TENSOROP_REGEX + "|wmma", "name: tensorop"),
    NameRule("mma_tile", "tc", r"tensor\d+x\d+x\d+", "name: tensor MxNxK tile"),
    NameRule("mma_shape", "tc", MMA_SHAPE_REGEX, "name: MMA shape (s16816/s1688/h884)"),
    NameRule("nvjet", "tc", r"nvjet", "name: nvjet (cuBLAS Hopper+ wgmma)"),
    NameRule("cudnn_sdpa", "tc", r"native_sdpa", "name: cuDNN fused attention"),
    NameRule(
        "flash_attention",
        "tc",
        r"flash_fwd|flash_bwd|flashattn|flash_attn|flash::",
        "name: FlashAttention (16-bit mma)",
    ),
    NameRule("ffma", "no", r"ffma", "name: ffma (SIMT)"),
    NameRule("simt", "no", r"simt", "name: simt"),
    NameRule("sgemm", "no", r"sgemm", "name: sgemm (SIMT)"),
    NameRule(
        "blas_simt",
        "no",
        r"[dczh]gemm|gemv|gemmk1|gemmsn",
        "name: hgemm/dgemm/cgemm/gemv (SIMT)",
    ),
    NameRule("scudnn", "no", r"scudnn|hcudnn", "name: scudnn (SIMT)"),
    # one input channel per output channel: nothing for a Tensor Core tile to multiply (no
    # dtype or shape change moves them there; TA005 leaves them out)
    NameRule("depthwise", "no", r"depthwise", DEPTHWISE_EVIDENCE),
    NameRule(
        "conv_simt",
        "no",
        r"wgrad_alg\d+_engine|dgrad\w*_engine|winograd|fft\d*d_",
        "name: legacy cuDNN engine (SIMT)",
    ),
    NameRule(
        "xmma_fp32",
        "no",
        r"xmma\w*f32f32_f32f32_f32",
        "name: fp32 xmma without tf32 (SIMT)",
    ),
    NameRule("tf32", "tc", r"tf32|tfloat32", "name: tf32", library_only=True),
    NameRule(
        "low_precision",
        "tc",
        r"bf16|bfloat16|f16|fp16|half|e4m3|e5m2|e2m1|fp8|fp4|int8",
        "name: 16/8-bit GEMM dtype",
        library_only=True,
    ),
)

_GATED = ("comm", "memory_bound", "copy_cast")
_NAME_RULE_KEYS: tuple[str, ...] = (
    *(f"class_{c}" for c in _GATED),
    *(r.key for r in TC_NAME_RULES),
    "none",
)
#: Which name rule decided a kernel: `class_<class>` for the no-matrix-math classes, a
#: `TC_NAME_RULES` key, or "none".
NAME_RULE = pl.Enum(list(_NAME_RULE_KEYS))

_VERDICT_OF: dict[str, str] = (
    {f"class_{c}": "no" for c in _GATED}
    | {r.key: r.verdict for r in TC_NAME_RULES}
    | {"none": "unknown"}
)
_EVIDENCE_OF: dict[str, str] = (
    {f"class_{c}": f"class {c}: no matrix math" for c in _GATED}
    | {r.key: r.evidence for r in TC_NAME_RULES}
    | {"none": "no evidence"}
)
EVIDENCE_FP32_OP = "op dtype fp32, no TF32 token"
EVIDENCE_HALF_OP = "op dtype 16-bit, GEMM library kernel"

_HALF_TYPES = r"c10::(?:BFloat16|Half|Float8)|Float8_"
_OTHER_FLOAT_TYPES = r'"double"|complex|"c10::ComplexHalf"'


def _contains(text: pl.Expr, regex: str) -> pl.Expr:
    return text.str.contains(f"(?i){regex}")


def _name_rule_of(text: pl.Expr) -> pl.Expr:
    base = kernel_base_name(text)
    return _rule_from(base, class_of(text), _contains(base, GEMM_LIBRARY_REGEX))


def _rule_from(base: pl.Expr, cls: pl.Expr, library: pl.Expr) -> pl.Expr:
    """The name rule from the kernel's base name, class and whether a GEMM library names it
    (columns, where they are at hand: each is a chain of regexes, spelled out in every
    branch otherwise)."""
    chain: Then | ChainedThen = pl.when(base.is_null()).then(base)
    for c in _GATED:
        chain = chain.when(cls == c).then(pl.lit(f"class_{c}"))
    for rule in TC_NAME_RULES:
        hit = _contains(base, rule.regex)
        if rule.library_only:
            hit = hit & library & (cls == "gemm")
        chain = chain.when(hit).then(pl.lit(rule.key))
    return chain.otherwise(pl.lit("none")).cast(NAME_RULE)


def name_rule(name: pl.Expr) -> pl.Expr:
    """Key of the rule that decides the name verdict of each kernel (`NAME_RULE` enum).

    Null for a null name. Evaluated once per distinct name.
    """
    return per_distinct(name, _name_rule_of, NAME_RULE)


def _verdict_of_rule(rule: pl.Expr) -> pl.Expr:
    return rule.cast(pl.String).replace_strict(_VERDICT_OF, default=None, return_dtype=TC_VERDICT)


def _evidence_of_rule(rule: pl.Expr) -> pl.Expr:
    return rule.cast(pl.String).replace_strict(_EVIDENCE_OF, default=None, return_dtype=pl.String)


def name_verdict(name: pl.Expr) -> pl.Expr:
    """The Tensor Core verdict (`TC_VERDICT`) from the kernel name alone.

    See the module docstring for the evidence rules. Null for a null name.
    """
    return _verdict_of_rule(name_rule(name))


def dtype_verdict(input_types: pl.Expr) -> pl.Expr:
    """The precision of an operator from its recorded input dtypes (`OP_DTYPE`).

    `input_types` is the JSON text torch.profiler records with `record_shapes=True`
    (`'["c10::BFloat16", "c10::BFloat16", "Scalar"]'`). Any BFloat16, Half or Float8 input
    → "half"; floating inputs that are all `float` → "fp32"; otherwise (no floating input,
    double or complex inputs, nothing recorded) null.
    """
    half = input_types.str.contains(_HALF_TYPES)
    fp32 = input_types.str.contains(r'"float"') & ~input_types.str.contains(_OTHER_FLOAT_TYPES)
    return (
        pl.when(input_types.is_null())
        .then(input_types)
        .when(half)
        .then(pl.lit("half"))
        .when(fp32)
        .then(pl.lit("fp32"))
        .otherwise(pl.lit(None, pl.String))
        .cast(OP_DTYPE)
    )


def _launching_ops(
    events: pl.LazyFrame, kernels: pl.LazyFrame | None = None
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """The two link tables: (rank, correlation) → launch_external_id, launch_ns; and
    (rank, op_external_id) → op_name, op_dtype, op_start_ns, op_end_ns.

    With `kernels` (rank, correlation[, external_id]), only the operators those kernels can
    link to are prepared: a trace has many more operators than kernels."""
    launches = (
        events.filter(
            pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value])
            & pl.col("correlation").is_not_null()
            & pl.col("external_id").is_not_null()
        )
        .group_by("rank", "correlation")
        .agg(
            launch_external_id=pl.col("external_id").sort_by("start_ns").first(),
            launch_ns=pl.col("start_ns").min(),
        )
    )
    # Kineto gives each operator its own external id; where a producer repeats one, the
    # latest-starting (innermost) operator is the one that launched.
    candidates = events.filter(
        (pl.col("kind") == Kind.CPU_OP.value) & pl.col("external_id").is_not_null()
    )
    if kernels is not None:
        wanted = kernels.join(launches, on=["rank", "correlation"], how="left").select(
            "rank", external_id=pl.col("launch_external_id")
        )
        if "external_id" in kernels.collect_schema().names():
            wanted = pl.concat([wanted, kernels.select("rank", "external_id")])
        candidates = candidates.join(
            wanted.drop_nulls().unique(), on=["rank", "external_id"], how="semi"
        )
    ops = (
        candidates.sort("start_ns")
        .group_by("rank", "external_id")
        .agg(
            op_name=pl.col("name").last().cast(pl.String),
            op_types=pl.col("input_types").last(),
            op_start_ns=pl.col("start_ns").last(),
            op_end_ns=pl.col("end_ns").last(),
            op_collective=pl.col("collective").last(),
        )
        .select(
            "rank",
            "op_name",
            "op_start_ns",
            "op_end_ns",
            "op_collective",
            op_external_id="external_id",
            op_dtype=dtype_verdict(pl.col("op_types")),
        )
    )
    return launches, ops


def add_verdicts(kernels: pl.LazyFrame, timeline: Timeline) -> pl.LazyFrame:
    """Add kernel_class, op_name, op_dtype, op_collective (the collective the launching
    operator recorded, `record_param_comms`' `Collective name`), verdict and evidence to a
    frame of kernels.

    `kernels` needs rank, correlation and name (an `external_id` column, where present,
    is the fallback link when the launch was not recorded); all its columns are kept. The
    launching operator comes from `timeline`; a link is kept only where the launch call
    started inside the operator (some producers write the correlation id as the launch's
    external id, which could otherwise hit an unrelated operator). A kernel that a collective
    operator launched is `comm` (`classify.with_launching_op`). Name rules run once per
    distinct name.
    """
    launches, ops = _launching_ops(timeline.events.lazy(), kernels)
    link = pl.col("launch_external_id")
    if "external_id" in kernels.collect_schema().names():
        link = pl.coalesce(link, pl.col("external_id"))
    names = (
        kernels.select("name")
        .unique()
        .with_columns(
            kernel_class=class_of(pl.col("name").cast(pl.String)),
            _base=kernel_base_name(pl.col("name")),
        )
        .with_columns(_library=_contains(pl.col("_base"), GEMM_LIBRARY_REGEX))
        # in stages: the rule's branches read the class and the library as columns (as one
        # expression, the class's regexes ran in every branch: 2-3x the time, on any trace)
        .with_columns(_rule=_rule_from(pl.col("_base"), pl.col("kernel_class"), pl.col("_library")))
        # what the name says, per distinct name (as text per row, then cast back, they
        # took most of this analysis at 10^6 kernels)
        .with_columns(
            _says=_verdict_of_rule(pl.col("_rule")),
            _evidence=_evidence_of_rule(pl.col("_rule")).cast(pl.Categorical),
        )
    )
    inside = pl.col("launch_ns").is_null() | pl.col("launch_ns").is_between(
        pl.col("op_start_ns"), pl.col("op_end_ns")
    )
    linked = (
        kernels.join(launches, on=["rank", "correlation"], how="left")
        .with_columns(_link=link)
        .join(ops, left_on=["rank", "_link"], right_on=["rank", "op_external_id"], how="left")
        .with_columns(
            op_name=pl.when(inside).then(pl.col("op_name")),
            op_dtype=pl.when(inside).then(pl.col("op_dtype")),
            op_collective=pl.when(inside).then(pl.col("op_collective")),
        )
        .join(names, on="name", how="left")
        .with_columns(kernel_class=with_launching_op(pl.col("kernel_class"), pl.col("op_name")))
    )
    name_says = pl.col("_says")
    undecided_gemm = (pl.col("kernel_class") == "gemm") & (name_says == "unknown")
    fp32_op = undecided_gemm & (pl.col("op_dtype") == "fp32")
    half_op = undecided_gemm & (pl.col("op_dtype") == "half") & pl.col("_library")
    return linked.with_columns(
        verdict=pl.when(fp32_op)
        .then(pl.lit("no", TC_VERDICT))
        .when(half_op)
        .then(pl.lit("tc", TC_VERDICT))
        .otherwise(name_says),
        evidence=pl.when(fp32_op)
        .then(pl.lit(EVIDENCE_FP32_OP, pl.Categorical))
        .when(half_op)
        .then(pl.lit(EVIDENCE_HALF_OP, pl.Categorical))
        .otherwise(pl.col("_evidence")),
    ).drop(
        "launch_external_id",
        "launch_ns",
        "_link",
        "op_start_ns",
        "op_end_ns",
        "_rule",
        "_base",
        "_library",
        "_says",
        "_evidence",
    )


def kernel_verdicts(timeline: Timeline) -> pl.LazyFrame:
    """One row per GPU kernel with its Tensor Core verdict and the evidence for it.

    Columns: rank, device, stream, name, start_ns, end_ns, correlation, kernel_class,
    op_name (the launching CPU operator, null where none is linked), op_dtype ("fp32",
    "half" or null), verdict (`TC_VERDICT`), evidence (Categorical: "name: wgmma",
    "name: sgemm (SIMT)", "op dtype fp32, no TF32 token", "no evidence", ...).
    """
    kernels = (
        timeline.launch_links()
        .filter(pl.col("kind") == Kind.KERNEL.value)
        .select(
            "rank", "device", "stream", "name", "start_ns", "end_ns", "correlation", "external_id"
        )
    )
    return add_verdicts(kernels, timeline).select(
        "rank",
        "device",
        "stream",
        "name",
        "start_ns",
        "end_ns",
        "correlation",
        "kernel_class",
        "op_name",
        "op_dtype",
        "verdict",
        "evidence",
    )


def tensor_core_summary(kernels: pl.DataFrame) -> pl.DataFrame:
    """The contract's `tensor_core` block per (rank, device).

    Input: kernel rows with rank, device, kernel_class, verdict, evidence and clipped_ns
    (their time inside the analysis window). Output, sorted by rank and device: tc_ns (time
    of kernels with verdict "tc", of any class), gemm_ns (time of gemm-class kernels,
    whatever their verdict), kernel_ns (all kernel time), unknown_ns (gemm-class time with
    verdict "unknown"), no_tc_form_ns (gemm-class time of depthwise convolutions, which have
    no Tensor Core form), share_of_gemm = tc_ns / gemm_ns (null where gemm_ns is 0) and
    share_of_kernel = tc_ns / kernel_ns (null where kernel_ns is 0).
    """
    ns = pl.col("clipped_ns").cast(pl.Int64)
    gemm = pl.col("kernel_class") == "gemm"
    tc = pl.col("verdict") == "tc"
    no_form = pl.col("evidence").cast(pl.String) == DEPTHWISE_EVIDENCE
    return (
        kernels.lazy()
        .group_by(DEVICE_KEY)
        .agg(
            tc_ns=ns.filter(tc).sum(),
            gemm_ns=ns.filter(gemm).sum(),
            kernel_ns=ns.sum(),
            unknown_ns=ns.filter(gemm & (pl.col("verdict") == "unknown")).sum(),
            no_tc_form_ns=ns.filter(gemm & no_form).sum(),
        )
        .with_columns(
            share_of_gemm=share(pl.col("tc_ns"), pl.col("gemm_ns")),
            share_of_kernel=share(pl.col("tc_ns"), pl.col("kernel_ns")),
        )
        .select(
            *DEVICE_KEY,
            "tc_ns",
            "gemm_ns",
            "kernel_ns",
            "share_of_gemm",
            "share_of_kernel",
            "unknown_ns",
            "no_tc_form_ns",
        )
        .sort(DEVICE_KEY)
        .collect()
    )


def name_rule_markdown() -> str:
    """The name-evidence table as Markdown, in order (for `docs/tensor-cores.md`)."""
    lines = [
        "| # | rule | verdict | pattern (case-insensitive) | evidence text |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, c in enumerate(_GATED, start=1):
        lines.append(
            f"| {i} | `class_{c}` | no | kernel class is {c} | {_EVIDENCE_OF[f'class_{c}']} |"
        )
    offset = len(_GATED)
    for i, r in enumerate(TC_NAME_RULES, start=offset + 1):
        regex = r.regex.replace("|", "\\|")
        extra = " (GEMM-library names only)" if r.library_only else ""
        lines.append(f"| {i} | `{r.key}` | {r.verdict} | `{regex}`{extra} | {r.evidence} |")
    n = offset + len(TC_NAME_RULES) + 1
    lines.append(f"| {n} | `none` | unknown | (no rule matched) | no evidence |")
    return "\n".join(lines) + "\n"
