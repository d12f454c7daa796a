"""Host time: where a step's host time goes, by phase.

Reads the Timeline and the timeline room's intervals; imports no other room. Its public
results: `host_phases.host_phases` and `host_phases.host_phase_medians` (each host step cut
into data loading, forward, backward, optimizer and other) and `host_phases.kernel_phases`
(each kernel attributed to the phase of the host step that launched it), kept together as
the job's typed result `host_phases.HostPhases` (Metrics.host_phases).
"""
