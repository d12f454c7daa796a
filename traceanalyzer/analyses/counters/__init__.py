"""Counters: what the GPU's own records say about how well a busy GPU works, beyond the
timeline's busy and idle: the kernels' launch shapes against the device's limits
(launch_shapes), Nsight Compute's per-kernel measurements joined to the trace's kernels
(ncu_join, ncu_results: NcuJoin), and the hardware counters of Nsight's GPU metrics where a
capture has them (gpu_metrics: GpuMetrics, Nsight's sampled GPU metrics per device over the
steady window, per steady step, over the samples inside each class of kernel, and in bins
for the figure; ClockImpact, what a clock held below its maximum costs)."""
