"""Timeline: the windows and steps every other analysis reads, from the Timeline alone.

The first room of the analyses: it imports nothing of the others. Its public results:

- `windows.Steps` (the job's windows, steady and left-out steps, GPU work outside the
  windows and `windows.StepCounts`: Metrics.steps) and the step windows
  (`windows.device_windows`, `windows.device_steps`, `windows.linked_work`,
  `windows.DEVICE_KEY`): the analysed span of each device and each step projected onto GPU
  work;
- `steady.SteadyState` and `steady.StepTable`: the warm-up and outlier steps left out of the
  window;
- `startup.Startup` (Metrics.startup) and `startup.DeviceStartup`: one-time work (start-up
  that is not the loop) inside the window and the GPU idle under it;
- `steady.Periods` (Metrics.periods): the loop's period per rank;
- `clock.EarlyStarts` (Metrics.early_starts): GPU work that starts before the host call that
  launched it;
- `intervals`: the interval algebra (unions, busy time before t) the other rooms share;
- `frames.check_frames`: the check of a typed result's frames against its declared
  `SCHEMAS`, which every room's result types run when they are built.
"""
