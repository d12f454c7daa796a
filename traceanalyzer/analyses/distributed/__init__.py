"""Ranks and the job: the rank stage, the job stage, and the collectives across ranks.

The orchestrating room: `rank.analyze_rank` runs every other room on one rank's events and
returns a `rank.RankPart`; `job.combine` merges the ranks' parts into `Metrics`. Its public
results besides: `collectives.CollectiveSplit` and `collectives.OverlapImpact` (collectives
matched across ranks, their time split into waiting and transfer, and what overlapping them
saves), `overlap.comm_overlap` (how far communication overlaps compute),
`overlap.Communication` (Metrics.communication: each device's collectives and each rank's
wait inside them) and
`imbalance.RankBalance` (each rank's own time per step and the slowest rank).
"""
