"""Byte-level scanning of Kineto JSON with numpy: event separators and exact timestamps.

Part of the Chrome-trace reader. Everything here is vectorised over a whole block of bytes;
loops run over a handful of columns or pattern bytes, never over events.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Bytes = np.ndarray[Any, np.dtype[np.uint8]]
Positions = np.ndarray[Any, np.dtype[np.int64]]

#: `},` newline, indentation, `{`: the separator between two events in Kineto's layout.
#: A raw newline cannot occur inside a JSON string, so a match is structural.
_SEPARATOR = re.compile(rb"\},\n( *)\{")

_TS_KEY = int.from_bytes(b'"ts"', "little")
#: Bytes looked at after `"ts":`: an optional space, up to 17 integer digits, `.`, 3 digits.
_TS_WINDOW = 22


def find(arr: Bytes, pattern: bytes) -> Positions:
    """Start positions of `pattern` (at least 4 bytes) in `arr`, ascending.

    The first 4 bytes are matched as little-endian uint32 words at each of the 4 alignments
    (4 cheap passes instead of one comparison per pattern byte); the rest are checked at the
    few candidate positions.
    """
    n = arr.size
    key = int.from_bytes(pattern[:4], "little")
    hits = []
    for off in range(4):
        words = (n - off) // 4
        if words > 0:
            view = arr[off : off + 4 * words].view("<u4")
            hits.append(np.flatnonzero(view == key).astype(np.int64) * 4 + off)
    pos = np.sort(np.concatenate(hits)) if hits else np.zeros(0, np.int64)
    pos = pos[pos + len(pattern) <= n]
    for i in range(4, len(pattern)):
        pos = pos[arr[pos + i] == pattern[i]]
    return pos


class EventSplitter:
    """Turns Kineto's indented JSON into NDJSON, one event per line, in place."""

    def __init__(self) -> None:
        self.separator: bytes | None = None
        self._mask = np.zeros(0, dtype=bool)

    def split_in_place(self, buf: bytearray, n: int) -> tuple[int, int] | None:
        """Rewrite the whole events at the front of `buf[:n]` as NDJSON.

        Returns (end of the NDJSON, start of the rest), or None when `buf[:n]` holds no
        separator (yet): the caller reads more, or hands the rest to the exact scanner.
        """
        if self.separator is None:
            match = _SEPARATOR.search(buf, 0, n)
            if match is None:
                return None
            self.separator = match.group(0)
        sep = self.separator
        arr = np.frombuffer(buf, dtype=np.uint8, count=n)
        at = find(arr, sep)
        if at.size == 0:
            return None
        last = int(at[-1])
        out = arr[: last + 1]
        if self._mask.size < out.size:
            self._mask = np.zeros(max(out.size, 2 * self._mask.size), dtype=bool)
        mask = self._mask[: out.size]
        np.equal(out, 10, out=mask)
        np.copyto(out, 32, where=mask)  # fold each multi-line event onto one line
        inner = at[:-1]
        out[inner + 1] = 32  # the separating comma goes
        out[inner + 2] = 10  # and the newline after it now ends one event
        if needs_exact_timestamps(buf, last + 1):
            exact_timestamps(out)
        return last + 1, last + len(sep) - 1


_TS_VALUE = re.compile(rb'"ts": ?(\d+)\.')
#: Below 2**43 µs a float64 keeps the ns decimals of a timestamp exactly (see `_to_ns`).
_FLOAT_EXACT_US = 2**43


def needs_exact_timestamps(data: bytes | bytearray, end: int | None = None) -> bool:
    """True when timestamps in `data` are too large for float64 to keep their ns decimals.

    Epoch-based clocks (1.7e15 µs) are; clocks since boot (4.4e12 µs) are not. Judged on the
    first and last timestamps of the block: a trace does not cross 2**43 µs (101 days).
    """
    end = len(data) if end is None else end
    head = _TS_VALUE.search(data, 0, min(end, 1 << 16))
    tail = _TS_VALUE.match(data, max(0, data.rfind(b'"ts":', 0, end)), end)
    return any(m is not None and int(m.group(1)) >= _FLOAT_EXACT_US for m in (head, tail))


def exact_timestamps(out: Bytes) -> None:
    """Rewrite `"ts": 1712195495519689.047` as `"tn":  1712195495519689047`, in place.

    Kineto writes float microseconds with 3 decimals (ns). Epoch-based values like the one
    above have 19 significant digits, more than a float64 holds (off by up to 125 ns).
    Moving the integer digits one byte right over the decimal point keeps the length and
    turns the number into exact integer nanoseconds, under a key of its own (`tn`). Numbers
    of any other shape (integers, other decimals, a leading zero) stay `ts` and are read as
    floats.
    """
    if out.size <= _TS_WINDOW + 8:
        return
    t = find(out, b'"ts"')
    t = t[t + 6 + _TS_WINDOW < out.size]
    t = t[out[t + 4] == 58]  # ':'
    if t.size == 0:
        return
    v = t + 5
    v = v + (out[v] == 32)
    win = sliding_window_view(out, _TS_WINDOW)[v]
    digit = (win >= 48) & (win <= 57)
    k = (~digit).argmax(1)  # integer digits before the first non-digit
    rows = np.arange(win.shape[0])
    kc = np.minimum(k, _TS_WINDOW - 5)
    ok = (
        (k >= 1)
        & (k <= _TS_WINDOW - 5)
        & (win[:, 0] != 48)  # "0047" would not be JSON
        & (win[rows, kc] == 46)  # '.'
        & digit[rows, kc + 1]
        & digit[rows, kc + 2]
        & digit[rows, kc + 3]
        & ~digit[rows, kc + 4]
    )
    if not ok.any():
        return
    t, v, k, win = t[ok], v[ok], k[ok], win[ok]
    for j in range(int(k.max())):  # one pass per digit column
        sel = j < k
        out[v[sel] + j + 1] = win[sel, j]
    out[v] = 32
    out[t + 2] = 110  # "ts" -> "tn"


def exact_text(data: bytes) -> str:
    """`data` as text, with the exact-ns rewrite of `exact_timestamps` applied."""
    if not needs_exact_timestamps(data):
        return data.decode("utf-8", "replace")
    arr = np.frombuffer(data, dtype=np.uint8).copy()
    exact_timestamps(arr)
    return arr.tobytes().decode("utf-8", "replace")
