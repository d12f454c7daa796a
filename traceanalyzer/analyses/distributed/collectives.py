"""Collectives matched across ranks: each rank's time in a collective split into waiting for
its peers and the transfer itself, what of each its GPU spent doing nothing else, and the
bytes and bus bandwidth of the transfers.

Job stage (it needs every rank's communication kernels). Matching: the ranks of a job issue
the same collectives in the same order on the same communicator, whose kernels run on one
NCCL stream per rank, so the n-th kernel of each collective kind on each stream of every
rank, in each step, is one collective *instance* (where the stream ids of the ranks do not
line up, the n-th of each kind on each rank in each step). An instance counts where every
rank with communication took part; the rest (a sub-group's collective, and point-to-point
send/recv in a job of more than two ranks where the ranks run different numbers of them in a
step: pipeline stages, whose pairs the order does not tell) stay unmatched: all of their
time is transfer.

The split of a participant's kernel, [start, end):

- all participants leave a collective together, so the rank that arrived last has the
  shortest kernel; its duration, `transfer_ns`, is the transfer itself, and every other
  rank's extra time, `wait_ns` = duration - transfer_ns, is waiting for the last rank to
  arrive (it sits at the kernel's start: [start, start + wait_ns)). Durations, not
  timestamps, are compared, so host clocks that disagree between ranks do not matter.
- `exposed_wait_ns` / `exposed_transfer_ns`: the part of each during which no other
  (non-communication) kernel ran on the rank's device: that time costs the step whole.
- `crowded_wait_ns`: waiting while other kernels ran beside the collective (the backward
  pass still computing) is not free either: the waiting kernel holds its SMs (`sm_share`,
  its blocks over the device's SMs) away from that compute, so it costs that share of the
  overlapped wait.

Bytes follow NCCL's conventions (`S`, the collective's size: an all-gather's output, a
reduce-scatter's input, an all-reduce's buffer), from the message recorded on the kernel
(`msg_nelems` x the dtype's size, the rank's input). Bus bandwidth (NCCL's `busbw`) is
`S / transfer time` times the collective's factor: all-reduce 2(n-1)/n, all-gather,
reduce-scatter and all-to-all (n-1)/n, others 1, n the ranks in the instance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyzer.analyses.distributed.overlap import DTYPE_BYTES
from traceanalyzer.analyses.timeline.intervals import busy_before, union
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, StepCounts
from traceanalyzer.model.meta import DeviceInfo

#: What each rank hands on of its communication kernels (inside its windows).
COMM_COLUMNS = (
    "rank",
    "device",
    "stream",
    "step",
    "start_ns",
    "end_ns",
    "collective_kind",
    "is_comm",
    "msg_nelems",
    "msg_dtype",
    "sm_share",
)

#: A matching key whose instances hold fewer than this share of the communication kernels
#: is not the job's (stream ids that differ between ranks): the kernels are matched by kind.
MIN_MATCHED_SHARE = 0.5


def bus_factor(kind: pl.Expr, n: pl.Expr) -> pl.Expr:
    """NCCL's bus-bandwidth factor of a collective of `n` ranks."""
    return (
        pl.when(kind == "all_reduce")
        .then(2 * (n - 1) / n)
        .when(kind.is_in(["all_gather", "reduce_scatter", "all_to_all"]))
        .then((n - 1) / n)
        .otherwise(1.0)
    )


def size_bytes(kind: pl.Expr, in_bytes: pl.Expr, n: pl.Expr) -> pl.Expr:
    """NCCL's `S` of a collective from one rank's input message: an all-gather's output is
    n inputs; every other collective's size is its input."""
    return pl.when(kind == "all_gather").then(in_bytes * n).otherwise(in_bytes)


def with_sm_share(comm: pl.DataFrame, devices: Sequence[DeviceInfo]) -> pl.DataFrame:
    """`comm` (kernels with `grid`) with `sm_share`: the share of its device's SMs the kernel
    holds (its blocks over the SM count, at most 1; NCCL runs one block per channel, each on
    an SM of its own, for as long as the kernel runs, waiting included); null where the
    trace gives no grid or SM count."""
    sms = pl.DataFrame(
        {
            "rank": [d.rank for d in devices],
            "device": [d.device for d in devices],
            "_sms": [d.sm_count for d in devices],
        },
        schema={"rank": pl.Int32, "device": pl.Int32, "_sms": pl.Int64},
    ).unique(["rank", "device"])
    blocks = (
        pl.col("grid")
        .list.eval(pl.element().cast(pl.Int64))
        .list.eval(pl.element().product())
        .list.first()
    )
    return (
        comm.join(sms, on=DEVICE_KEY, how="left")
        .with_columns(
            sm_share=pl.when(pl.col("_sms") > 0).then(
                (blocks / pl.col("_sms")).clip(upper_bound=1.0)
            )
        )
        .drop("_sms")
    )


def compute_near_comm(kernels: pl.DataFrame) -> pl.DataFrame:
    """The union of a rank's non-communication kernels, only its intervals that overlap a
    communication kernel (what the job stage needs to tell exposed waits and transfers):
    rank, device, start_ns, end_ns, busy_before_ns (summed length of the kept intervals
    before each, per device: differences of `busy_before` look-ups inside one communication
    kernel are exact, since every interval that overlaps it is kept).

    `kernels`: kernels inside the windows with `is_comm`."""
    cols = [*DEVICE_KEY, "start_ns", "end_ns"]
    comm = kernels.filter(pl.col("is_comm")).select(cols)
    if comm.height == 0:
        return kernels.clear().select(cols).with_columns(busy_before_ns=pl.lit(0, pl.Int64))
    compute = union(kernels.lazy().filter(~pl.col("is_comm")).select(cols), DEVICE_KEY)
    comm_union = union(comm.lazy(), DEVICE_KEY)
    length = pl.col("end_ns") - pl.col("start_ns")
    return (
        busy_before(
            busy_before(compute, comm_union, DEVICE_KEY, "start_ns"),
            comm_union,
            DEVICE_KEY,
            "end_ns",
        )
        .filter(pl.col("end_ns_busy_ns") > pl.col("start_ns_busy_ns"))
        .select(cols)
        .sort(cols)
        .with_columns(busy_before_ns=length.cum_sum().over(DEVICE_KEY) - length)
        .collect()
    )


@dataclass(frozen=True, slots=True)
class CollectiveSplit:
    """Every rank's time in collectives, split (see the module docstring).

    - `kernels`: one row per communication kernel: rank, device, step, stream, collective,
      instance (null where unmatched), ranks (participants), start_ns, end_ns, dur_ns,
      wait_ns, transfer_ns, exposed_wait_ns, exposed_transfer_ns, crowded_wait_ns,
      size_bytes (NCCL's S,
      null where the message was not recorded), bus_factor.
    - `per_rank`: rank, collectives, matched, comm_ns, wait_ns, transfer_ns,
      exposed_wait_ns, crowded_wait_ns, exposed_transfer_ns, bytes, busbw_gbps (of the
      matched collectives: S x factor summed over the
      transfers that recorded a size, over their transfer time; null where none did).
    - `per_kind`: the same per (rank, collective).
    - `per_step`: rank, step, wait_ns, exposed_wait_ns, crowded_wait_ns,
      exposed_transfer_ns.
    """

    kernels: pl.DataFrame
    per_rank: pl.DataFrame
    per_kind: pl.DataFrame
    per_step: pl.DataFrame

    @property
    def matched(self) -> bool:
        """Whether any collective was matched across ranks."""
        return bool(self.kernels["instance"].is_not_null().any())


def _instances(comm: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """`comm` with instance (an id per matched instance, else null) and ranks (participants),
    the n-th kernel of each `keys` group of every rank being one instance."""
    world = comm["rank"].n_unique()
    seq = pl.int_range(pl.len()).over("rank", *keys)
    ordered = comm.sort("rank", *keys, "start_ns").with_columns(_seq=seq)
    group = [*keys, "_seq"]
    return ordered.with_columns(
        ranks=pl.col("rank").n_unique().over(group).cast(pl.Int64),
        _n=pl.len().over(group),
    ).with_columns(
        instance=pl.when((pl.col("_n") == world) & (pl.col("ranks") == world) & (world > 1)).then(
            pl.struct(group).rank("dense").cast(pl.Int64) - 1
        )
    )


def split(comm: pl.DataFrame, compute: pl.DataFrame) -> CollectiveSplit:
    """Match every rank's communication kernels into collective instances and split their time
    (see the module docstring). `comm`: COMM_COLUMNS of every rank; `compute`: every rank's
    `compute_near_comm`."""
    comm = comm.filter(pl.col("is_comm")).with_columns(pl.col("collective_kind").cast(pl.String))
    world = comm["rank"].n_unique()
    # point-to-point: a send pairs with one peer's receive. Where every rank runs as many
    # send/recv kernels in a step (an all-to-all made of sends and receives, DLRM's), the
    # n-th of each rank is one exchange; where the counts differ (pipeline stages), the
    # order tells no pairs: unmatched
    per_rank = pl.len().over("step", "rank", "collective_kind")
    uneven = (
        per_rank.min().over("step", "collective_kind")
        != per_rank.max().over("step", "collective_kind")
    ) | (pl.col("rank").n_unique().over("step", "collective_kind") < world)
    comm = comm.with_columns(_p2p=(pl.col("collective_kind") == "send_recv") & uneven & (world > 2))
    # the n-th collective of each step: a rank whose window holds a step the others' do not
    # cannot shift every later match
    by_stream = _instances(comm, ["step", "stream", "collective_kind"])
    matched = by_stream["instance"].is_not_null().sum()
    rows = by_stream
    if comm.height and matched < MIN_MATCHED_SHARE * comm.height:
        by_kind = _instances(comm, ["step", "collective_kind"])
        if by_kind["instance"].is_not_null().sum() > matched:
            rows = by_kind
    rows = rows.with_columns(
        instance=pl.when(~pl.col("_p2p")).then(pl.col("instance")),
        ranks=pl.when(~pl.col("_p2p")).then(pl.col("ranks")).otherwise(1),
    )
    dur = pl.col("end_ns") - pl.col("start_ns")
    in_bytes = pl.col("msg_nelems") * pl.col("msg_dtype").cast(pl.String).replace_strict(
        DTYPE_BYTES, default=None, return_dtype=pl.Int64
    )
    kind = pl.col("collective")
    timed = (
        rows.with_columns(dur_ns=dur)
        .with_columns(
            transfer_ns=pl.when(pl.col("instance").is_not_null())
            .then(pl.col("dur_ns").min().over("instance"))
            .otherwise(pl.col("dur_ns"))
        )
        .with_columns(
            wait_ns=pl.col("dur_ns") - pl.col("transfer_ns"),
            n=pl.when(pl.col("instance").is_not_null()).then(pl.col("ranks")).otherwise(1),
        )
        .with_columns(w_end=pl.col("start_ns") + pl.col("wait_ns"))
        .rename({"collective_kind": "collective"})
    )
    looked = timed
    for at in ("start_ns", "w_end", "end_ns"):
        looked = busy_before(looked.lazy(), compute.lazy(), DEVICE_KEY, at).collect()
    kernels = looked.select(
        "rank",
        "device",
        "step",
        "stream",
        "collective",
        "instance",
        ranks=pl.when(pl.col("instance").is_not_null()).then(pl.col("ranks")).otherwise(1),
        start_ns="start_ns",
        end_ns="end_ns",
        dur_ns="dur_ns",
        wait_ns="wait_ns",
        transfer_ns="transfer_ns",
        exposed_wait_ns=pl.col("wait_ns") - (pl.col("w_end_busy_ns") - pl.col("start_ns_busy_ns")),
        exposed_transfer_ns=pl.col("transfer_ns")
        - (pl.col("end_ns_busy_ns") - pl.col("w_end_busy_ns")),
        crowded_wait_ns=(
            (pl.col("w_end_busy_ns") - pl.col("start_ns_busy_ns")) * pl.col("sm_share")
        )
        .round()
        .cast(pl.Int64)
        .fill_null(0),
        size_bytes=size_bytes(kind, in_bytes, pl.col("n")),
        bus_factor=bus_factor(kind, pl.col("n").cast(pl.Float64)),
    ).sort("rank", "start_ns", "stream")
    return CollectiveSplit(
        kernels=kernels,
        per_rank=_totals(kernels, ["rank"]),
        per_kind=_totals(kernels, ["rank", "collective"]),
        # kernels launched outside every step (no step markers: the window is step 0)
        per_step=kernels.with_columns(pl.col("step").fill_null(0))
        .group_by("rank", "step")
        .agg(pl.col("wait_ns", "exposed_wait_ns", "crowded_wait_ns", "exposed_transfer_ns").sum())
        .sort("rank", "step"),
    )


def _totals(kernels: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    # bus bandwidth needs the instance's ranks (n): of matched collectives only
    sized = (
        pl.col("size_bytes").is_not_null()
        & (pl.col("transfer_ns") > 0)
        & pl.col("instance").is_not_null()
    )
    bus_bytes = (pl.col("size_bytes") * pl.col("bus_factor")).filter(sized).sum()
    return (
        kernels.group_by(by)
        .agg(
            collectives=pl.len().cast(pl.Int64),
            matched=pl.col("instance").is_not_null().sum().cast(pl.Int64),
            comm_ns=pl.col("dur_ns").sum(),
            wait_ns=pl.col("wait_ns").sum(),
            transfer_ns=pl.col("transfer_ns").sum(),
            exposed_wait_ns=pl.col("exposed_wait_ns").sum(),
            crowded_wait_ns=pl.col("crowded_wait_ns").sum(),
            exposed_transfer_ns=pl.col("exposed_transfer_ns").sum(),
            bytes=pl.when(sized.any()).then(pl.col("size_bytes").filter(sized).sum()),
            busbw_gbps=pl.when(sized.any()).then(
                bus_bytes / pl.col("transfer_ns").filter(sized).sum()
            ),
        )
        .sort(by)
    )


@dataclass(frozen=True, slots=True)
class OverlapImpact:
    """What overlapping one device's exposed communication with compute saves (TA007's impact
    model, `overlap_impact`).

    - `window_ns`, `comm_ns`, `exposed_ns`, `overlap_share`, `busy_ns`: the device's window,
      communication, communication with no compute beside it, the share of communication
      that overlaps compute, and its busy time (Metrics.devices);
    - `collectives`: its collectives (collective, count, total_ns, exposed_ns), most exposed
      first;
    - `wait_ns`, `exposed_wait_ns`, `exposed_transfer_ns`: the rank's time in collectives
      waiting for the last rank, the part of it with nothing beside it, and its transfers
      with nothing beside them (None where no collective was matched across ranks);
      `busbw_gbps`: the rank's bus bandwidth (CollectiveSplit.per_rank);
    - `hideable_ns`: what overlap can hide: the exposed transfers (all the exposed
      communication where the collectives are not matched);
    - `compute_alone_ns`: busy time less communication: the compute a transfer can hide
      under;
    - `path_saving_ns`: the `exposed_comm_hidden` what-if's mean saving per step;
    - `impact_ns`: min(hideable, compute alone) per steady step; `ceiling_ns`: min(exposed,
      compute alone) per steady step (None without steps).
    """

    rank: int
    device: int
    window_ns: int
    comm_ns: int
    exposed_ns: int
    overlap_share: float | None
    busy_ns: int
    collectives: tuple[dict[str, Any], ...]
    wait_ns: int | None
    exposed_wait_ns: int | None
    exposed_transfer_ns: int | None
    busbw_gbps: float | None
    hideable_ns: int
    compute_alone_ns: int
    path_saving_ns: int | None
    impact_ns: int | None
    ceiling_ns: int | None


def overlap_impact(
    devices: pl.DataFrame,
    collectives: pl.DataFrame,
    split: CollectiveSplit,
    savings: Mapping[tuple[int, str], int],
    counts: StepCounts,
) -> tuple[OverlapImpact, ...]:
    """Each device's OverlapImpact, in the order of `devices` (Metrics.devices.summary).

    What overlap can hide is the transfers that ran with nothing beside them; the waits for
    a slower rank (TA008's) stay whatever overlaps them. Overlap hides a transfer under
    compute that runs beside it: no more than the compute that runs alone now (the rest
    already hides communication), so the price is min(hideable, compute alone) and the
    ceiling min(exposed, compute alone), per steady step.

    `collectives`: Metrics.communication.collectives; `split`: the collectives matched across ranks;
    `savings`: the what-ifs' mean savings; `counts`: the steps each device's window holds."""
    matched = split.matched
    per_rank = {r["rank"]: r for r in split.per_rank.iter_rows(named=True)}
    out = []
    for d in devices.iter_rows(named=True):
        rank, device = d["rank"], d["device"]
        comm, exposed = d["comm_ns"] or 0, d["exposed_comm_ns"] or 0
        colls = collectives.filter((pl.col("rank") == rank) & (pl.col("device") == device)).sort(
            ["exposed_ns", "collective"], descending=[True, False], nulls_last=True
        )
        mine = per_rank.get(rank) or {}
        transfer = mine.get("exposed_transfer_ns") if matched else None
        hideable = exposed if transfer is None else min(exposed, transfer)
        beside = max(0, (d["busy_ns"] or 0) - comm)
        out.append(
            OverlapImpact(
                rank=rank,
                device=device,
                window_ns=d["window_ns"],
                comm_ns=comm,
                exposed_ns=exposed,
                overlap_share=d["overlap_share"],
                busy_ns=d["busy_ns"] or 0,
                collectives=tuple(
                    {
                        "collective": str(c["collective"]),
                        "count": c["count"],
                        "total_ns": c["total_ns"],
                        "exposed_ns": c["exposed_ns"],
                    }
                    for c in colls.iter_rows(named=True)
                ),
                wait_ns=mine.get("wait_ns") if matched else None,
                exposed_wait_ns=mine.get("exposed_wait_ns") if matched else None,
                exposed_transfer_ns=transfer,
                busbw_gbps=mine.get("busbw_gbps"),
                hideable_ns=hideable,
                compute_alone_ns=beside,
                path_saving_ns=savings.get((rank, "exposed_comm_hidden")),
                impact_ns=counts.per_step(min(hideable, beside), rank, device),
                ceiling_ns=counts.per_step(min(exposed, beside), rank, device),
            )
        )
    return tuple(out)
