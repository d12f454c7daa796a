"""Counters: what the GPU's own records say about how well a busy GPU works, beyond the
timeline's busy and idle: the kernels' launch shapes against the device's limits
(launch_shapes), Nsight Compute's per-kernel measurements joined to the trace's kernels
(ncu_join, ncu_results: NcuJoin), and the hardware counters of Nsight's GPU metrics where a
capture has them."""
