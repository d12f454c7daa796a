"""TRACEANALYZER_TIMINGS=1 prints where the time went, one line per stage; unset, nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from traceanalyzer import entry, parallel

STAGES = ("read", "analyze: critical path, tables", "analyze: plan", "rules", "report", "output")


def _report(tmp_path: Path, **env: str) -> str:
    trace = str(SAMPLES / "train_bf16_healthy.json.gz")
    args = ["report", trace, "--format", "json", "-o", str(tmp_path / "r.json")]
    proc = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", *args],
        env={k: v for k, v in os.environ.items() if k != "TRACEANALYZER_TIMINGS"} | env,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stderr


def test_stages_are_printed_when_asked(tmp_path: Path) -> None:
    lines = _report(tmp_path, TRACEANALYZER_TIMINGS="1").splitlines()
    pattern = re.compile(r"timing: (.+) (\d+\.\d+) -> (\d+\.\d+) \((\d+\.\d+) s\) peak (\d+) MB")
    parsed = [pattern.fullmatch(line) for line in lines]
    assert all(parsed), lines
    spans = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in parsed if m}
    assert set(STAGES) <= set(spans), lines
    starts = [a for a, _ in spans.values()]
    assert starts == sorted(starts)
    assert spans["read"][1] <= spans["rules"][0]


def test_nothing_printed_by_default(tmp_path: Path) -> None:
    assert "timing:" not in _report(tmp_path)


def _python(code: str, env: dict[str, str]) -> str:
    """What `code` prints, run by a fresh interpreter with exactly `env`."""
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_allocator_is_tuned_before_polars_loads() -> None:
    """The command sets jemalloc's purge options before polars' library loads (they are read
    once, then); a value the user set wins."""
    code = (
        "import os, sys\n"
        "import traceanalyzer.entry as entry\n"
        "assert 'polars' not in sys.modules\n"
        "entry.tune_allocator()\n"
        "print(os.environ[entry.ALLOCATOR_VARIABLE])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = _python(code, env)
    assert out == "background_thread:true,dirty_decay_ms:200,muzzy_decay_ms:0,narenas:4"
    assert _python(code, {**env, "_RJEM_MALLOC_CONF": "narenas:2"}) == "narenas:2"


def test_polars_threads_are_set_before_polars_loads() -> None:
    """All the cores up to 8, at least 8 beyond, half of them from 16 up; set before polars'
    pool is made; a value the user set wins."""
    assert [entry.polars_threads(n) for n in (1, 2, 4, 8, 12, 16, 32, 64)] == [
        1,
        2,
        4,
        8,
        8,
        8,
        16,
        32,
    ]
    code = (
        "import os, sys\n"
        "import traceanalyzer.entry as entry\n"
        "entry.tune_threads()\n"
        "import polars\n"
        "print(os.environ[entry.THREADS_VARIABLE], polars.thread_pool_size())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "POLARS_MAX_THREADS"}
    want = entry.polars_threads(parallel.usable_cores())
    assert _python(code, env).split() == [str(want), str(want)]
    assert _python(code, {**env, "POLARS_MAX_THREADS": "1"}).split() == ["1", "1"]


def test_cores_are_counted_where_there_is_no_affinity_mask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """macOS and Windows have no `os.sched_getaffinity`: every core counts there."""
    from traceanalyzer.readers import chrome_trace

    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    monkeypatch.delenv("TRACEANALYZER_READ_WORKERS", raising=False)
    assert parallel.usable_cores() == 12
    assert chrome_trace.read_workers() == 6
    # set first so that the test's end restores it (unset, a delenv would not undo
    # tune_threads' setdefault, and later tests' subprocesses would inherit it)
    monkeypatch.setenv(entry.THREADS_VARIABLE, "")
    monkeypatch.delenv(entry.THREADS_VARIABLE)
    entry.tune_threads()
    assert os.environ[entry.THREADS_VARIABLE] == "8"
