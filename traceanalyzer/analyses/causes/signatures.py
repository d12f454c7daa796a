"""The name families each cause is recognised by, as data (one regular expression each).

Names drift across torch, CUDA and cuDNN versions, so each family is matched by the parts that
stay (the `(dynamo_timed)` suffix Dynamo puts on every timed compile phase, the phases' own
names in older versions, the runtime's allocation entry points in CUDA and HIP, cuDNN's layout
kernels in their several spellings). Each pattern has a test per spelling it must catch
(tests/analyses/test_causes.py).
"""

from __future__ import annotations

from traceanalyzer.analyses.timeline import steady

#: Host ranges of torch.compile's compilation (defined beside the other one-time work, which
#: start-up and the steady state read too: a compile in the first steps is start-up).
COMPILE_WORK = steady.COMPILE_WORK

#: A compiled graph run: `Torch-Compiled Region: <frame>/<compile>` (torch >= 2.3); the
#: numbers are Dynamo's frame id and that frame's compile id (a recompile of frame 0 is
#: 0/1, 0/2, ...; a graph break's resumed frame gets a frame id of its own).
COMPILED_REGION = r"^Torch-Compiled Region: (\d+)/(\d+)"

#: Runtime and driver calls that allocate or free device memory outside the caching
#: allocator's pool: each one a trip to the driver, and a free synchronises the device.
ALLOCATOR_CALLS = (
    r"^(?:cudaMalloc|cudaFree|cuMemAlloc|cuMemFree|hipMalloc|hipFree"
    r"|cuMemCreate|cuMemRelease|cuMemMap|cuMemUnmap|cuMemSetAccess|cuMemAddressReserve"
    r"|cuMemAddressFree)(?:_v\d+)?$"
)
#: The allocator calls that synchronise the device (the GPU drains before they return).
ALLOCATOR_SYNCS = r"^(?:cudaFree|cuMemFree|hipFree)(?:_v\d+)?$"

#: The autograd engine's range around each backward function.
BACKWARD_FUNCTION = r"^autograd::engine::evaluate_function: "
#: The operators of anomaly mode's NaN check on each backward function's outputs
#: (`isnan(out)._is_any_true().item()` in the engine): found only inside the engine's range.
ANOMALY_CHECK = r"^aten::(?:isnan|_is_any_true|any|is_nonzero|item|_local_scalar_dense)$"
#: The check's first operator, by which a backward function is counted as checked.
ANOMALY_MARK = r"^aten::isnan$"
#: The check's operators that read the result on the host (a device sync).
ANOMALY_SYNC = r"^aten::(?:item|_local_scalar_dense|is_nonzero)$"

#: cuDNN's (and MIOpen's) kernels that transpose a tensor between NCHW and NHWC around a
#: convolution run in the other layout: `nchwToNhwcKernel`, `nhwcToNchwKernel` (cuDNN 8-9),
#: `convertTensor_kernel` (older cuDNN), `nchw2nhwc`/`nhwc2nchw` (cuDNN's xmma and MIOpen's
#: `batched_transpose`).
LAYOUT_KERNEL = (
    r"(?i)nchwToNhwc|nhwcToNchw|nchw_to_nhwc|nhwc_to_nchw|nchw2nhwc|nhwc2nchw"
    r"|convertTensor_kernel|batched_transpose"
)
#: The operators that launch a convolution's kernels (forward and backward).
CONVOLUTION_OP = r"(?i)conv|cudnn|miopen"
#: PyTorch's own depthwise convolution kernels (NCHW): a network that runs them may get
#: slower, not faster, in channels-last (measured: tests/data/gpu/README.md, conv_train).
DEPTHWISE_KERNEL = r"conv_depthwise2d|conv_depthwise3d"
#: Batch normalisation's kernels in their NCHW form (PyTorch's own and cuDNN's): their
#: channels-last forms (`..._channels_last_kernel`, `NHWC`) run the same work faster.
NCHW_NORM_KERNEL = r"(?i)batch_norm|bn_fw|bn_bw|bn_bwd|bn_fwd"
NHWC_FORM = r"(?i)channels_last|nhwc"
#: The optimizer's zero_grad range (`Optimizer.zero_grad#AdamW.zero_grad`), and the operators
#: that fill the gradients with zeros inside it (`zero_grad(set_to_none=False)`; the default,
#: set_to_none=True, runs none).
ZERO_GRAD_RANGE = r"^Optimizer\.zero_grad#"
ZERO_FILL = r"^aten::(?:zero_|fill_|_foreach_zero_|_foreach_fill_)$"
#: The autograd engine's gradient accumulation into a parameter's `.grad`, and the add it runs
#: there when the gradient exists already (zero-filled, not None): with None it takes the new
#: gradient as it is (a detach).
ACCUMULATE_GRAD = r"^autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
ACCUMULATE_ADD = r"^aten::add_$"
#: A tensor built from Python data on the host (`torch.tensor(list)`, `torch.as_tensor` of a
#: sequence): the constructor ends in `aten::lift_fresh`. The host time it takes (walking the
#: Python objects) lies before it, under no operator.
FROM_HOST_DATA = r"^aten::lift_fresh$"
#: The operators such a constructor runs itself before `lift_fresh` (its output's allocation,
#: a dtype conversion that copies nothing): the op-less time around them is the constructor's.
CONSTRUCTOR_PART = r"^aten::(?:empty|to|lift_fresh)$"
#: The operator around a host-to-device copy of a tensor (`.cuda()`, `.to(device)`).
COPY_OP = r"^aten::copy_$"
#: The operators that set a library up for a new input shape inside them: cuDNN's and MIOpen's
#: (`aten::cudnn_convolution`, `aten::_cudnn_attention_forward`, `aten::miopen_convolution`)
#: and the convolutions that call them (`aten::convolution_backward`).
LIBRARY_OP = r"(?i)cudnn|miopen|^aten::convolution_backward$|^aten::_convolution$"
#: A call that waits for the device: inside a convolution it is cuDNN timing its candidate
#: algorithms (`torch.backends.cudnn.benchmark = True` meeting a shape it has not seen).
DEVICE_SYNC = r"^(?:cuda|hip)(?:DeviceSynchronize|EventSynchronize|StreamSynchronize)$"
#: Dynamo's guard check on entering a compiled frame: once per call, matched or not. A lookup
#: with no compiled region after it runs the frame eagerly (its cache full: the recompile
#: limit was hit).
CACHE_LOOKUP = r"^TorchDynamo Cache Lookup$"
#: The host ranges of a compiled region's run, forward and backward (AOTAutograd's function
#: and its backward, for torch versions that record no `Torch-Compiled Region`) ...
REGION_RUN = r"^(?:Torch-Compiled Region: |CompiledFunction$|CompiledFunctionBackward$)"
#: ... and the compiled graphs' own calls inside them (Inductor's generated code).
GRAPH_CALL = r"^## Call CompiledFxGraph "
#: A compiled backward's run (AOTAutograd's backward function).
COMPILED_BACKWARD = r"^CompiledFunctionBackward$"
#: DistributedDataParallel's forward (one per micro-batch), the optimizer's step (one per
#: accumulation cycle), and the reducer's operators that all-reduce the gradients after a
#: backward (the all-reduce, its NCCL range, the scaling and the copy back into `.grad`).
DDP_FORWARD = r"^DistributedDataParallel\.forward$"
OPTIMIZER_STEP = r"^Optimizer\.step#"
REDUCER_OP = (
    r"^(?:c10d::allreduce_|nccl:all_reduce|torch::distributed::reducer::mul_out"
    r"|torch\.distributed\.ddp\.reducer::copy_bucket_to_grad)$"
)
