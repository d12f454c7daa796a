"""GPU work: kernels, their classes, Tensor Cores, bandwidth, FLOPs, copies, memory and idle.

Reads the Timeline and the timeline room's windows and steps; imports no other room. Its
public results:

- `classify.kernel_class` / `classify.class_of`: the kernel classes (`KERNEL_CLASS`);
- `kernels.Kernels` (histograms, top kernels, classes, names, small kernels) and
  `kernels.CastImpact`;
- `tensor_cores.kernel_verdicts`, `gemm_units.GemmUnits`, `gemm_units.TensorCoreImpact`:
  Tensor Core verdicts, the GEMMs off the Tensor Cores and what moving them onto them saves;
- `bandwidth.Bandwidth`, `fusion.Fusion`, `fusion.MemoryImpact`: achieved bandwidth, the
  memory-bound traffic model and its fusion patterns, and what fusing memory-bound work saves;
- `flops.Flops`: FLOPs, MFU and the roofline; `shapes.Shapes`, `shapes.ShapeImpact`: matmul
  shapes and what padding the misaligned ones saves; `attention.Attention`: attention
  computed by hand;
- `operators`: the CPU operators behind GPU work (shapes, launches), shared by the above;
- `devices.Devices` (Metrics.devices), from `devices.device_summary` /
  `devices.step_summary`: busy and idle time per device and step;
- `idle.SyncImpact` / `idle.SyncSites` and the idle gaps by cause;
- `copies.Copies` (the memcpy summary) and `copies.PageableImpact`; `casts.CastSources`:
  where copy/cast kernels come from and what each named fix removes; `memory.Memory` (step
  peaks, growth and `memory.MemoryRunway`).
"""
