"""Tensor Core verdicts: name evidence, operator-dtype evidence, the per-device summary."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.builders import cpu_op, kernel, launch, write_trace
from tests.conftest import REPO, SAMPLES, corpus
from traceanalyzer.analyses.gpu.tensor_cores import (
    DEPTHWISE_EVIDENCE,
    EVIDENCE_FP32_OP,
    EVIDENCE_HALF_OP,
    OP_DTYPE,
    TC_VERDICT,
    dtype_verdict,
    kernel_verdicts,
    name_rule_markdown,
    name_verdict,
    tensor_core_summary,
)
from traceanalyzer.readers import read

#: Rows copied from the shared `tensor-core-kernels.tsv` (expected, kernel name), so that
#: the name rules are checked without the corpus too.
TSV_SUBSET: list[tuple[str, str]] = [
    (
        "tc",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas",
    ),
    ("tc", "nvjet_tst_128x256_64x6_2x1_2cta_v_bz_TNT"),
    ("tc", "nvjet_sss_tf32_128x256_TNT"),
    (
        "tc",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_"
        "cga1x1x1_kernel0_0",
    ),
    (
        "tc",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
        "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
    ),
    (
        "tc",
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x1x2_tensor16x8x8",
    ),
    ("tc", "volta_h884gemm_64x64_nt"),
    (
        "tc",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>("
        "cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)",
    ),
    (
        "no",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
        "aligna4_alignc4_execute_kernel__5x_cublas",
    ),
    ("no", "volta_sgemm_128x64_nn"),
    ("no", "maxwell_scudnn_winograd_128x128_ldg1_ldg4_tile150x150"),
    (
        "no",
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>("
        "cutlass_80_simt_sgemm_256x128_8x4_nt_align1::Params)",
    ),
    (
        "no",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm75(PyTorchMemEffAttention::AttentionKernel<float, "
        "cutlass::arch::Sm75, true, 64, 64, 64, true, true>::Params)",
    ),
    (
        "no",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, "
        "__nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, "
        "__nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 "
        "const*, float const*, __nv_bfloat16*, void*, long, float*, int*)",
    ),
    ("no", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    ("no", "triton_poi_fused_addmm_gelu_0"),
    ("unknown", "triton_tem_fused_mm_0"),
    # ROCm (public tracelens_rocm traces): rocBLAS/Tensile MFMA tiles, Composable Kernel XDL
    # convolutions; a CK elementwise kernel carries `tensor_operation`, not a matrix core
    (
        "tc",
        "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB0_AFC1",
    ),
    (
        "tc",
        "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_"
        "v3INS_34GridwiseGemmMultiD_xdl_cshuffle_v3INS_13tensor_layout",
    ),
    (
        "no",
        "_ZN2ck16tensor_operation6device12_GLOBAL__N_118kernel_elementwiseINS_16GridwiseElementwise",
    ),
    ("no", "SubTensorOpWithScalar1d"),  # MIOpen's elementwise tensor op
    ("no", "SubTensorOpWithCastTensor1d"),
]


def _verdicts(names: list[str]) -> list[str]:
    frame = pl.DataFrame({"name": names}, schema={"name": pl.Categorical})
    out = frame.select(name_verdict(pl.col("name")))
    assert out.schema["name"] == TC_VERDICT
    return out["name"].cast(pl.String).to_list()


@pytest.mark.parametrize(("expected", "name"), TSV_SUBSET, ids=[n[:50] for _, n in TSV_SUBSET])
def test_name_verdict_on_labelled_names(expected: str, name: str) -> None:
    assert _verdicts([name]) == [expected]


def _tsv_rows() -> list[tuple[str, str]]:
    root = corpus()
    if root is None:
        pytest.skip("TRACEANALYZER_CORPUS is not set")
    frame = pl.read_csv(
        root / "tensor-core-kernels.tsv", separator="\t", quote_char=None, infer_schema=False
    )
    # the file marks "cannot tell" as "?"
    expected = frame["expected"].replace({"?": "unknown"}).to_list()
    return list(zip(expected, frame["kernel_name"].to_list(), strict=True))


def test_name_verdict_agrees_with_every_row_of_the_shared_tsv() -> None:
    rows = _tsv_rows()
    got = _verdicts([name for _, name in rows])
    wrong = [(e, g, n) for (e, n), g in zip(rows, got, strict=True) if e != g]
    assert not wrong
    assert len(rows) >= 52


def test_name_rule_table_is_documented() -> None:
    assert name_rule_markdown() in (REPO / "docs" / "tensor-cores.md").read_text()


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        ('["float", "float"]', "fp32"),
        ('["float", "float", "float", "Scalar", "Scalar"]', "fp32"),
        ('["c10::BFloat16", "c10::BFloat16"]', "half"),
        ('["c10::Half", "float", "Scalar"]', "half"),
        ('["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float"]', "half"),
        ('["double", "double"]', None),
        ('["float", "double"]', None),
        ('["long int", "Scalar"]', None),
        ('["TensorList", "Scalar"]', None),
        ("[]", None),
        (None, None),
    ],
)
def test_dtype_verdict(types: str | None, expected: str | None) -> None:
    out = pl.DataFrame({"t": [types]}, schema={"t": pl.String}).select(dtype_verdict(pl.col("t")))
    assert out.schema["t"] == OP_DTYPE
    assert out.item() == expected


FP32 = ["float", "float"]
BF16 = ["c10::BFloat16", "c10::BFloat16"]
XMMA_TF32 = (
    "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x1x2_tensor16x8x8"
)


def _op_and_kernel(t0: float, corr: int, kname: str, types: list[str] | None) -> list[dict]:  # type: ignore[type-arg]
    """An aten::mm at t0 µs that launches `kname` (linked by External id = corr)."""
    args = {"External id": corr} | ({"Input type": types} if types is not None else {})
    return [
        cpu_op(t0, 50, "aten::mm", **args),
        launch(t0 + 10, 5, corr=corr),
        kernel(t0 + 100, 20, kname, corr=corr),
    ]


def test_operator_dtype_decides_what_the_name_cannot(tmp_path: Path) -> None:
    events = [
        *_op_and_kernel(1000, 1, "triton_tem_fused_mm_0", FP32),  # fp32, no TC token: no
        *_op_and_kernel(2000, 2, "triton_tem_fused_mm_0", BF16),  # 16-bit GEMM template: tc
        *_op_and_kernel(3000, 3, "volta_sgemm_128x64_nn", BF16),  # the name says no
        *_op_and_kernel(4000, 4, XMMA_TF32, FP32),  # TF32 on: the name says tc
        *_op_and_kernel(5000, 5, "triton_tem_fused_mm_0", None),  # no dtype recorded
        # no operator at all (an Nsight-like link-less kernel)
        launch(6010, 5, corr=6),
        kernel(6100, 20, "triton_tem_fused_mm_0", corr=6),
        # elementwise under an fp32 op: no matrix math
        *_op_and_kernel(
            7000,
            7,
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            FP32,
        ),
    ]
    tl = read(write_trace(tmp_path / "t.json", events))
    got = kernel_verdicts(tl).sort("start_ns").collect()
    assert got.height == 7
    rows = got.select(
        "op_name", "op_dtype", "kernel_class", "verdict", pl.col("evidence").cast(pl.String)
    ).rows()
    assert rows == [
        ("aten::mm", "fp32", "gemm", "no", EVIDENCE_FP32_OP),
        ("aten::mm", "half", "gemm", "tc", EVIDENCE_HALF_OP),
        ("aten::mm", "half", "gemm", "no", "name: sgemm (SIMT)"),
        ("aten::mm", "fp32", "gemm", "tc", "name: tensor MxNxK tile"),
        ("aten::mm", None, "gemm", "unknown", "no evidence"),
        (None, None, "gemm", "unknown", "no evidence"),
        ("aten::mm", "fp32", "memory_bound", "no", "class memory_bound: no matrix math"),
    ]
    assert got.schema["verdict"] == TC_VERDICT


def test_a_launch_outside_its_operator_is_not_linked(tmp_path: Path) -> None:
    # The launch's external id names an operator that had ended before the launch started:
    # producers that reuse the correlation id as external id look like this.
    events = [
        cpu_op(100, 10, "aten::mm", **{"External id": 9, "Input type": FP32}),
        launch(500, 5, corr=9),
        kernel(600, 20, "triton_tem_fused_mm_0", corr=9),
    ]
    got = kernel_verdicts(read(write_trace(tmp_path / "t.json", events))).collect()
    assert got.select("op_name", "op_dtype", "verdict").rows() == [(None, None, "unknown")]


def test_summary_follows_the_contract() -> None:
    kernels = pl.DataFrame(
        {
            "rank": [0, 0, 0, 0, 0, 1, 1],
            "device": [0, 0, 0, 0, 0, 1, 1],
            "kernel_class": ["gemm", "gemm", "gemm", "memory_bound", "comm", "copy_cast", "other"],
            "verdict": ["tc", "no", "unknown", "no", "no", "no", "unknown"],
            "evidence": ["", DEPTHWISE_EVIDENCE, "", "", "", "", ""],
            "clipped_ns": [600, 200, 100, 50, 50, 30, 10],
        },
        schema_overrides={
            "rank": pl.Int32,
            "device": pl.Int32,
            "verdict": TC_VERDICT,
            "clipped_ns": pl.Int64,
        },
    )
    out = tensor_core_summary(kernels)
    assert out.columns == [
        "rank",
        "device",
        "tc_ns",
        "gemm_ns",
        "kernel_ns",
        "share_of_gemm",
        "share_of_kernel",
        "unknown_ns",
        "no_tc_form_ns",
    ]
    assert out.rows() == [
        (0, 0, 600, 900, 1000, 600 / 900, 600 / 1000, 100, 200),
        (1, 1, 0, 0, 40, None, 0.0, 0, 0),
    ]


def _durations_by_name(path: Path) -> dict[str, int]:
    """Oracle input: kernel time per name, straight from the timeline."""
    k = read(path).events.filter(pl.col("kind") == "kernel")
    per = k.group_by(pl.col("name").cast(pl.String)).agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum()
    )
    return dict(per.iter_rows())


def test_healthy_bf16_trace_runs_every_gemm_on_tensor_cores() -> None:
    path = SAMPLES / "train_bf16_healthy.json.gz"
    verdicts = kernel_verdicts(read(path)).collect()
    # Oracle: a plain loop over the names. This capture's matrix math is cuBLAS nvjet_sm90
    # GEMMs and cuDNN SDPA wgmma attention, all bf16 on Tensor Cores.
    expected_tc = {
        name
        for name in _durations_by_name(path)
        if name.startswith("nvjet_sm90_") or ("native_sdpa" in name and "wgmma" in name)
    }
    gemm = verdicts.filter(pl.col("kernel_class") == "gemm")
    assert set(gemm["name"].cast(pl.String).unique().to_list()) == expected_tc
    assert gemm["verdict"].cast(pl.String).unique().to_list() == ["tc"]
    tc = verdicts.filter(pl.col("verdict") == "tc")
    assert set(tc["name"].cast(pl.String).unique().to_list()) == expected_tc
    # the op link works here: every GEMM was launched by a bf16 operator
    assert gemm["op_dtype"].cast(pl.String).unique().to_list() == ["half"]
    durations = _durations_by_name(path)
    summary = tensor_core_summary(
        verdicts.with_columns(clipped_ns=pl.col("end_ns") - pl.col("start_ns"))
    ).row(0, named=True)
    assert summary["tc_ns"] == summary["gemm_ns"] == sum(durations[n] for n in expected_tc)
    assert summary["share_of_gemm"] == 1.0
    assert summary["unknown_ns"] == 0
    assert summary["kernel_ns"] == sum(durations.values())


def _corpus_trace(rel: str) -> Path:
    root = corpus()
    if root is None:
        pytest.skip("TRACEANALYZER_CORPUS is not set")
    return root / rel


@pytest.mark.parametrize(
    ("rel", "simt_family"),
    [
        ("public/kineto/resnet50_v1_schema", "volta_sgemm_"),  # V100, FP32
        ("public/param/resnet_rtx2080ti", "sgemm"),  # RTX 2080 Ti (Turing), FP32
    ],
)
def test_fp32_resnet_traces_run_no_gemm_on_tensor_cores(rel: str, simt_family: str) -> None:
    path = _corpus_trace(rel)
    verdicts = kernel_verdicts(read(path)).collect()
    gemm = verdicts.filter(pl.col("kernel_class") == "gemm")
    assert gemm.height > 0
    assert gemm["verdict"].cast(pl.String).unique().to_list() == ["no"]
    sgemm = gemm.filter(pl.col("name").cast(pl.String).str.contains(simt_family))
    assert sgemm.height > 0
    summary = tensor_core_summary(
        verdicts.with_columns(clipped_ns=pl.col("end_ns") - pl.col("start_ns"))
    ).row(0, named=True)
    assert summary["tc_ns"] == 0
    assert summary["gemm_ns"] > 0
    assert summary["share_of_gemm"] == 0.0
    assert summary["unknown_ns"] == 0


_DEPTHWISE = (
    "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, 1, "
    "c10::BFloat16, int>(int, int)"
)
_SGEMM_NAME = "volta_sgemm_128x64_nn"
_TC_CONV = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc"


@pytest.mark.parametrize(("off_name", "fires"), [(_DEPTHWISE, False), (_SGEMM_NAME, True)])
def test_depthwise_convolutions_have_no_tensor_core_form(
    tmp_path: Path, off_name: str, fires: bool
) -> None:
    """A depthwise convolution runs off the Tensor Cores whatever its dtype (one input
    channel per output channel: no tile to multiply). Its kernels get their own evidence and
    `no_tc_form_ns`, and TA005 does not ask to move them (an SGEMM in its place does fire)."""
    from traceanalyzer import api
    from traceanalyzer.analyses import analyze
    from traceanalyzer.readers import read
    from traceanalyzer.rules.examples import launched, step, write_example

    events = [
        step(1, 100, 20),
        *launched(105, 110, 300, 1, off_name),
        *launched(110, 410, 100, 2, _TC_CONV),
    ]
    path = write_example(events, tmp_path, "dw")
    (dev,) = analyze(read(path)).devices.summary.to_dicts()
    assert dev["gemm_ns"] == 400_000
    assert dev["no_tc_form_ns"] == (0 if fires else 300_000)
    rules = [f.rule for f in api.report(path).findings]
    assert ("TA005" in rules) is fires, rules
