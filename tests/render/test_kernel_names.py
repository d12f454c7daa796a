"""Kernel names shortened to their readable core, distinct within a table."""

from __future__ import annotations

import io

import pytest

from tests.conftest import REPO
from traceanalyzer import api
from traceanalyzer.render.kernel_names import SHORT_WIDTH, short_names
from traceanalyzer.render.markdown import MarkdownRenderer

ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>,"
    " std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*,"
    " 2ul>)"
)
MUL_A = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float,"
    " float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int)"
)
MUL_B = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float,"
    " float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int)"
)
SIN = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::sin_kernel_cuda(at::Tensor"
    "IteratorBase&)::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>"
    " >(int)"
)
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::"
    "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float const*>(int)"
)
CUTLASS = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nn_align2>"
    "(cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nn_align2::Params)"
)
TRANSPOSE = (
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, "
    "false, true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>)"
)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (ADD, "vectorized_elementwise_kernel<CUDAFunctorOnSelf_add>"),
        (SIN, "vectorized_elementwise_kernel<sin_kernel_cuda>"),
        (ADAM, "multi_tensor_apply_kernel<FusedAdamMathFunctor>"),
        (CUTLASS, "Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nn_align2>"),
        (TRANSPOSE, "nchwToNhwcKernel"),
        (
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
        ),
        ("triton_poi_fused_gelu_view_10", "triton_poi_fused_gelu_view_10"),
    ],
)
def test_the_readable_core(name: str, short: str) -> None:
    assert short_names([name]) == [short]


def test_short_names_stay_distinct() -> None:
    """Two multiplications through different wrappers keep their wrappers; two names that
    still read the same are numbered; a repeated name keeps its one short form."""
    assert short_names([MUL_A, MUL_B, MUL_A]) == [
        "vectorized_elementwise_kernel<AUnaryFunctor, MulFunctor>",
        "vectorized_elementwise_kernel<BinaryFunctor, MulFunctor>",
        "vectorized_elementwise_kernel<AUnaryFunctor, MulFunctor>",
    ]
    same = [ADD, ADD.replace("<4,", "<8,")]
    assert short_names(same) == [
        "vectorized_elementwise_kernel<CUDAFunctorOnSelf_add>",
        "vectorized_elementwise_kernel<CUDAFunctorOnSelf_add> #2",
    ]


def test_markdown_tables_fit_a_ticket() -> None:
    """A real trace's Markdown: every table line within a ticket's width (its kernel names
    were up to 400 characters long), the kernels' short names distinct where their full
    names are."""
    rep = api.report(REPO / "tests" / "data" / "gpu" / "host_tensor_every_step.json.gz")
    buf = io.StringIO()
    MarkdownRenderer().render(rep, buf)
    rows = [line for line in buf.getvalue().splitlines() if line.startswith("|")]
    assert rows and max(len(r) for r in rows) <= SHORT_WIDTH + 40
    names = [k["name"] for k in rep.kernels["top"]]
    assert max(len(n) for n in names) > 300
    assert len(set(short_names(names))) == len(set(names))
