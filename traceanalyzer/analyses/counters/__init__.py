"""Counters: what the GPU's own records say about how well a busy GPU works, beyond the
timeline's busy and idle: the kernels' launch shapes against the device's limits
(launch_shapes), and the hardware counters of Nsight's GPU metrics and Nsight Compute where
a capture has them."""
