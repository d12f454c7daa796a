"""Causes: the pitfalls behind a wall, read off the trace's own signatures and priced by what
removing exactly that work saves.

Reads the Timeline, the timeline room's steps and intervals, and the GPU room's idle gaps
and classified kernels. Its public results: `signatures` (the name families each cause is
recognised by, as data), `nesting.inside` (host ranges inside others on their thread),
`host_work.host_causes` (per rank and device, the host work of each host-side cause inside
the steady steps, its calls, and the GPU idle it explains: allocator calls, compilation,
anomaly checks), `compilation.compiled_regions` (the compiled graphs' ids per step:
recompiles and graph breaks), `layout.layout_kernels` (the layout-transposing kernels around
convolutions), kept together as the job's typed result `impact.Causes` (Metrics.causes),
with each cause's impact model `impact.CauseImpact` (Metrics.cause_model).
"""
