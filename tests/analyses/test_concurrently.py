"""The rank results run on a few threads, no more than two heavy ones at once."""

from __future__ import annotations

import threading
import time

import polars as pl
import pytest

from traceanalyzer.analyses.distributed import rank


def test_heavy_results_never_run_more_than_the_limit_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rank, "ANALYSIS_THREADS", 4)
    monkeypatch.setattr(pl, "thread_pool_size", lambda: 4)
    monkeypatch.setattr(rank, "HEAVY", ("h1", "h2", "h3", "h4"))
    monkeypatch.setattr(rank, "HEAVY_AT_ONCE", 2)
    lock = threading.Lock()
    running: set[str] = set()
    most_heavy = most = 0
    order: list[str] = []

    def task(name: str) -> str:
        nonlocal most_heavy, most
        with lock:
            order.append(name)
            running.add(name)
            most = max(most, len(running))
            most_heavy = max(most_heavy, sum(n.startswith("h") for n in running))
        time.sleep(0.05)
        with lock:
            running.discard(name)
        return name.upper()

    names = ["l1", "h3", "l2", "h1", "l3", "h2", "l4", "h4", "l5"]
    done = rank.concurrently({n: (lambda n=n: task(n)) for n in names})
    assert done == {n: n.upper() for n in names}
    assert list(done) == names  # in the order given, whatever order they ran in
    assert most_heavy == 2  # the limit, reached
    assert most == 4  # light ones fill the other threads
    assert set(order[:4]) == {"h1", "h2", "l1", "l2"}  # heavy first, then light ones
    assert order.index("h3") > order.index("l1")  # h3 waited for one of h1, h2 to end


def test_one_thread_runs_every_result_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pl, "thread_pool_size", lambda: 1)
    seen: list[str] = []
    done = rank.concurrently({n: (lambda n=n: seen.append(n) or n) for n in ("phases", "a")})
    assert done == {"phases": "phases", "a": "a"}
    assert seen == ["phases", "a"]
