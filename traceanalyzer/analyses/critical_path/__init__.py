"""Critical path: each step's dependency graph, its edges, and the longest-path solver.

Reads the Timeline, the timeline room's windows and the gpu room's classes, operators,
devices and idle gaps. Its public results:

- `critical_path.CriticalPaths` (`critical_path.critical_paths`, `critical_path.per_rank`,
  `critical_path.mean_savings`): what bounds each step and what each fix would save;
  `critical_path.CriticalPath`: their steps and what-ifs, the job's typed result
  (Metrics.critical_path);
- `critical_graph.GraphInputs` / `critical_graph.GraphTables`: the graph's nodes and edges;
- `critical_edges`: the edge roles (`EDGE_KINDS`, `ROLES`) and their tables;
- `longest_path`: the solver (compiled with numba for large graphs).
"""
