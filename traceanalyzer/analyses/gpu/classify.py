"""Kernel classes: what kind of work a GPU kernel does, decided from its name.

Analyses stage. The timeline records kernel names verbatim; this module maps them onto a
small closed set, `KERNEL_CLASS`, through one ordered pattern table, `CLASS_PATTERNS` (data
below, rendered into `docs/kernel-classes.md` by `class_table_markdown()`):

- `gemm`: matrix multiply, convolution and attention kernels, whatever units they run on
  (cuBLAS/cuBLASLt incl. Hopper/Blackwell `nvjet_*` and `sm90_xmma_*`, CUTLASS, cuDNN
  convolution engines and fused attention, FlashAttention, memory-efficient attention,
  Triton/Inductor matmul templates, rocBLAS/Tensile).
- `memory_bound`: elementwise/pointwise, normalisation, softmax, reductions, optimizer
  `multi_tensor_apply`, embedding/index/gather/scatter, fill, sort/scan.
- `copy_cast`: copies and dtype casts (`direct_copy_kernel`, `bfloat16_copy_kernel`,
  `CatArrayBatchedCopy`, layout transposes/permutes, (de)quantisation).
- `comm`: communication kernels: NCCL and RCCL, MSCCL/MSCCL++, NVSHMEM, MoE all-to-all
  (DeepEP, pplx-kernels), custom all-reduce (vLLM/SGLang, symmetric memory, TensorRT-LLM).
  A kernel whose name says nothing but that a collective operator launched
  (`record_param_comms`, `c10d::*`: see `COMM_OP_REGEX`) is communication too.
- `other`: anything no row matches.

How a name is matched:

1. The trailing parameter list is cut off (`gemv2T_kernel_val<...>(cublasGemvParams<...>)`
   keeps `gemv2T_kernel_val<...>`): parameter types name helper structs
   (`cudnnConvolutionStruct`, `GenericPackedTensorAccessor`) that say nothing about the
   kernel. Template arguments stay: they carry the functor (`bfloat16_copy_kernel_cuda`).
2. Rows are tried top to bottom, case-insensitively; the first that matches decides.
   The order is the precedence: GEMMs with a fused collective, **comm**, then the few
   non-matmul kernels that live inside GEMM and attention libraries (split-K reductions,
   layout conversions, FlashAttention combine/convert helpers) and Inductor's
   pointwise/reduction kernels (whose fused names mention `addmm`), then **gemm**, then
   **copy_cast**, then **memory_bound**. One row maps cuDNN's offset-precomputation
   kernels to `other` explicitly, so that the `wgrad` in their names does not make them
   convolutions.

Everything here is a polars expression: the table is looped over once to build one
`pl.when` chain, never over events, and the chain runs once per distinct name
(`per_distinct`), not once per kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from polars.expr.whenthen import ChainedThen, Then

from traceanalyzer.analyses.timeline.frames import per_distinct

KERNEL_CLASSES: tuple[str, ...] = ("gemm", "memory_bound", "copy_cast", "comm", "other")
KERNEL_CLASS = pl.Enum(list(KERNEL_CLASSES))

COLLECTIVE_KINDS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send_recv",
    "other",
)
COLLECTIVE_KIND = pl.Enum(list(COLLECTIVE_KINDS))


@dataclass(frozen=True, slots=True)
class KernelPattern:
    """One row of the class table: kernels whose name matches `regex` are `kernel_class`."""

    key: str  # stable slug, shown by `kernel_class_rule`
    kernel_class: str
    regex: str  # Rust regex syntax, matched case-insensitively anywhere in the name
    what: str  # one line for the docs


#: MMA shapes in cuBLAS/cuDNN/CUTLASS names: `s16816gemm`, `h884gemm`, `s1688cudnn`,
#: `s64x128x16gemm` (accumulator type letter, then the instruction's M-N-K).
MMA_SHAPE_REGEX = (
    r"(?:^|[_\W])[hsi](?:884|1688|16816|8816|16832|161616|\d+x\d+x\d+)"
    r"(?:gemm|cudnn|fprop|dgrad|wgrad)"
)
#: CUTLASS's Tensor Core op class in kernel names (`cutlass_80_tensorop_s1688gemm`,
#: `cutlass::arch::OpClassTensorOp`, `ColumnMajorTensorOpMultiplicand`); not MIOpen's
#: elementwise `SubTensorOpWithScalar1d` nor Composable Kernel's `ck::tensor_operation`
#: namespace, which its elementwise kernels carry too.
TENSOROP_REGEX = r"_tensorop_|opclasstensorop|tensoropmultiplicand|tensor_op(?:[^e]|$)"
#: Instruction tokens that only Tensor Core (matrix core) kernels carry. Shared with
#: `tensor_cores.py`: any name carrying one is a GEMM-class kernel.
TC_INSTRUCTION_REGEX = (
    r"hmma|imma|qmma|w?gmma|tcgen05|mfma|_xdl_|xdlops|wmma|tensor\d+x\d+x\d+|"
    + TENSOROP_REGEX
    + r"|_mi\d+x\d+x\d+_|"
    + MMA_SHAPE_REGEX
)

#: The ordered class table. First match wins; see the module docstring for the order.
CLASS_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern(
        "gemm_with_collective",
        "gemm",
        r"(?:gemm|matmul)\w*?(?:all_?reduce|reduce_?scatter|all_?gather|all_?to_?all)"
        r"|(?:all_?reduce|reduce_?scatter|all_?gather|all_?to_?all)\w*?(?:gemm|matmul)",
        "a matrix multiply with a collective fused into it (`gemm_allreduce_fusion`, "
        "`all_gather_matmul`): GEMM work whose communication hides inside it, so counted as "
        "compute (Tensor Core share sees it; it is never exposed communication)",
    ),
    KernelPattern(
        "nccl",
        "comm",
        r"nccl|rccl",
        "NCCL (`ncclKernel_*`, `ncclDevKernel_*`) and RCCL on AMD, which keeps NCCL's kernel "
        "names (`ncclDevKernel_Generic_4`)",
    ),
    KernelPattern(
        "msccl",
        "comm",
        r"msccl",
        "MSCCL (`mscclKernel_*`, also inside RCCL) and MSCCL++ (`mscclpp::*`)",
    ),
    KernelPattern(
        "nvshmem",
        "comm",
        r"nvshmem|rocshmem",
        "NVSHMEM / rocSHMEM device collectives and transfers (`nvshmemi_*`, "
        "`nvshmemx_barrier_all_on_stream`)",
    ),
    KernelPattern(
        "moe_all_to_all",
        "comm",
        r"(?:deep_?ep|dpsk::ep)::(?:intranode|internode|internode_ll)::"
        r"|(?:^|::)(?:dispatch|combine)kernel<",
        "MoE expert-parallel all-to-all: DeepEP (`deep_ep::internode::dispatch`, "
        "`deep_ep::internode_ll::combine`, DeepSeek's `dpsk::ep::*`; its local "
        "`layout::get_dispatch_layout` is not communication) and pplx-kernels "
        "(`dispatchKernel<...>`, `combineKernel<...>`)",
    ),
    KernelPattern(
        "custom_all_reduce",
        "comm",
        r"multimem_all_?reduce|(?:one|two)_?shot_?all_?reduce|cross_device_reduce"
        r"|custom_?all_?reduce|allreduce_fusion_kernel|lamport|userbuffers",
        "custom all-reduce kernels: vLLM/SGLang `cross_device_reduce_1stage/2stage`, "
        "PyTorch symmetric memory `multimem_all_reduce`, `one_shot_all_reduce`, TensorRT-LLM "
        "`oneShotAllReduceKernel` and `allreduce_fusion_kernel_*` (all-reduce fused with "
        "RMSNorm: mostly communication), Transformer Engine userbuffers",
    ),
    KernelPattern(
        "named_collective",
        "comm",
        r"^(?:\w+::)*(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)"
        r"(?:\d+|_?kernel|_?allpairs|_?packet)*(?:<|$)",
        "a kernel named for a collective and nothing else (MSCCL++'s `allreduce8<...>`, "
        "`allgather6`): names that merely contain `reduce` are reductions, not this",
    ),
    KernelPattern(
        "inductor_pointwise",
        "memory_bound",
        r"^triton_(?:poi|red|per)_",
        "Inductor pointwise/reduction/persistent-reduction kernels "
        "(`triton_poi_fused_addmm_gelu_0`: the matmul ran elsewhere)",
    ),
    KernelPattern(
        "gemm_helper_reduce",
        "memory_bound",
        r"splitkreduce|reducesplitk|reduce_1block_kernel|splitkv_combine|dot_do_o"
        r"|clear_dkvaccum|reduce_wgrad|epilogue::impl|^dot_kernel|^scal_kernel",
        "reductions and epilogues inside GEMM/attention libraries: cuBLAS split-K reduce, "
        "FlashAttention split-KV combine, attention-backward `dot(dO, O)`, cuBLASLt epilogue, "
        "cuBLAS level-1 `dot_kernel`/`scal_kernel`",
    ),
    KernelPattern(
        "gemm_helper_layout",
        "copy_cast",
        r"convert_dq|convert_dkv|nchwtonhwc|nhwctonchw|im2col|col2im",
        "layout and dtype conversions inside cuDNN/attention libraries "
        "(`nchwToNhwcKernel`, `convert_dq_to_16bits`, `im2col`)",
    ),
    KernelPattern(
        "gemm_helper_offsets",
        "other",
        r"compute\w*offsetskernel",
        "cuDNN implicit-GEMM address precomputation (`cask_cudnn::computeOffsetsKernel`, "
        "`computeWgradSplitKOffsetsKernel`): tiny index kernels, not matrix math",
    ),
    KernelPattern(
        "pooling",
        "memory_bound",
        r"pooling|max_?pool|avg_?pool|adaptive_?(?:avg|max)_?pool",
        "pooling, before every GEMM family: TensorRT's and cuDNN's pooling kernels carry GEMM "
        "tokens (`sm50_xmma_pooling_fw_4d_FP16FP32NHWC_Average`) and do no matrix math",
    ),
    KernelPattern(
        "tensor_core_instruction",
        "gemm",
        TC_INSTRUCTION_REGEX,
        "any Tensor Core / matrix-core token: `hmma`, `gmma`/`wgmma`, `imma`, `tensorop`, "
        "`wmma`, `tensor16x8x16`, MMA shapes (`s16816gemm`, `h884gemm`, `s1688cudnn`), "
        "AMD `mfma`/`MI16x16x1`, Composable Kernel `_xdl_` (not its `ck::tensor_operation` "
        "namespace)",
    ),
    KernelPattern(
        "blas_gemm",
        "gemm",
        r"(?:^|[^b])gemm|gemv|nvjet|xmma|cutlass_\d|cutlass3x|^cijk_|hipblaslt|rocblas"
        r"|magma_|matmul|^bmm_",
        "BLAS GEMM/GEMV families: cuBLAS (`volta_sgemm_*`, `nvjet_*`, `sm90_xmma_*`, "
        "`gemv2T_kernel_val`), CUTLASS, MAGMA, rocBLAS/Tensile (`Cijk_*`), TensorRT-LLM "
        "`bmm_*` (`fbgemm` is not a GEMM)",
    ),
    KernelPattern(
        "attention",
        "gemm",
        r"flash_fwd|flash_bwd|flashattn|flash_attn|flash::|fmha|native_sdpa"
        r"|attentionkernel|attentionbackwardkernel|^_?attn_(?:fwd|bwd)",
        "fused attention: FlashAttention 2/3, memory-efficient attention "
        "(`fmha_cutlass*`), cuDNN SDPA (`cudnn_generated_fort_native_sdpa_*`), "
        "TensorRT-LLM `fmha*`, ROCm's Triton flash attention (`attn_fwd`, `_attn_bwd`)",
    ),
    KernelPattern(
        "triton_matmul",
        "gemm",
        r"^triton_tem_",
        "Inductor template kernels (`triton_tem_fused_mm_0`: mm/bmm/addmm/conv templates)",
    ),
    KernelPattern(
        "convolution",
        "gemm",
        r"convolution|convolve|conv[123]d|depthwise|fprop|dgrad|wgrad|winograd|fft2d"
        r"|scudnn|hcudnn|naive_conv",
        "convolution engines: implicit-GEMM, cuDNN `*_scudnn_*`, Winograd, FFT, "
        "legacy `wgrad_alg0_engine`/`dgrad_engine`, depthwise, MIOpen's direct reference "
        "kernels (`naive_conv_ab_nonpacked_fwd_nchw_half_double_half`)",
    ),
    KernelPattern(
        "copy",
        "copy_cast",
        r"copy|transpose|permute|(?:^|[^a-z])(?:cast|convert)|quantiz|_quant|hfp8|fp8rowwise_to"
        r"|to_dense|reshape_and_cache",
        "copies and casts: `direct_copy_kernel`, `bfloat16_copy_kernel`, "
        "`CatArrayBatchedCopy`, transposes/permutes, (de)quantisation, KV-cache writes",
    ),
    KernelPattern(
        "normalization",
        "memory_bound",
        r"norm|softmax|bn_fw|bn_bw|gammabeta|moments|welford",
        "normalisation and softmax: layer/RMS/batch norm (`GammaBetaBackward`, "
        "`bn_fw_tr_1C11`), softmax",
    ),
    KernelPattern(
        "optimizer",
        "memory_bound",
        r"multi_tensor_apply|adamfunctor|fused_?adam|optimizer",
        "optimizer steps: `multi_tensor_apply_kernel`, fused Adam/AdamW",
    ),
    KernelPattern(
        "indexing",
        "memory_bound",
        r"embedding|index|gather|scatter|segment|bucketize|searchsorted|sort|scan|unique",
        "embedding, index/gather/scatter, sort/scan (`indexSelectLargeIndex`, "
        "`split_embedding_*`, `DeviceRadixSort*`)",
    ),
    KernelPattern(
        "elementwise",
        "memory_bound",
        r"elementwise|pointwise|functor|fill|reduce|pool|upsample|dropout|distribution"
        r"|loss|nll|criterion|scalepackedtensor|rotary|silu|gelu"
        r"|relu|sigmoid|tanh|at::native::|cub::|subtensorop|^op\dd?tensor|^optensor",
        "elementwise, fill, reductions, pooling, dropout/RNG, losses, any other ATen native "
        "kernel, MIOpen tensor ops (`SubTensorOpWithScalar1d`, `Op2dTensorGeneric`)",
    ),
)

_CLASS_RULE_KEYS: tuple[str, ...] = (*(p.key for p in CLASS_PATTERNS), "other")
#: The rule keys as an Enum, in table order, then "other" (no row matched).
CLASS_RULE = pl.Enum(list(_CLASS_RULE_KEYS))
_CLASS_OF_RULE: dict[str, str] = {p.key: p.kernel_class for p in CLASS_PATTERNS} | {
    "other": "other"
}

#: The trailing parameter list of a demangled name, allowing one nested level of
#: parentheses (`(at::native::(anonymous namespace)::OpaqueType<2u>*, ...)`).
_PARAMS_REGEX = r"\((?:[^()]|\([^()]*\))*\)\s*$"

#: Collective names in kernel (and collective operator) names, ordered: `AllReduce` before
#: `Reduce`, barriers (no data) before everything.
_COLLECTIVE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("other", r"barrier"),
    ("all_reduce", r"all_?reduce|shot_all|cross_device_reduce|allreduce_fusion|lamport"),
    ("reduce_scatter", r"reduce_?scatter"),
    ("all_gather", r"all_?gather"),
    (
        "all_to_all",
        r"all_?to_?all|(?:intranode|internode|internode_ll)::|(?:dispatch|combine)kernel<",
    ),
    ("broadcast", r"broadcast|bcast"),
    ("send_recv", r"sendrecv|send_?recv|_send_|_recv_|kernel_send|kernel_recv|::send$|::recv_?$"),
    ("reduce", r"kernel_reduce|_reduce_|::reduce_$"),
)

#: CPU operators that launch a collective's kernels: c10d's `record_param_comms` (torch's
#: wrapper around every c10d call, the launching op in Kineto traces), the `c10d::*` ops
#: themselves, `nccl:*` record_function ranges, PyTorch symmetric memory (`symm_mem::*`)
#: and functional collectives. A kernel launched directly by one of these (its launch's
#: innermost operator) is communication whatever its name. Gloo runs collectives on the CPU:
#: a `gloo:*` operator launches no kernel, so it does not show up here.
COMM_OP_REGEX = r"^(?:record_param_comms|c10d::\w+|_?c10d_functional::\w+|nccl:\w+|symm_mem::\w+)$"


def kernel_base_name(name: pl.Expr) -> pl.Expr:
    """The kernel name as a string, without a leading `void ` and its trailing parameters."""
    return (
        name.cast(pl.String)
        .str.strip_chars()
        .str.replace(r"^void\s+", "")
        .str.replace(_PARAMS_REGEX, "")
    )


def _first_match(
    text: pl.Expr, rows: tuple[tuple[str, str], ...], default: str, dtype: pl.Enum
) -> pl.Expr:
    """Key of the first (key, regex) row whose regex matches `text`, else `default`.

    Null text gives null; the result keeps `text`'s output name.
    """
    chain: Then | ChainedThen = pl.when(text.is_null()).then(text)
    for key, regex in rows:
        chain = chain.when(text.str.contains(f"(?i){regex}")).then(pl.lit(key))
    return chain.otherwise(pl.lit(default)).cast(dtype)


def class_rule_of(text: pl.Expr) -> pl.Expr:
    """`kernel_class_rule`, evaluated row by row on String names (use via `per_distinct`)."""
    rows = tuple((p.key, p.regex) for p in CLASS_PATTERNS)
    return _first_match(kernel_base_name(text), rows, "other", CLASS_RULE)


def class_of(text: pl.Expr) -> pl.Expr:
    """`kernel_class`, evaluated row by row on String names (use via `per_distinct`)."""
    return (
        class_rule_of(text)
        .cast(pl.String)
        .replace_strict(_CLASS_OF_RULE, default=None, return_dtype=KERNEL_CLASS)
    )


def _collective_of(text: pl.Expr) -> pl.Expr:
    kind = _first_match(kernel_base_name(text), _COLLECTIVE_PATTERNS, "other", COLLECTIVE_KIND)
    return pl.when(class_of(text) == "comm").then(kind).otherwise(None).cast(COLLECTIVE_KIND)


def kernel_class_rule(name: pl.Expr) -> pl.Expr:
    """Key of the `CLASS_PATTERNS` row that decides each kernel name (`CLASS_RULE` enum).

    "other" where no row matches; null for a null name. Shows *why* a kernel got its class.
    """
    return per_distinct(name, class_rule_of, CLASS_RULE)


def kernel_class(name: pl.Expr) -> pl.Expr:
    """The class of each kernel name (`KERNEL_CLASS`), by the first matching table row.

    `name` may be String or Categorical. Null names give null.
    """
    return per_distinct(name, class_of, KERNEL_CLASS)


def collective_kind(name: pl.Expr) -> pl.Expr:
    """The collective a comm kernel performs (`COLLECTIVE_KIND`); null for non-comm kernels.

    Read from NCCL-style names: `ncclKernel_AllReduce_RING_LL_Sum_float` → all_reduce,
    `ncclDevKernel_AllGather_RING_LL` → all_gather, `ncclKernel_SendRecv_*` → send_recv,
    `ncclDevKernel_ReduceScatter_*` → reduce_scatter; a comm kernel whose name names no
    collective (`ncclDevKernel_Generic`) is "other".
    """
    return per_distinct(name, _collective_of, COLLECTIVE_KIND)


def launched_by_collective(op_name: pl.Expr) -> pl.Expr:
    """True where the launching operator's name is a collective operator (`COMM_OP_REGEX`);
    False for any other operator and where none is linked (null)."""
    return op_name.cast(pl.String).str.contains(COMM_OP_REGEX).fill_null(False)


def with_launching_op(kernel_class: pl.Expr, op_name: pl.Expr) -> pl.Expr:
    """The class decided by the name, made `comm` where a collective operator launched the
    kernel (`launched_by_collective`), unless the name says GEMM: a matrix multiply that a
    fused collective operator runs (`symm_mem::fused_all_gather_matmul` launches cuBLAS) is
    compute."""
    comm_op = launched_by_collective(op_name) & (kernel_class != "gemm")
    return (
        pl.when(comm_op)
        .then(pl.lit("comm", KERNEL_CLASS))
        .otherwise(kernel_class)
        .cast(KERNEL_CLASS)
    )


def collective_of_text(text: pl.Expr) -> pl.Expr:
    """The collective a text names (an operator name, a recorded `Collective name`), by the
    same table as kernel names; "other" where it names none, null for null."""
    return _first_match(text.cast(pl.String), _COLLECTIVE_PATTERNS, "other", COLLECTIVE_KIND)


def comm_collective(
    is_comm: pl.Expr, name: pl.Expr, op_name: pl.Expr, recorded: pl.Expr
) -> pl.Expr:
    """The collective of each communication kernel (null for the others): what the kernel
    name says, else what its launching collective operator says (`c10d::alltoall_base_` →
    all_to_all), else the collective the trace recorded on the kernel (`Collective name`),
    else "other"."""
    said = [
        collective_kind(name),
        per_distinct(op_name, collective_of_text, COLLECTIVE_KIND),
        per_distinct(recorded, collective_of_text, COLLECTIVE_KIND),
    ]
    known = [pl.when(k != "other").then(k) for k in said]
    return (
        pl.when(is_comm)
        .then(pl.coalesce(*known, pl.lit("other", COLLECTIVE_KIND)))
        .cast(COLLECTIVE_KIND)
    )


def with_comm_collective(frame: pl.DataFrame, is_comm: pl.Expr, out: str) -> pl.DataFrame:
    """`frame` with column `out`: `comm_collective` of the rows where `is_comm` (from name,
    op_name, and collective or else op_collective), null on the others. Named on the
    communication rows only (three name lookups a row, for a few rows in a thousand), and
    scattered into a column of nulls: the rows keep their order without a sort (at 10^6
    kernels a concat and sort took 0.3 s, the scatter 0.02 s)."""
    rows = frame.select(is_comm.fill_null(False)).to_series().arg_true()
    named = (
        frame[rows]
        .select(
            comm_collective(
                pl.lit(True),
                pl.col("name"),
                pl.col("op_name"),
                pl.coalesce(pl.col("collective"), pl.col("op_collective")),
            )
        )
        .to_series()
    )
    column = pl.repeat(None, frame.height, dtype=COLLECTIVE_KIND, eager=True)
    return frame.with_columns(column.scatter(rows, named).alias(out))


def class_table_markdown() -> str:
    """The class table as Markdown, in precedence order (for `docs/kernel-classes.md`)."""
    lines = [
        "| # | rule | class | pattern (case-insensitive) | what it covers |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, p in enumerate(CLASS_PATTERNS, start=1):
        regex = p.regex.replace("|", "\\|")
        lines.append(f"| {i} | `{p.key}` | {p.kernel_class} | `{regex}` | {p.what} |")
    lines.append(
        f"| {len(CLASS_PATTERNS) + 1} | `other` | other | (no row matched) | anything else |"
    )
    return "\n".join(lines) + "\n"
