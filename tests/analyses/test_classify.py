"""Kernel classes: one case per row of the pattern table, with real kernel names.

The names come from the shared trace corpus (torch.profiler traces from HTA, PARAM, Kineto,
TraceLens and this project's H100 captures) and from `tensor-core-kernels.tsv`.
"""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import REPO
from traceanalyzer.analyses.gpu.classify import (
    CLASS_PATTERNS,
    COLLECTIVE_KIND,
    KERNEL_CLASS,
    class_table_markdown,
    collective_kind,
    collective_of_text,
    comm_collective,
    kernel_base_name,
    kernel_class,
    kernel_class_rule,
    launched_by_collective,
    with_launching_op,
)

#: Communication kernels beyond NCCL: (kernel name as recorded, collective kind). Names
#: from the libraries' sources (kernel templates and namespaces, demangled as CUPTI/roctracer
#: write them) and from the public traces that hold them.
COMM_CASES: list[tuple[str, str]] = [
    # RCCL keeps NCCL's kernel names (ROCm traces)
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "other"),
    ("ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    # MSCCL (inside RCCL) and MSCCL++ (executor; its NCCL-API kernels are named for the
    # collective alone: `named_collective`)
    ("mscclKernel_Sum_bf16_LL128(ncclDevComm*, mscclAlgo*, mscclWork*)", "other"),
    (
        "void mscclpp::executionKernel<__nv_bfloat16, false>(int, __nv_bfloat16*, "
        "__nv_bfloat16*, __nv_bfloat16*, void*, unsigned long, mscclpp::DeviceExecutionPlan*, "
        "unsigned long, unsigned int)",
        "other",
    ),
    (
        "void allreduce8<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*)",
        "all_reduce",
    ),
    (
        "void allgather6(void*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long)",
        "all_gather",
    ),
    # NVSHMEM device-side collectives and stream barriers
    (
        "void nvshmemi_alltoall_on_stream_kernel<int>(int, int*, int const*, unsigned long)",
        "all_to_all",
    ),
    ("nvshmemi_barrier_all_on_stream_kernel()", "other"),
    # DeepEP (DeepSeek's public DualPipe trace names it `dpsk::ep::*`) and pplx-kernels:
    # MoE dispatch/combine all-to-all, on their own stream
    (
        "void dpsk::ep::internode::dispatch<false, 8, 6, 1, 14, 14, 2>(int4*, float*, long*, "
        "float*, SourceMeta*, int4 const*, float const*, long const*, float const*, int*)",
        "all_to_all",
    ),
    (
        "void dpsk::ep::internode::combine<__nv_bfloat16, 8, 4, 12>(int4*, float*, bool*)",
        "all_to_all",
    ),
    (
        "void deep_ep::internode::notify_dispatch<false, 8>(int const*, int*, int, int const*)",
        "all_to_all",
    ),
    (
        "void deep_ep::internode_ll::dispatch<false, 9, 7168>(void*, float*, int*, long*, void*)",
        "all_to_all",
    ),
    (
        "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*)",
        "all_to_all",
    ),
    ("void deep_ep::intranode::barrier<8>(int**, int)", "other"),
    (
        "void (anonymous namespace)::dispatchKernel<10u, true, false>(int*, unsigned long, "
        "std::byte*, unsigned long, unsigned long, float*)",
        "all_to_all",
    ),
    (
        "void (anonymous namespace)::combineKernel<__nv_bfloat16, __nv_bfloat16, 16u, true, "
        "true>(__nv_bfloat16*, unsigned long, unsigned int*, unsigned long)",
        "all_to_all",
    ),
    # custom all-reduce: vLLM / SGLang, TensorRT-LLM (also fused with RMSNorm: mostly
    # communication, so comm)
    (
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
        "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
        "all_reduce",
    ),
    (
        "void sglang::cross_device_reduce_2stage<__nv_bfloat16, 8>(sglang::RankData*, "
        "sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)",
        "all_reduce",
    ),
    (
        "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(AllReduceParams)",
        "all_reduce",
    ),
    (
        "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<"
        "__nv_bfloat16, 8, true>(tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams)",
        "all_reduce",
    ),
]

#: Names near the communication patterns that are not communication, and why.
NOT_COMM_CASES: list[tuple[str, str]] = [
    # a GEMM with a collective fused in: compute (Tensor Core share sees it), never
    # exposed communication. Constructed from TensorRT-LLM's / flux's naming.
    ("sm90_gemm_bf16_128x256_allreduce_fusion_kernel", "gemm"),
    ("void flux::all_gather_matmul_kernel<cutlass::bfloat16_t>(flux::Params)", "gemm"),
    # DeepEP's layout kernel counts tokens per rank locally: no communication
    (
        "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, "
        "bool*, int, int, int, int)",
        "other",
    ),
    # "reduce" and "combine" alone are not collectives
    ("triton_red_fused_all_reduce_0", "memory_bound"),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >("
        "at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned "
        "int, float, 4>)",
        "memory_bound",
    ),
    (
        "void flash::combine_attn_seqk_parallel<cutlass::bfloat16_t, 128, 4, 1>(Flash_fwd_params)",
        "gemm",
    ),
]

#: (kernel name as recorded, expected class). Every table row decides at least one case.
CASES: list[tuple[str, str]] = [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "comm"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
    (
        (
            "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, "
            "16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)"
        ),
        "comm",
    ),
    # ROCm (public tracelens_rocm traces): Triton flash attention; Composable Kernel's XDL
    # (MFMA) convolution; a CK elementwise kernel is not matrix math for its `tensor_operation`
    ("attn_fwd", "gemm"),
    (
        "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_"
        "v3INS_34GridwiseGemmMultiD_xdl_cshuffle_v3INS_13tensor_layout",
        "gemm",
    ),
    (
        "_ZN2ck16tensor_operation6device12_GLOBAL__N_118kernel_elementwiseINS_16GridwiseElementwise",
        "memory_bound",
    ),
    ("SubTensorOpWithCastTensor1d", "memory_bound"),  # MIOpen elementwise, not CUTLASS tensorop
    # communication beyond NCCL (COMM_CASES: the names, their collective and their origin)
    *((name, "comm") for name, _kind in COMM_CASES),
    *NOT_COMM_CASES,
    ("triton_poi_fused_add_cos_sin_0", "memory_bound"),
    ("triton_poi_fused_addmm_gelu_0", "memory_bound"),
    ("triton_red_fused_native_layer_norm_1", "memory_bound"),
    (
        (
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, "
            "__nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>, float "
            "const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, "
            "__nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*)"
        ),
        "memory_bound",
    ),
    (
        (
            "void flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, "
            "false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, "
            "cutlass::bfloat16_t> >, 4, 1, true>(Flash_fwd_params)"
        ),
        "memory_bound",
    ),
    (
        (
            "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void "
            "const*, void*, void*, unsigned int)"
        ),
        "memory_bound",
    ),
    (
        (
            "void reduce_1Block_kernel<float, 128, 7, cublasGemvTensorStridedBatched<float>, "
            "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> "
            ">(float const*, float, cublasGemvTensorStridedBatched<float>, int, float const*, "
            "float, cublasGemvTensorStridedBatched<float const>, "
            "cublasGemvTensorStridedBatched<float>, cublasPointerMode_t, cublasLtEpilogue_t, "
            "cublasGemvTensorStridedBatched<biasType<cublasGemvTensorStridedBatched<float>::value"
            "_type, float>::type const>)"
        ),
        "memory_bound",
    ),
    (
        (
            "void "
            "cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK<cut"
            "lass_cudnn_train::MatrixShape<4, 128>, "
            "cutlass_cudnn_train::epilogue::thread::LinearCombination<float, 4, float, float, "
            "(cutlass_cudnn_train::epilogue::thread::ScaleType::Kind)0, "
            "(cutlass_cudnn_train::FloatRoundStyle)2>, "
            "cutlass_cudnn_train::reduction::thread::ReduceAdd<float, float, 4>, 4> "
            ">(cutlass_cudnn_train::reduction::kernel::ReduceSplitK<cutlass_cudnn_train::MatrixSh"
            "ape<4, 128>, cutlass_cudnn_train::epilogue::thread::LinearCombination<float, 4, "
            "float, float, (cutlass_cudnn_train::epilogue::thread::ScaleType::Kind)0, "
            "(cutlass_cudnn_train::FloatRoundStyle)2>, "
            "cutlass_cudnn_train::reduction::thread::ReduceAdd<float, float, 4>, 4>::Params)"
        ),
        "memory_bound",
    ),
    (
        (
            "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, "
            "float*, cublasLtEpilogue_t, int, float*, long, void*, long, long, long, float*, "
            "long, int*)"
        ),
        "memory_bound",
    ),
    (
        (
            "void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<float "
            "const>, cublasGemvTensorStridedBatched<float> > "
            ">(cublasDotParams<cublasGemvTensorStridedBatched<float const>, "
            "cublasGemvTensorStridedBatched<float> >)"
        ),
        "memory_bound",
    ),
    (
        (
            "void scal_kernel<float, float, 1, false, 6, 5, 5, 3>(cublasTransposeParams<float>, "
            "float const*, float*, float const*)"
        ),
        "memory_bound",
    ),
    (
        (
            "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, "
            "unsigned int)"
        ),
        "copy_cast",
    ),
    (
        (
            "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
            "(cudnnKernelDataType_t)0>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, "
            "float*)"
        ),
        "copy_cast",
    ),
    (
        (
            "void cudnn::cnn::im2col4d_kernel<float, long>(cudnn::cnn::im2col4d_params, "
            "cudnnConvolutionStruct, cudnnTensor4dStruct, float const*, float*)"
        ),
        "copy_cast",
    ),
    ("cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)", "other"),
    (
        ("cask_cudnn::computeWgradSplitKOffsetsKernel(cask_cudnn::ComputeSplitKOffsetsParams)"),
        "other",
    ),
    (
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_c"
            "ga1x1x1_kernel0_0"
        ),
        "gemm",
    ),
    (
        (
            "void "
            "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_ten"
            "sorop_s1688gemm_128x128_16x4_nn_align4::Params)"
        ),
        "gemm",
    ),
    (
        (
            "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x"
            "128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn"
        ),
        "gemm",
    ),
    ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", "gemm"),
    ("volta_h884gemm_64x64_nt", "gemm"),
    (
        ("turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_filter1x1_stg8_interior_nchw_nn_v1"),
        "gemm",
    ),
    (
        (
            "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM"
            "1_ASEM1_CLR1_CADS0_EPS0_GRVWA1_GRVWB1_GSUAMB_ISA90a_IU1_K1_LBSPPA0_LBSPPB0_LBSPPM0_L"
            "PA0_LPB0_LPM0_LRVW1_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_N"
            "LCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO1_SRVW0_SSO0_SVW1_TLDS0_USFGROn1_VSn1_VW"
            "A1_VWB1_WSGRA0_WSGRB0_WS64_WG64_4_1"
        ),
        "gemm",
    ),
    (
        (
            "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threa"
            "dblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi128ELi128ELi32EEENS4_52Conv2dWgr"
            "adOutputGradientTileAccessIteratorOptimizedINS_11MatrixShapeILi128ELi32EEENS_10tfloa"
            "t32_tENS_9transform29PitchLinearWarpRakedThreadMapINS_16PitchLinearShapeILi128ELi32E"
            "EELi128ENSF_ILi8ELi4EEELi4EEENS_12AlignedArrayISC_Li4ELi16EEEEENSD_11threadblock25Re"
            "gularTileAccessIteratorISB_SC_NS_6layout40ColumnMajorTensorOpMultiplicandCongruousIL"
            "i32ELi32EEELi1ESI_Li16EEELNS_4arch14CacheOperation4KindE0ENS4_48Conv2dWgradActivatio"
            "nTileAccessIteratorOptimizedINSA_ILi32ELi128EEESC_SI_SK_EENSN_ISW_SC_NSO_37RowMajorT"
            "ensorOpMultiplicandCongruousILi32ELi32EEELi0ESI_Li16EEELSU_0ENS6_11threadblock9MmaPo"
            "licyINS6_4warp11MmaTensorOpINS7_ILi64ELi64ELi32EEESC_SQ_SC_SZ_fNSO_8RowMajorENS13_17"
            "MmaTensorOpPolicyINSS_3MmaINS7_ILi16ELi8ELi8EEELi32ESC_S16_SC_NSO_11ColumnMajorEfS16"
            "_NSS_13OpMultiplyAddEEENSA_ILi1ELi1EEEEELi1ELb0EbEENSA_ILi0ELi0EEES1G_Li1EEELi4EbEEN"
            "S_8epilogue11threadblock8EpilogueIS8_S1F_Li1ENS1K_22PredicatedTileIteratorINS1K_26Ou"
            "tputTileOptimalThreadMapINS1K_15OutputTileShapeILi128ELi8ELi2ELi1ELi1EEENS1O_ILi1ELi"
            "8ELi1ELi1ELi8EEELi128ELi4ELi32EEEfLb0ENSO_9NoPermuteELb0EEENS1J_4warp24FragmentItera"
            "torTensorOpIS15_S19_fNS_5ArrayIfLi4ELb1EEES16_EENS1U_20TileIteratorTensorOpIS15_S19_"
            "fS16_EENS1K_18SharedLoadIteratorINS1R_18CompactedThreadMapEfLi16EEENS1J_6thread17Lin"
            "earCombinationIfLi4EffLNS24_9ScaleType4KindE0ELNS_15FloatRoundStyleE2EEENSA_ILi0ELi8"
            "EEELi2ELi1EEENS11_30GemmIdentityThreadblockSwizzleILi4EEELNS1_8OperatorE2ENS1_17Conv"
            "2dProblemSizeELNS1_9GroupModeE0EEEEEvNT_6ParamsE"
        ),
        "gemm",
    ),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("volta_sgemm_128x64_nn", "gemm"),
    (
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execu"
            "te_segment_k_off_kernel__5x_cublas"
        ),
        "gemm",
    ),
    (
        (
            "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, "
            "false, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
            "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
            "float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
            "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
            "float>, float, float)"
        ),
        "gemm",
    ),
    (
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_al"
            "igna4_alignc4_execute_kernel__5x_cublas"
        ),
        "gemm",
    ),
    (
        (
            "void "
            "cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(cutlass_80_simt_sgemm_"
            "256x128_8x4_nt_align1::Params)"
        ),
        "gemm",
    ),
    (
        (
            "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256"
            "b_rM_TN_transOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f"
        ),
        "gemm",
    ),
    (
        (
            "void magma_sgemmEx_kernel<float, float, float, false, false, 6, 3, 5, 3, 3>(int, "
            "int, int, Tensor, int, Tensor, int, Tensor, int, Tensor, int, int, int, float "
            "const*, float const*, float, float, int, cublasLtEpilogue_t, int, void const*, long)"
        ),
        "gemm",
    ),
    ("ampere_gcgemm_64x64_nt", "gemm"),
    # MIOpen's direct convolution (its reference kernels, gpu_reference_kernel/naive_conv.cpp),
    # which it falls back to where no implicit-GEMM solver applies
    ("naive_conv_ab_nonpacked_fwd_nchw_half_double_half", "gemm"),
    ("naive_conv_ab_nonpacked_wrw_nhwc_ushort_double_ushort", "gemm"),
    (
        (
            "void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, "
            "false, false, true>(int, int, int, float const*, int, float*, float const*, "
            "kernel_conv_params, unsigned long long, int, float, float, int, float const*, float "
            "const*, bool, int, int)"
        ),
        "gemm",
    ),
    (
        (
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
            "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
            "false, true, false, false, true, true, false, false>(Flash_fwd_params)"
        ),
        "gemm",
    ),
    (
        (
            "fmha_cutlassF_f32_aligned_64x64_rf_sm75(PyTorchMemEffAttention::AttentionKernel<floa"
            "t, cutlass::arch::Sm75, true, 64, 64, 64, true, true>::Params)"
        ),
        "gemm",
    ),
    (
        ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext"),
        "gemm",
    ),
    (
        (
            "void "
            "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::Co"
            "llectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
            "cute::tuple<cute::C<128>, cute::C<176>, cute::C<128> >, 128, cutlass::bfloat16_t, "
            "float, cutlass::arch::Sm90> > > >(T1::Params)"
        ),
        "gemm",
    ),
    (
        (
            "void "
            "pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>(pytorch_flash::Flas"
            "h_bwd_params)"
        ),
        "gemm",
    ),
    ("triton_tem_fused_mm_0", "gemm"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "gemm"),
    ("maxwell_scudnn_winograd_128x128_ldg1_ldg4_tile150x150", "gemm"),
    (
        (
            "void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, "
            "int, float const*, int, float*, float const*, kernel_grad_params, unsigned long "
            "long, int, float, int, int, int, int)"
        ),
        "gemm",
    ),
    (
        (
            "void cudnn::winograd_nonfused::winogradForwardData4x4<float, "
            "float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)"
        ),
        "gemm",
    ),
    (
        (
            "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, "
            "int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)"
        ),
        "gemm",
    ),
    (
        (
            "void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(int, int, int, "
            "float const*, int, float const*, int, float*, kernel_grad_params, unsigned long "
            "long, int, unsigned long long, int, float, int, int, int)"
        ),
        "gemm",
    ),
    (
        (
            "void at::native::vectorized_elementwise_kernel<4, "
            "at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, "
            "std::array<char*, 2ul> >(int, "
            "at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, "
            "std::array<char*, 2ul>)"
        ),
        "copy_cast",
    ),
    (
        (
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
            "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous "
            "namespace)::OpaqueType<2u>*, at::native::(anonymous "
            "namespace)::CatArrInputTensorMetadata<at::native::(anonymous "
            "namespace)::OpaqueType<2u>, unsigned int, 64, 64>, at::native::(anonymous "
            "namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)"
        ),
        "copy_cast",
    ),
    (
        (
            "void "
            "at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::Tens"
            "orIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#3}::operator()() "
            "const::{lambda(int)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, "
            "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
            "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, "
            "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator"
            "()() const::{lambda()#3}::operator()() const::{lambda(int)#1}, std::array<char*, "
            "2ul>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned "
            "int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)"
        ),
        "copy_cast",
    ),
    (
        (
            "void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long "
            "const*, float*, long, long, long)"
        ),
        "copy_cast",
    ),
    (
        (
            "void vllm::scaled_fp8_quant_kernel_strided<c10::BFloat16, "
            "c10::Float8_e4m3fn>(c10::Float8_e4m3fn*, c10::BFloat16 const*, float const*, int, "
            "long, long)"
        ),
        "copy_cast",
    ),
    (
        (
            "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, "
            "(vllm::Fp8KVCacheDataType)1>(__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned "
            "char*, unsigned char*, long const*, long, long, long, long, long, int, int, int, "
            "float const*, float const*)"
        ),
        "copy_cast",
    ),
    ("_copy_page_indices_kernel", "copy_cast"),
    (
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
            "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 "
            "const*, float*, float*, c10::BFloat16*)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<float, "
            "float>(long, long, float const*, float const*, float const*, float const*, float*, "
            "float*)"
        ),
        "memory_bound",
    ),
    (
        (
            "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 "
            "const*, long, long, long, long, long, c10::BFloat16 const*, float, int, int)"
        ),
        "memory_bound",
    ),
    (
        (
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, "
            "1>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float "
            "const*, float, float, float*, float*, float*, float*, float, float)"
        ),
        "memory_bound",
    ),
    (
        (
            "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, "
            "float, 3, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool "
            "const*, int, bool)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, "
            "float, c10::BFloat16, at::native::(anonymous "
            "namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)"
        ),
        "memory_bound",
    ),
    (
        (
            "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
            "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, "
            "c10::BFloat16*, c10::BFloat16 const*, float, int, int)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::(anonymous "
            "namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
            "namespace)::FusedOptimizerTensorListMetadata<4>>"
        ),
        "memory_bound",
    ),
    (
        (
            "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, "
            "float, float, float, float, float, adamMode_t, float, int, int>(int, int volatile*, "
            "TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, float, "
            "float, adamMode_t, float, int, int)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
            "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned "
            "int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
            "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, "
            "unsigned int, long)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, "
            "long, long, long, bool)"
        ),
        "memory_bound",
    ),
    (
        (
            "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, false, "
            "long, 1ul, 8ul>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, "
            "long>, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, "
            "at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, long>, "
            "at::GenericPackedTensorAccessor<int, 1ul, at::RestrictPtrTraits, int>, "
            "at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>, "
            "at::GenericPackedTensorAccessor<int, 1ul, at::RestrictPtrTraits, int>, "
            "fbgemm_gpu::FixedDivisor, at::GenericPackedTensorAccessor<long, 1ul, "
            "at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<long, 1ul, "
            "at::RestrictPtrTraits, int>, long, at::GenericPackedTensorAccessor<int, 1ul, "
            "at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<float, 2ul, "
            "at::RestrictPtrTraits, long>)"
        ),
        "memory_bound",
    ),
    (
        (
            "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, "
            "int>::Policy800, false, long, int, int, int>(int*, int*, int*, int const*, long*, "
            "long const*, int*, int const*, int, int, int)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::_scatter_gather_elementwise_kernel<128, 4, "
            "at::native::_cuda_scatter_gather_internal_kernel<true, "
            "float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, "
            "at::native::ReduceAdd const&)::{lambda(int)#1}>(int, "
            "at::native::_cuda_scatter_gather_internal_kernel<true, "
            "float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, "
            "at::native::ReduceAdd const&)::{lambda(int)#1})"
        ),
        "memory_bound",
    ),
    (
        (
            "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, "
            "c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, long, int, "
            "int, int)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::vectorized_elementwise_kernel<4, "
            "at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, "
            "at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::vectorized_elementwise_kernel<8, "
            "at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul> >(int, "
            "at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
            "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> "
            ">(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
            "unsigned int, float, 4>)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::elementwise_kernel<128, 4, "
            "at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> "
            ">(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> "
            "const&)::{lambda(int)#1}>(int, "
            "at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> "
            ">(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> "
            "const&)::{lambda(int)#1})"
        ),
        "memory_bound",
    ),
    # TensorRT's and cuDNN's pooling kernels carry GEMM tokens (xmma): pooling comes first
    ("sm50_xmma_pooling_fw_4d_FP16FP32NHWC_Average", "memory_bound"),
    (
        "void cudnn::pooling_fw_4d_kernel<float, float, cudnn::averpooling_func<float>>",
        "memory_bound",
    ),
    (
        (
            "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, "
            "float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, "
            "float*, long*)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, "
            "unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<float, unsigned int>, "
            "at::cuda::detail::TensorInfo<float, unsigned int>, "
            "at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, "
            "at::PhiloxCudaState)"
        ),
        "memory_bound",
    ),
    (
        (
            "void at::native::(anonymous "
            "namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
            "float*, float const*, long const*, float const*, bool, long, long, long, long)"
        ),
        "memory_bound",
    ),
    (
        (
            "void cunn_ClassNLLCriterion_updateOutput_kernel<float, float>(float*, float*, "
            "float*, long*, float*, int, int, int, int, long)"
        ),
        "memory_bound",
    ),
    (
        ("void cudnn::ops::scalePackedTensor_kernel<float, float>(long, float*, float)"),
        "memory_bound",
    ),
    ("at::cuda::(anonymous namespace)::spin_kernel(long)", "other"),
    ("triton__0d1d2d3d", "other"),
    (
        (
            "void "
            "moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::"
            "bfloat16_t, cutlass::bfloat16_t, 4, true> "
            ">(moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, 4, "
            "true>)"
        ),
        "other",
    ),
    (
        (
            "void fbgemm_gpu::(anonymous namespace)::_get_FP8_qparam_cuda_kernel<float>(float "
            "const*, int, int, unsigned char*, float*, bool)"
        ),
        "other",
    ),
]


def _classes(names: list[str]) -> list[str | None]:
    frame = pl.DataFrame({"name": names}, schema={"name": pl.Categorical})
    return frame.select(kernel_class(pl.col("name")))["name"].cast(pl.String).to_list()


@pytest.mark.parametrize(("name", "expected"), CASES, ids=[n[:60] for n, _ in CASES])
def test_kernel_class(name: str, expected: str) -> None:
    assert _classes([name]) == [expected]


def test_every_table_row_decides_a_case() -> None:
    rules = pl.select(kernel_class_rule(pl.Series([n for n, _ in CASES])))
    decided = set(rules.to_series().cast(pl.String).to_list())
    assert decided == {p.key for p in CLASS_PATTERNS} | {"other"}


def test_table_is_well_formed() -> None:
    keys = [p.key for p in CLASS_PATTERNS]
    assert len(keys) == len(set(keys))
    assert all(p.kernel_class in KERNEL_CLASS.categories for p in CLASS_PATTERNS)


def test_whole_column_at_once_keeps_dtype_and_nulls() -> None:
    names = [n for n, _ in CASES]
    frame = pl.DataFrame({"name": [*names, None]}, schema={"name": pl.Categorical})
    out = frame.select(kernel_class(pl.col("name")))
    assert out.schema["name"] == KERNEL_CLASS
    assert out["name"].cast(pl.String).to_list() == [c for _, c in CASES] + [None]


def test_string_input_and_window_contexts_agree_with_categorical() -> None:
    names = [n for n, _ in CASES]
    frame = pl.DataFrame({"name": names * 2, "half": [0] * len(names) + [1] * len(names)})
    out = frame.with_columns(pl.col("name").cast(pl.Categorical).alias("cat")).select(
        from_str=kernel_class(pl.col("name")),
        from_cat=kernel_class(pl.col("cat")),
        per_half=kernel_class(pl.col("cat")).over("half"),
    )
    expected = [c for _, c in CASES] * 2
    for column in out.columns:
        assert out[column].cast(pl.String).to_list() == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Inductor's fused pointwise kernels name the op whose epilogue they run.
        ("triton_poi_fused_addmm_gelu_0", "memory_bound"),
        # fbgemm_gpu is an embedding library, not a GEMM.
        (
            "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int*)",
            "copy_cast",
        ),
        # `gpu_kernel_impl_nocast` is not a cast, `broadcast` is not a cast.
        (
            "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
            "at::native::CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, "
            "at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1}>(int, "
            "at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> >("
            "at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::"
            "{lambda(int)#1})",
            "memory_bound",
        ),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "comm"),
    ],
)
def test_precedence(name: str, expected: str) -> None:
    assert _classes([name]) == [expected]


def test_base_name_drops_void_and_parameters_only() -> None:
    names = pl.Series(
        [
            "void gemv2T_kernel_val<int, float>(cublasGemvParams<float>, float, float)",
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, 3>(float*, "
            "at::native::(anonymous namespace)::CatArrInputTensorMetadata<float>)",
            "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NTT",
        ]
    )
    assert pl.select(kernel_base_name(names)).to_series().to_list() == [
        "gemv2T_kernel_val<int, float>",
        "at::native::(anonymous namespace)::CatArrayBatchedCopy<float, 3>",
        "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NTT",
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce"),
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "all_reduce",
        ),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
        (
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "reduce_scatter",
        ),
        (
            "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "broadcast",
        ),
        ("ncclKernel_Reduce_RING_LL_Sum_float(ncclWorkElem)", "reduce"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "send_recv"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
        # NCCL runs all-to-all as SendRecv; other collective libraries name it.
        ("ncclKernel_AllToAll_RING_SIMPLE(ncclWorkElem)", "all_to_all"),
        (
            "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>("
            "c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)",
            "all_reduce",
        ),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "other"),
        ("volta_sgemm_128x64_nn", None),
        *COMM_CASES,
        *((n, None) for n, c in NOT_COMM_CASES),
    ],
)
def test_collective_kind(name: str, expected: str | None) -> None:
    out = pl.select(collective_kind(pl.lit(name)))
    assert out.to_series().dtype == COLLECTIVE_KIND
    assert out.item() == expected


def test_kernel_classes_doc_lists_the_table() -> None:
    doc = (REPO / "docs" / "kernel-classes.md").read_text()
    assert class_table_markdown() in doc


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("record_param_comms", True),
        ("c10d::allreduce_", True),
        ("c10d::alltoall_base_", True),
        ("_c10d_functional::all_gather_into_tensor", True),
        ("nccl:all_reduce", True),
        ("symm_mem::multimem_all_reduce_", True),
        # Gloo runs its collectives on the CPU: its operators launch no kernel
        ("aten::copy_", False),
        ("aten::mm", False),
        ("record_param_comms_extra", False),
        (None, False),
    ],
)
def test_launched_by_collective(op: str | None, expected: bool) -> None:
    assert pl.select(launched_by_collective(pl.lit(op, pl.String))).item() is expected


def test_launching_collective_op_makes_a_kernel_comm_unless_it_is_a_gemm() -> None:
    frame = pl.DataFrame(
        {
            "name": [
                "void allgather_custom_impl<float>(float*)",  # unknown name, launched by c10d
                "void at::native::vectorized_elementwise_kernel<4>(int)",  # by aten::add_
                "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NTT",  # a matmul a fused comm op runs
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",  # no op
            ],
            "op_name": [
                "record_param_comms",
                "aten::add_",
                "symm_mem::fused_all_gather_matmul",
                None,
            ],
            "collective": ["allgather", None, None, None],
        }
    )
    out = frame.with_columns(
        cls=with_launching_op(kernel_class(pl.col("name")), pl.col("op_name"))
    ).with_columns(
        coll=comm_collective(
            pl.col("cls") == "comm", pl.col("name"), pl.col("op_name"), pl.col("collective")
        )
    )
    assert out["cls"].cast(pl.String).to_list() == ["comm", "memory_bound", "gemm", "comm"]
    # the kernel name names none; the recorded `Collective name` does
    assert out["coll"].cast(pl.String).to_list() == ["all_gather", None, None, "all_gather"]


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("c10d::allreduce_", "all_reduce"),
        ("c10d::_allgather_base_", "all_gather"),
        ("c10d::_reduce_scatter_base_", "reduce_scatter"),
        ("c10d::alltoall_base_", "all_to_all"),
        ("c10d::broadcast_", "broadcast"),
        ("c10d::send", "send_recv"),
        ("c10d::recv_", "send_recv"),
        ("c10d::reduce_", "reduce"),
        ("c10d::barrier", "other"),
        ("record_param_comms", "other"),
    ],
)
def test_collective_of_operator_names(op: str, expected: str) -> None:
    assert pl.select(collective_of_text(pl.lit(op))).item() == expected
