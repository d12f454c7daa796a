"""Layout conversions: the kernels that transpose tensors between NCHW and NHWC around
convolutions run in the other layout.

On Tensor Cores, cuDNN's fast convolutions read and write NHWC (channels-last). A network
kept in PyTorch's default NCHW layout under autocast gets its inputs transposed before each
convolution and its outputs transposed back, forward and backward (`nchwToNhwcKernel`,
`nhwcToNchwKernel`, `convertTensor_kernel` in older cuDNN): kernels that move every
activation twice and do no math. `model.to(memory_format=torch.channels_last)` (and the same
for the inputs) removes them, and moves the batch normalisations between the convolutions
onto their channels-last kernels, which do the same work faster.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.causes import signatures as sig

#: Per device (`Causes.layout`).
LAYOUT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "count": pl.Int64(),
    "transpose_ns": pl.Int64(),
    "conv_ns": pl.Int64(),
    "kernel_ns": pl.Int64(),
    "conv_ops": pl.Int64(),
    "top_kernel": pl.String(),
    "top_op": pl.String(),
    "conv_dtype": pl.String(),
    "depthwise_ns": pl.Int64(),
    "nchw_norm_ns": pl.Int64(),
}


def layout_kernels(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per device with a layout-transposing kernel launched by a convolution (LAYOUT_SCHEMA):
        their `count` and time inside the window (`transpose_ns`), the convolutions' other kernel
        time (`conv_ns`) and all kernel time (`kernel_ns`), how many distinct convolution
        operators launched them (`conv_ops`), the longest-running transpose kernel and the
        operator that launched most of their time, and the convolutions' dtype (the one with
        most kernel time: `bf16`, `fp16`, `fp32`, ...), and the time of depthwise convolutions
        run on PyTorch's own NCHW kernels (`depthwise_ns`: `conv_depthwise2d`, whose channels-last
        form can be slower), and batch normalisation's kernels in their NCHW form (`nchw_norm_ns`),
    which channels-last runs in its faster form. `kernels`: the classified kernels inside
        the windows (`clipped_ns`, `op_name`, `op_dtype`)."""
    key = ["rank", "device"]
    k = (
        kernels.lazy()
        .filter(pl.col("kind") == "kernel")
        .select(
            *key,
            name=pl.col("name").cast(pl.String),
            op=pl.col("op_name").cast(pl.String),
            dtype=pl.col("op_dtype").cast(pl.String),
            ns="clipped_ns",
        )
    )
    conv = pl.col("op").fill_null("").str.contains(sig.CONVOLUTION_OP)
    transpose = pl.col("name").str.contains(sig.LAYOUT_KERNEL)
    mine = k.filter(transpose & conv)
    by_name = (
        mine.group_by(*key, "name")
        .agg(pl.col("ns").sum())
        .sort("ns", "name", descending=[True, False])
        .group_by(key, maintain_order=True)
        .agg(top_kernel=pl.col("name").first())
    )
    by_op = (
        mine.group_by(*key, "op")
        .agg(pl.col("ns").sum())
        .sort("ns", "op", descending=[True, False])
        .group_by(key, maintain_order=True)
        .agg(top_op=pl.col("op").first())
    )
    convs = k.filter(conv & ~transpose)
    conv_time = convs.group_by(key).agg(conv_ns=pl.col("ns").sum())
    dtype = (
        convs.filter(pl.col("dtype").is_not_null())
        .group_by(*key, "dtype")
        .agg(pl.col("ns").sum())
        .sort("ns", "dtype", descending=[True, False])
        .group_by(key, maintain_order=True)
        .agg(conv_dtype=pl.col("dtype").first())
    )
    total = k.group_by(key).agg(
        kernel_ns=pl.col("ns").sum(),
        depthwise_ns=pl.col("ns").filter(pl.col("name").str.contains(sig.DEPTHWISE_KERNEL)).sum(),
        nchw_norm_ns=pl.col("ns")
        .filter(
            pl.col("name").str.contains(sig.NCHW_NORM_KERNEL)
            & ~pl.col("name").str.contains(sig.NHWC_FORM)
        )
        .sum(),
    )
    out = (
        mine.group_by(key)
        .agg(
            count=pl.len().cast(pl.Int64),
            transpose_ns=pl.col("ns").sum(),
            conv_ops=pl.col("op").n_unique().cast(pl.Int64),
        )
        .join(conv_time, on=key, how="left")
        .join(total, on=key, how="left")
        .join(by_name, on=key, how="left")
        .join(by_op, on=key, how="left")
        .join(dtype, on=key, how="left")
        .with_columns(pl.col("conv_ns", "kernel_ns", "depthwise_ns", "nchw_norm_ns").fill_null(0))
        .select(list(LAYOUT_SCHEMA))
        .sort(key)
    )
    return out.collect().cast(LAYOUT_SCHEMA)  # type: ignore[arg-type]
