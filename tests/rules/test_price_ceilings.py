"""Every price under its ceiling (issue 33): on every sample, every recorded GPU trace and
every corpus run, a finding priced in time names the time it claims and the most its fix
can save (`evidence.impact_ceiling_ns`, computed apart from the price), and its price does
not exceed it. A ceiling is physics or what the fix changes: overlap cannot hide more than
the compute beside it, a memory-bound kernel cannot beat its bytes at the peak bandwidth,
starvation cannot save more than the idle that is not start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rules.test_gpu_traces import CASES, _report
from tests.test_real_traces import REFUSED, _runs
from traceanalyzer import api

UNPRICED = {"none"}


def _check(doc: dict) -> None:
    per = {"steps": "step", "iterations": "iteration"}.get(doc["window"]["basis"], "window")
    for f in doc["diagnoses"]:
        assert f["impact_per"] == per, f["rule"]
        assert f["claims"], f["rule"]
        if f["impact_ns"] is None:
            continue
        assert f["claims"] not in UNPRICED, f["rule"]
        ceiling = f["evidence"].get("impact_ceiling_ns")
        assert ceiling is not None, (f["rule"], f["message"])
        assert 0 <= f["impact_ns"] <= ceiling, (f["rule"], f["impact_ns"], ceiling)


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_gpu_traces(name: str, scratch: str) -> None:
    _check(_report(name, scratch))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("ceilings"))


@pytest.mark.parametrize("run", _runs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples_and_corpus(run: Path) -> None:
    if any(key in str(run) for key in REFUSED):
        return  # refused: no GPU timeline, no price (test_real_traces checks the refusal)
    _check(api.report(run).to_json_dict())
