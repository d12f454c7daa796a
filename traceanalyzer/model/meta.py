"""TraceMeta: what we know about a trace besides its events."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One GPU as the trace describes it (Kineto `deviceProperties`, Nsight target info)."""

    rank: int
    device: int
    name: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    #: the SM's limits on resident work (occupancy), where the trace records them
    max_threads_per_sm: int | None = None
    max_blocks_per_sm: int | None = None
    regs_per_sm: int | None = None
    shared_mem_per_sm: int | None = None
    #: the SM clock's maximum, Hz (Nsight's TARGET_INFO_GPU.clockRate), where recorded
    max_clock_hz: int | None = None


@dataclass(frozen=True, slots=True)
class RankInfo:
    """One rank of a job, and how its number was found."""

    rank: int
    rank_source: str  # "distributedInfo", "file name" or "default"
    path: str
    world_size: int | None = None


@dataclass(frozen=True, slots=True)
class DataQuality:
    """What the reader had to drop or could not read, so findings can say so.

    `dropped` maps a reason ("zero timestamp", "category cuda_profiler_range", ...) to an
    event count. `truncated_files` lists inputs that ended mid-event; the whole events before
    the cut were kept.
    """

    truncated_files: tuple[str, ...] = ()
    #: files of a rank folder that look like traces but could not be read: "path: why"
    skipped_files: tuple[str, ...] = ()
    dropped: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: GPU events (kernels, copies, memsets) among the dropped ones, and one's name
    dropped_gpu: int = 0
    dropped_gpu_example: str | None = None
    #: GPU events read (where the reader counts them: Chrome traces)
    gpu_events: int = 0

    @property
    def truncated(self) -> bool:
        """True when at least one input was cut off."""
        return bool(self.truncated_files)


@dataclass(frozen=True, slots=True)
class PageFaults:
    """Unified-memory page faults one rank's process took over the whole capture (Nsight
    Systems with `--cuda-um-gpu-page-faults` / `--cuda-um-cpu-page-faults`): `gpu_groups`
    rows of GPU faults (one per page and burst) holding `gpu_faults` faults on `device`, and
    `cpu_faults` host faults (device None where the row counts only those)."""

    rank: int
    device: int | None
    gpu_groups: int = 0
    gpu_faults: int = 0
    cpu_faults: int = 0


@dataclass(frozen=True, slots=True)
class TraceMeta:
    """Source, producer, ranks, devices and data quality of one (possibly multi-rank) trace."""

    path: str
    format: str  # "chrome" or "nsys-sqlite"
    producer: str | None = None
    producer_version: str | None = None
    ranks: tuple[RankInfo, ...] = ()
    devices: tuple[DeviceInfo, ...] = ()
    quality: DataQuality = field(default_factory=DataQuality)
    page_faults: tuple[PageFaults, ...] = ()
