"""Byte-level scanning of Kineto JSON with numpy: event separators and exact timestamps.

Part of the Chrome-trace reader. Everything here is vectorised over a whole block of bytes;
loops run over a handful of columns or pattern bytes, never over events.
"""

from __future__ import annotations

import ctypes
import re
import threading
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


#: The bytes the rewrites read and write, by name.
SPACE, NEWLINE, COLON, DOT = ord(" "), ord("\n"), ord(":"), ord(".")
DIGIT_0, DIGIT_9, LETTER_N = ord("0"), ord("9"), ord("n")


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
    """Turns Kineto's indented JSON into NDJSON, one event per line.

    Two halves, so that blocks are rewritten on several threads at once: `cut` finds where
    the whole events at the front of the buffer end (the last separator: a search back from
    the end, a few hundred bytes), and `rewrite`, given a copy of those events, turns them
    into NDJSON in place.
    """

    def __init__(self) -> None:
        self.separator: bytes | None = None
        #: Whether the last split rewrote timestamps to exact ns (`tn`, `exact_timestamps`).
        self.exact = False

    def cut(self, buf: bytearray, n: int) -> tuple[int, int] | None:
        """(end of the whole events at the front of `buf[:n]`, start of the rest), or None
        when `buf[:n]` holds no separator (yet): the caller reads more, or hands the rest to
        the structural splitter. The events end at the last separator's `}`; the rest starts
        at its `{`."""
        if self.separator is None:
            match = _SEPARATOR.search(buf, 0, n)
            if match is None:
                return None
            self.separator = match.group(0)
        last = buf.rfind(self.separator, 0, n)
        if last < 0:
            return None
        return last + 1, last + len(self.separator) - 1

    def split_in_place(self, buf: bytearray, n: int) -> tuple[int, int] | None:
        """Rewrite the whole events at the front of `buf[:n]` as NDJSON, args lifted (`cut`,
        then `rewrite` in place); the same result as `cut`."""
        cut = self.cut(buf, n)
        if cut is not None:
            assert self.separator is not None
            self.exact = rewrite(buf, cut[1] + 1, self.separator)
        return cut


_scratch = threading.local()

_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
_bytes_address = ctypes.pythonapi.PyBytes_AsString
_bytes_address.restype = ctypes.c_void_p
_bytes_address.argtypes = [ctypes.py_object]


class WritableBytes:
    """A new `bytes` object written in place before anything else sees it: `data`, the
    bytes, and `view`, a writable uint8 array over them (valid while this object lives).

    This is the C API's own way of building a bytes object (`PyBytes_FromStringAndSize`
    with no source, then filled): the block is copied in by numpy, which lets go of the
    interpreter's lock while it copies, rewritten in place, and handed to polars' parser as
    it is. A bytearray would have to be copied into a bytes object first, holding the lock:
    on the GPU machine's host, where a fresh page costs about 0.7 ms per MB to fault in,
    that copy held it for 2.9 ms per 4 MB block, 0.5 s of each 741 MB read.
    """

    __slots__ = ("data", "view")

    def __init__(self, source: bytearray, size: int) -> None:
        """The first `size` bytes of `source`."""
        self.data: bytes = _new_bytes(None, size)
        cells = (ctypes.c_uint8 * size).from_address(_bytes_address(self.data))
        self.view: Bytes = np.ctypeslib.as_array(cells)
        self.view[:] = np.frombuffer(source, dtype=np.uint8, count=size)


def rewrite(buf: bytearray | WritableBytes, n: int, sep: bytes) -> bool:
    """Rewrite the events of `buf[:n]`, which ends with the separator `sep` after its last
    event, as NDJSON in place, args lifted and flows blanked; whether its timestamps were
    rewritten to exact ns (`exact_timestamps`). The NDJSON is `buf` up to the `}` of that
    last separator. `buf`: a bytearray, or a bytes object written in place
    (`WritableBytes`)."""
    if isinstance(buf, WritableBytes):
        text: bytes | bytearray = buf.data
        arr = buf.view[:n]
    else:
        text, arr = buf, np.frombuffer(buf, dtype=np.uint8, count=n)
    mask: np.ndarray[Any, np.dtype[np.bool_]] = getattr(_scratch, "mask", np.zeros(0, bool))
    if mask.size < n:  # reused from block to block on each thread: fresh pages cost more
        mask = _scratch.mask = np.zeros(max(n, 2 * mask.size), dtype=bool)
    np.equal(arr, NEWLINE, out=mask[:n])
    newlines = np.flatnonzero(mask[:n])
    at = _separators(arr, newlines, sep)
    last = int(at[-1])
    out = arr[: last + 1]
    newlines = newlines[newlines < last]
    out[newlines] = SPACE  # fold each multi-line event onto one line
    inner = at[:-1]
    out[inner + 1] = SPACE  # the separating comma goes
    out[inner + 2] = NEWLINE  # and the newline after it now ends one event
    exact = needs_exact_timestamps(text, last + 1)
    if exact:
        exact_timestamps(out)
    lift_args(out, at, newlines)
    merge_flows(out, at, len(sep))
    return exact


def _words(arr: Bytes) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """The 8 bytes starting at each position of `arr`, as little-endian uint64 (a view)."""
    return np.ndarray((max(arr.size - 7, 0),), "<u8", arr, strides=(1,))


def _word(pattern: bytes) -> np.uint64:
    return np.uint64(int.from_bytes(pattern, "little"))


def _separators(arr: Bytes, newlines: Positions, sep: bytes) -> Positions:
    """Where `sep` (`},` newline, indentation, `{`) starts: the same as `find(arr, sep)`.

    Every separator holds a newline 2 bytes in, so only the newlines are looked at, not every
    byte: first the byte before the comma (few lines end in `},`), then the rest. Single
    bytes are gathered, not 8-byte words: numpy copies an unaligned word with a call per
    element, several times slower.
    """
    found = newlines[(newlines >= 2) & (newlines - 2 + len(sep) <= arr.size)] - 2
    for j, byte in enumerate(sep):
        if j != 2:  # the newline itself
            found = found[arr[found + j] == byte]
    return found


_ARGS = b'"args": {'
#: How far from an event's end, or from the `{` of its args, the next token is looked for.
_NEAR = 32


def _args_bounds(out: Bytes, at: Positions, end: Positions) -> tuple[Positions, Positions]:
    """The last token before each event's end, and the first after each args `{`.

    Kineto puts the same blanks between those tokens in every event, so the bytes between
    them in the first event are compared everywhere at once, and only the events that differ
    are looked at closely (`_NEAR` bytes each); -1 where no token is that near.
    """
    close = np.full(at.size, -1, np.int64)
    first = np.full(at.size, -1, np.int64)
    brace = at + len(_ARGS) - 1
    for pos, anchor, step in ((close, end, -1), (first, brace, 1)):
        todo = np.ones(at.size, bool)
        a0 = int(anchor[0])
        d = 1
        while d <= _NEAR and 0 <= a0 + step * d < out.size and out[a0 + step * d] in _BLANKS:
            d += 1
        if d <= 8 and 0 <= a0 + step * d < out.size and out.size >= 8:
            lo = anchor + min(step, step * d)  # the d bytes between the anchor and the token
            fits = (lo >= 0) & (lo + 8 <= out.size)
            words = _words(out)[np.where(fits, lo, 0)]
            mask = np.uint64((1 << (8 * d)) - 1)
            head = int(lo[0])
            pattern = np.uint64(int.from_bytes(out[head : head + d].tobytes(), "little"))
            fits &= (words & mask) == pattern
            pos[fits] = anchor[fits] + step * d
            todo &= ~fits
        if todo.any():
            idx = np.flatnonzero(todo)
            pos[idx] = _near_token(out, anchor[idx], step)
    return close, first


_BLANKS = b" \t\r\n"
_IS_BLANK = np.zeros(256, bool)
_IS_BLANK[list(_BLANKS)] = True


def _near_token(out: Bytes, anchor: Positions, step: int) -> Positions:
    """The first non-blank byte within `_NEAR` bytes of each anchor, going `step`; -1 if none."""
    offsets = np.arange(1, _NEAR + 1) * step
    pos = anchor[:, None] + offsets
    inside = (pos >= 0) & (pos < out.size)
    token = inside & ~_IS_BLANK[out[np.clip(pos, 0, out.size - 1)]]
    found = token.any(1)
    return np.where(found, anchor + (token.argmax(1) + 1) * step, -1)


def lift_args(out: Bytes, ends: Positions, newlines: Positions) -> None:
    """Lift each event's `args` object into the event itself, in place.

    `"dur": 3, "args": {"External id": 7, "stream": 7}}` becomes
    `"dur": 3,          "External id": 7, "stream": 7 }`: the key and the brace that opens the
    object, and the brace that closes it, turn to spaces. The args fields are then parsed as
    plain fields of the event, which polars' NDJSON reader does much faster than a struct.

    Kineto ends the line after `"args": {`, so only the places where a line ended
    (`newlines`, already folded to spaces) are looked at. An event is lifted only where the
    rewrite is certain to be right: its args object is not empty, is its only lifted `"args"`
    key and is its last key (Kineto always writes it last), so the last token before the
    event's closing brace (`ends`, ascending) closes args. An args object left in place is
    still read, by the reader's slower path for it.
    """
    nl = newlines[newlines >= len(_ARGS)]
    nl = nl[out[nl - 1] == ord("{")]
    nl = nl[out[nl - 3] == ord(":")]  # not the line that opens an event
    if nl.size == 0 or out.size < 8:
        return
    start = nl - len(_ARGS)
    words = _words(out)
    at = start[words[start] == _word(_ARGS[:8])]
    if at.size == 0:
        return
    event = np.minimum(np.searchsorted(ends, at), ends.size - 1)
    end = ends[event]
    ok = at < end
    same = event[1:] == event[:-1]
    ok[1:] &= ~same  # one args key per event
    ok[:-1] &= ~same
    close, first = _args_bounds(out, at, end)
    ok &= (first >= 0) & (close > first) & (out[close] == ord("}")) & (out[first] == ord('"'))
    lifted = at[ok]
    words[lifted] = _word(b" " * 8)
    out[lifted + 8] = SPACE
    out[close[ok]] = SPACE


#: What a flow event (`"ph": "s"` start, `"ph": "f"` finish) starts with, as 8-byte words.
_FLOW_WORDS = (b'"ph": "s', b'"ph": "f')
#: Longest flow event blanked (Kineto's are about 120 bytes).
_FLOW_MAX = 512


def merge_flows(out: Bytes, ends: Positions, sep_len: int) -> None:
    """Blank each flow event into the line before it, in place.

    Flow events (the arrows between a CPU op and its kernel, about a third of Kineto's
    events) are not read: the correlation ids link launches to kernels. Turning a flow
    event and the newline before it into spaces makes it trailing blanks of the event
    before: one row fewer for the NDJSON parser, which costs about 14 % of its time on
    Kineto's traces. Only events whose first key is `"ph": "s"` or `"ph": "f"`, right after
    the brace and blanks laid out as in the first event of the block, are blanked.
    `ends` holds the closing brace of each event; the block's first event is kept.
    """
    if ends.size < 2:
        return
    lo = ends[:-1] + 2  # the newline that ends the event before
    brace = ends[:-1] + sep_len - 1
    hi = ends[1:]
    k = 1
    while k <= 8 and brace[0] + k < out.size and out[brace[0] + k] in _BLANKS:
        k += 1
    if k > 8 or int(brace[0]) + k + 8 > out.size:
        return
    words = _words(out)
    head = words[brace + k]
    flow = (head == _word(_FLOW_WORDS[0])) | (head == _word(_FLOW_WORDS[1]))
    if k > 1:  # the blanks between the brace and the key are the first event's
        gap = np.uint64((1 << (8 * (k - 1))) - 1)
        first_gap = np.uint64(int.from_bytes(out[brace[0] + 1 : brace[0] + k].tobytes(), "little"))
        flow &= (words[brace + 1] & gap) == first_gap
    flow &= (hi - lo >= 8) & (hi - lo < _FLOW_MAX)
    if not flow.any():
        return
    lo, hi = lo[flow], hi[flow]
    blanks = _word(b" " * 8)
    for j in range(0, int((hi - lo).max()), 8):
        inside = lo + j + 7 <= hi
        words[lo[inside] + j] = blanks
    words[hi - 7] = blanks


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
    t = t[out[t + 4] == COLON]
    if t.size == 0:
        return
    v = t + 5
    v = v + (out[v] == SPACE)
    win = sliding_window_view(out, _TS_WINDOW)[v]
    digit = (win >= DIGIT_0) & (win <= DIGIT_9)
    k = (~digit).argmax(1)  # integer digits before the first non-digit
    rows = np.arange(win.shape[0])
    kc = np.minimum(k, _TS_WINDOW - 5)
    ok = (
        (k >= 1)
        & (k <= _TS_WINDOW - 5)
        & (win[:, 0] != DIGIT_0)  # "0047" would not be JSON
        & (win[rows, kc] == DOT)
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
    out[v] = SPACE
    out[t + 2] = LETTER_N  # "ts" -> "tn"


def exact_text(data: bytes) -> str:
    """`data` as text, with the exact-ns rewrite of `exact_timestamps` applied."""
    if not needs_exact_timestamps(data):
        return data.decode("utf-8", "replace")
    arr = np.frombuffer(data, dtype=np.uint8).copy()
    exact_timestamps(arr)
    return arr.tobytes().decode("utf-8", "replace")
