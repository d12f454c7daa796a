"""Host time: where a step's host time goes, by phase, and what the GPU loses waiting for it.

Reads the Timeline and the timeline room's intervals, start-up and step counts; imports no
other room. Its public results: `host_phases.host_phases` and
`host_phases.host_phase_medians` (each host step cut into data loading, forward, backward,
optimizer and other) and `host_phases.kernel_phases` (each kernel attributed to the phase of
the host step that launched it), kept together as the job's typed result
`host_phases.HostPhases` (Metrics.host_phases); and the GPU bound by its host, TA001's and
TA003's impact models: `host_bound.HostWaitImpact` (what feeding the GPU faster saves) and
`host_bound.LaunchImpact` (what launching fewer kernels saves), with
`host_bound.launch_bound` (whose waits are the launches' own cost).
"""
