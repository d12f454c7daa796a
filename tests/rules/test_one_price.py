"""One interval, one price; one cause, one finding (`rules/one_price.py`): a rule that fires
on several ranks is one finding listing them, priced by its worst rank; a straggler's stall
and the others' wait for it, or a pageable copy and the sync that is its wait, are one
finding with the other as its evidence. Small files shaped like each case, and the two-rank
H200 jobs of the corpus against their measured truths."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from traceanalyzer import api
from traceanalyzer.rules.base import Finding, Scope, Severity
from traceanalyzer.rules.examples import (
    Event,
    cpu_op,
    device_properties,
    gpu_op,
    launch,
    launched,
    on_rank,
    step,
    synchronize,
    write_example,
)
from traceanalyzer.rules.one_price import one_price


def _starved(gap_us: float) -> list[Event]:
    """Four steps of 40 µs of kernels after `gap_us` of host work each."""
    events: list[Event] = [device_properties()]
    t, corr = 100.0, 1
    for n in range(1, 5):
        start = t
        t += gap_us
        for k in range(4):
            events += launched(t + k * 12, t + k * 12 + 4, 10, corr, "gemm_kernel")
            corr += 1
        t += 60
        events.append(step(n, start, t - start))
        t += 1
    return events


def test_a_cause_on_every_rank_is_one_finding(tmp_path: Path) -> None:
    """Both ranks starved by their host: one TA001, scoped to the job, priced by the worst
    rank (not the sum), every rank's figures in its evidence."""
    job = write_example(
        on_rank(0, _starved(400)) + on_rank(1, _starved(200)), tmp_path, "both_starved"
    )
    rep = api.report(job)
    (f,) = [f for f in rep.findings if f.rule == "TA001"]
    assert f.scope.rank is None and f.evidence["ranks"] == [0, 1]
    per_rank = {r["rank"]: r["impact_ns"] for r in f.evidence["per_rank"]}
    assert f.impact_ns == max(per_rank.values()) and per_rank[0] > per_rank[1] > 0
    assert "the same on rank 1" in f.message
    doc = rep.to_json_dict()
    assert [d["rule"] for d in doc["diagnoses"]].count("TA001") == 1


def _copy_step() -> list[Event]:
    """A 21 MB copy from pageable memory (4.33 ms at 4.8 GB/s) and 0.19 ms of kernels a step,
    on a PCIe 3.0 card: the copy's blocking call and its stream sync are the copy's wait."""
    events: list[Event] = [device_properties(68, 7, 5, "NVIDIA GeForce RTX 2080 Ti")]
    t, corr = 100.0, 1
    for n in range(1, 5):
        start = t
        events += [cpu_op(t, 4400, "aten::to"), cpu_op(t + 5, 4390, "aten::copy_")]
        events.append(launch(t + 10, 4350, corr, name="cudaMemcpyAsync"))
        events.append(
            gpu_op(
                "gpu_memcpy",
                t + 15,
                4330,
                "Memcpy HtoD (Pageable -> Device)",
                corr=corr,
                bytes=21_000_000,
            )
        )
        events.append(synchronize(t + 4365, 20, "cudaStreamSynchronize"))
        corr += 1
        t += 4400
        for k in range(10):
            events += launched(t + k * 40, t + k * 40 + 10, 19, corr, "elementwise_kernel")
            corr += 1
        t += 450
        events.append(step(n, start, t - start))
        t += 10
    return events


def test_a_pageable_copy_and_its_wait_are_one_price(tmp_path: Path) -> None:
    """The issue's first case: copy-bound, priced by pinning on the card's assumed link
    (about 2.6 ms of the 4.33 ms copy), the syncs that are the copy's own wait its evidence;
    the step's prices never add up past the step."""
    rep = api.report(write_example(_copy_step(), tmp_path, "pageable_h2d"))
    assert rep.verdict is not None and rep.verdict["bound_by"] == "copy"
    rules = [f.rule for f in rep.findings]
    assert "TA002" not in rules
    (copy,) = [f for f in rep.findings if f.rule == "TA009"]
    assert copy.impact_ns is not None and 2.0e6 <= copy.impact_ns <= 3.0e6
    assert [s["rule"] for s in copy.evidence["same_interval"]] == ["TA002"]
    step_ns = rep.verdict["step_ns"]
    assert sum(f.impact_ns or 0 for f in rep.findings) <= step_ns


def _finding(rule: str, rank: int | None, impact: int, **evidence: object) -> Finding:
    return Finding(
        rule=rule,
        slug=rule.lower(),
        category="c",
        severity=Severity.WARNING,
        title=f"{rule} title",
        message=f"{rule} on rank {rank}",
        scope=Scope(rank=rank),
        impact_ns=impact,
        evidence=dict(evidence),
        advice="a",
    )


class _Ctx:
    """The two fields the pass reads."""

    def __init__(self, ranks: int) -> None:
        self.step_ns = {r: 100 for r in range(ranks)}


def test_a_subset_of_ranks_keeps_the_worst_ranks_scope() -> None:
    """On 2 of 4 ranks: one finding, scoped to its worst rank, naming both."""
    found = [_finding("TA001", 0, 10), _finding("TA001", 2, 30), _finding("TA003", 1, 5)]
    out = one_price(_Ctx(4), found)  # type: ignore[arg-type]
    assert [f.rule for f in out] == ["TA001", "TA003"]
    assert out[0].scope.rank == 2 and out[0].evidence["ranks"] == [0, 2]
    assert out[0].impact_ns == 30


def test_two_findings_of_one_rank_stay_apart() -> None:
    """A rule with two findings on one rank (two devices) is left as it is."""
    found = [_finding("TA004", 0, 10), _finding("TA004", 0, 20), _finding("TA004", 1, 5)]
    assert len(one_price(_Ctx(2), found)) == 3  # type: ignore[arg-type]


def test_the_surer_and_larger_finding_leads() -> None:
    """A straggler's host stall (TA008) and its own GPU's wait for its host (TA001): the
    larger leads; an unsure TA008 (info) never leads a warning."""
    imb = _finding("TA008", 1, 50, slowest_rank=1, cause="host")
    host = _finding("TA001", 1, 20)
    (lead,) = one_price(_Ctx(2), [imb, host])  # type: ignore[arg-type]
    assert lead.rule == "TA008" and lead.impact_ns == 50
    assert lead.evidence["same_interval"][0]["rule"] == "TA001"
    weak = dataclasses.replace(imb, severity=Severity.INFO)
    (lead,) = one_price(_Ctx(2), [weak, host])  # type: ignore[arg-type]
    assert lead.rule == "TA001" and lead.impact_ns == 20
    # a straggler slow on its GPU is not the host's stall: both stay
    gpu = _finding("TA008", 1, 50, slowest_rank=1, cause="gpu")
    assert len(one_price(_Ctx(2), [gpu, host])) == 2  # type: ignore[arg-type]
