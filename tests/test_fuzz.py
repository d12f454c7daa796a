"""Fuzz suite: generated Chrome traces and Nsight SQLite exports, valid and broken.

The property, for every case: `traceanalyzer report` exits 0, 1 or 2, never with a traceback
(exit 3); the input is not changed; the output file is complete JSON when the run succeeded
and absent when it did not. The case counts and the seed are fixed, so CI runs the same
cases every time (CASES_CHROME + CASES_NSYS, see the settings below).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.builders import kineto_bytes  # noqa: E402
from traceanalyzer.cli import cli  # noqa: E402

CASES_CHROME = 200
CASES_NSYS = 60
SEED = 20261123
NSYS_SQL = Path(__file__).parent / "data" / "nsys" / "two_ranks.sql"

FUZZ = settings(
    max_examples=CASES_CHROME,
    derandomize=False,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# ------------------------------------------------------------------------ values

#: Numbers a producer (or a damaged file) may write where a time, id or size goes.
numbers = st.one_of(
    st.integers(min_value=-5, max_value=2_000),
    st.floats(min_value=-10, max_value=5e3, allow_nan=False),
    st.sampled_from([0, 1e18, 1e26, -1e26, 2**63, 1712195495519689.047, 4476047788645.79]),
)
hostile = st.one_of(
    numbers,
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.sampled_from(["7", "stream 7", "0x1f", "", "NaN", "1e3"]),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.sampled_from(["a", "device"]), st.integers(0, 3), max_size=2),
)
names = st.one_of(
    st.sampled_from(
        [
            "ProfilerStep#1",
            "ProfilerStep#2",
            "cudaLaunchKernel",
            "cudaStreamSynchronize",
            "cudaMemcpyAsync",
            "ampere_sgemm_128x64_nn",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "void at::native::vectorized_elementwise_kernel<4>",
            "Memcpy HtoD (Pageable -> Device)",
            "[memory]",
            "<unnamed>",
        ]
    ),
    st.text(max_size=12),
)
cats = st.sampled_from(
    [
        "kernel",
        "Kernel",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_runtime",
        "cuda_driver",
        "cpu_op",
        "user_annotation",
        "gpu_user_annotation",
        "python_function",
        "cpu_instant_event",
        "ac2g",
        "Trace",
        "weird",
    ]
)


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    """One event: mostly well-formed Kineto fields, any of which may be hostile."""
    ts = draw(st.integers(0, 2_000))
    ev: dict[str, Any] = {
        "ph": draw(st.sampled_from(["X", "X", "X", "i", "f", "s", "M", "B"])),
        "cat": draw(cats),
        "name": draw(names),
        "pid": draw(st.sampled_from([0, 1, 1, "0", "host"])),
        "tid": draw(st.sampled_from([7, 1, 1, "stream 7", 8])),
        "ts": ts,
        "dur": draw(st.integers(0, 200)),
        "args": {
            "correlation": draw(st.integers(0, 6)),
            "device": draw(st.sampled_from([0, 0, 1])),
            "stream": draw(st.sampled_from([7, 7, 8])),
            "External id": draw(st.integers(0, 6)),
        },
    }
    top = st.sampled_from(["ts", "dur", "pid", "tid", "name", "cat"])
    for key in draw(st.lists(top, max_size=2)):
        ev[key] = draw(hostile)
    for key in draw(
        st.lists(
            st.sampled_from(
                ["correlation", "device", "stream", "grid", "Input Dims", "Total Allocated"]
            ),
            max_size=2,
        )
    ):
        ev["args"][key] = draw(hostile)
    if draw(st.integers(0, 15)) == 0:
        ev.pop(draw(st.sampled_from(["ts", "dur", "args", "ph", "cat", "name"])), None)
    return ev


@st.composite
def chrome_files(draw: st.DrawFn) -> bytes:
    """A whole file: Kineto's layout, compact JSON, or a damaged one."""
    evs = draw(st.lists(events(), min_size=0, max_size=24))
    header: dict[str, Any] = {"schemaVersion": 1}
    if draw(st.booleans()):
        header["deviceProperties"] = [{"id": draw(st.sampled_from([0, 9])), "name": "GPU"}]
    if draw(st.booleans()):
        header["distributedInfo"] = {"rank": draw(hostile), "world_size": 2}
    layout = draw(st.sampled_from(["kineto", "compact", "array", "dict_events", "no_events"]))
    if layout == "kineto":
        data = kineto_bytes(evs, header)
    elif layout == "compact":
        data = json.dumps({**header, "traceEvents": evs}, separators=(",", ":")).encode()
    elif layout == "array":
        data = json.dumps(evs).encode()
    elif layout == "dict_events":
        data = json.dumps({**header, "traceEvents": {"0": evs[:1]}}).encode()
    else:
        data = json.dumps(header).encode()
    damage = draw(
        st.sampled_from(
            ["none", "none", "none", "truncate", "bytes", "bom", "crlf", "utf16", "deep"]
        )
    )
    if damage == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "bytes" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at + 1 :]
    elif damage == "bom":
        data = b"\xef\xbb\xbf" + data
    elif damage == "crlf":
        data = data.replace(b"\n", b"\r\n")
    elif damage == "utf16":
        data = data.decode("utf-8", "replace").encode(
            draw(st.sampled_from(["utf-16", "utf-16-be"]))
        )
        if not data.startswith((b"\xff\xfe", b"\xfe\xff")):
            data = b"\xfe\xff" + data
    elif damage == "deep":  # an args value nested far deeper than any parser recurses
        depth = draw(st.sampled_from([1_000, 100_000]))
        deep = b'{"ph":"X","cat":"cpu_op","name":"d","pid":1,"tid":1,"ts":5,"dur":1,"args":'
        deep += b'{"a":' * depth + b"1" + b"}" * depth + b"}"
        data = b'{"traceEvents":[' + deep + b"]}"
    if draw(st.integers(0, 4)) == 0:
        data = gzip.compress(data)
        if draw(st.booleans()):
            data = data[: max(1, len(data) - draw(st.integers(1, 40)))]
    return data


# ------------------------------------------------------------------------ the property


def _check_report(tmp_path: Path, name: str, data: bytes, case: int) -> None:
    """Run `report` on `data`; assert the property."""
    folder = tmp_path / f"case{case}"
    folder.mkdir()
    trace = folder / name
    trace.write_bytes(data)
    out = folder / "out.json"
    result = CliRunner().invoke(cli, ["report", str(trace), "--format", "json", "-o", str(out)])
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert trace.read_bytes() == data  # the input is never changed
    EXIT_CODES[result.exit_code] += 1
    if result.exit_code == 2:
        assert result.stderr.startswith("error: "), result.stderr
        assert not out.exists()  # nothing written half-way
    else:
        json.loads(out.read_bytes())  # complete
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        {name, "out.json"} if out.exists() else {name}
    )  # nothing left beside the input


#: How often each exit status came up (shown with `pytest -s`: the cases are not all refused).
EXIT_CODES: Counter[int] = Counter()


class _Counter:
    n = 0


@seed(SEED)
@FUZZ
@given(data=chrome_files())
def test_chrome_traces(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    _Counter.n += 1
    _check_report(tmp_path_factory.mktemp("chrome"), "trace.json", data, _Counter.n)


# ------------------------------------------------------------------------ Nsight exports

_SQL_MUTATIONS = [
    "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL",
    "DROP TABLE StringIds",
    "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME",
    "DROP TABLE TARGET_INFO_GPU",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL",
    'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 5',
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon'",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 999",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = NULL",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = -1",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9223372036854775000",
    "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL",
    "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 12345",
    "DELETE FROM StringIds WHERE id % 2 = 0",
    "UPDATE StringIds SET value = ''",
    "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN start TO begin",
    "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN extra TEXT",
    "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "DELETE FROM META_DATA_EXPORT",
]


@st.composite
def nsys_exports(draw: st.DrawFn) -> tuple[list[str], str, int, bytes]:
    """SQL mutations of a valid export, then a file-level damage (none, truncation, bytes)."""
    mutations = draw(st.lists(st.sampled_from(_SQL_MUTATIONS), max_size=3, unique=True))
    damage = draw(st.sampled_from(["none", "none", "truncate", "bytes"]))
    return mutations, damage, draw(st.integers(0, 10**9)), draw(st.binary(min_size=1, max_size=8))


@seed(SEED)
@settings(FUZZ, max_examples=CASES_NSYS)
@given(case=nsys_exports())
def test_nsys_exports(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[str], str, int, bytes]
) -> None:
    mutations, damage, where, junk = case
    tmp = tmp_path_factory.mktemp("nsys")
    db = tmp / "build.sqlite"
    con = sqlite3.connect(db)
    con.executescript(NSYS_SQL.read_text())
    for stmt in mutations:
        with contextlib.suppress(sqlite3.Error):  # made moot by an earlier one (a dropped table)
            con.execute(stmt)
    con.commit()
    con.close()
    data = db.read_bytes()
    if damage == "truncate":
        data = data[: 100 + where % max(1, len(data) - 100)]
    elif damage == "bytes":
        at = 100 + where % max(1, len(data) - 100)
        data = data[:at] + junk + data[at + len(junk) :]
    _Counter.n += 1
    _check_report(tmp, "run.sqlite", data, _Counter.n)
