"""Structural splitting of a `traceEvents` array in any JSON layout into NDJSON, with numpy.

Part of the Chrome-trace reader. Kineto's own indented layout has a faster splitter
(`json_scan.EventSplitter`); this one reads every other layout the same way: minified
single-line `json.dump` output, CRLF line ends, other tools' indentation, keys in any order.

Over a block of bytes that starts between two events (outside any string, at the array's own
level), it marks the quotes that open or close strings (a quote after an odd run of
backslashes is escaped), keeps the braces outside strings (an even number of quotes before
them) and counts their depth: an event is a brace that opens at depth 0 up to the brace that
brings the depth back to 0. Each whole
event is then rewritten onto a line of its own, in place and keeping the length: control
bytes (newlines, CR, tabs), which JSON allows only outside strings, turn to spaces; the comma
between two events turns to a space and the byte after an event's closing brace to a newline.
Loops run over pattern bytes and gap widths, never over events.
"""

from __future__ import annotations

import collections
import re
from typing import Any

import numpy as np

from traceanalyzer.readers.json_scan import (
    Bytes,
    Positions,
    exact_timestamps,
    needs_exact_timestamps,
)

_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_OPEN, _CLOSE, _SPACE, _NEWLINE = ord("{"), ord("}"), ord(" "), ord("\n")
#: How far from a key the `:` and the value are looked for (blanks between them).
_NEAR = 32
#: Widest gap between two events checked with numpy; wider ones are checked one by one.
_GAP_MAX = 64


class LayoutError(ValueError):
    """The array holds something other than objects separated by commas."""

    def __init__(self, offset: int, found: bytes) -> None:
        self.offset = offset  # in the block
        self.found = found
        super().__init__(f"{found!r} between two events")


#: What sits between two events in any layout: a closing brace, blanks, a comma, blanks and
#: an opening brace. Inside a string or a nested list of objects it is no such thing, so a
#: cut there is a guess the block before it checks (`SpeculativeCutter`).
_BETWEEN = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
#: How far back from a window's end a cut is looked for first (then the whole window).
_CUT_LOOKBACK = 64 << 10


class SpeculativeCutter:
    """Cuts a window of any layout where two events seem to meet, without scanning it.

    The structural splitter must scan a block from its start to know where its events end,
    so it cannot be split on many threads as it is. This cuts at the last `}` , `{` of the
    window instead (a search back of a few kilobytes) and lets each block be split on a
    thread of its own as if it started between two events. The guess is checked by the
    block before: split from a true start, it ends with a whole event exactly at the cut
    only when the cut is between two events (a cut inside a string or a nested object
    leaves the event across it unfinished). So a chain of blocks that each end whole at
    their cut, from the array's start, is the file's events, and a chain that breaks is
    read again in one pass (`SpeculationFailed`).
    """

    def cut(self, buf: bytearray, n: int) -> int | None:
        """Where the whole events of `buf[:n]` seem to end (after a `}` that a comma and a
        `{` follow), or None when no such place is in it."""
        for lo in (max(0, n - _CUT_LOOKBACK), 0):
            found = collections.deque(_BETWEEN.finditer(buf, lo, n), maxlen=1)
            if found:
                return found[0].start() + 1
            if lo == 0:
                break
        return None


class SpeculationFailed(Exception):
    """A speculative cut was not between two events (or a block could not be read as one)."""


class StructuralSplitter:
    """Turns the events of a `traceEvents` array, in any JSON layout, into NDJSON in place."""

    def __init__(self) -> None:
        #: The array's closing `]` has been seen: the rest of the file is not events.
        self.ended = False
        #: Whether the last split rewrote timestamps to exact ns (`tn`, `exact_timestamps`).
        self.exact = False
        # one byte per byte of the block, reused from block to block (fresh pages for every
        # block cost more than the scan): brace candidates, then string quotes, then controls
        self._scratch = np.zeros(0, dtype=np.uint8)

    def split_whole(self, buf: bytearray) -> int:
        """Rewrite `buf`, a block cut by `SpeculativeCutter`, as NDJSON in place; where its
        NDJSON ends. Raises `SpeculationFailed` unless `buf` is whole events that end at
        its end (and `buf` is then no use)."""
        self.ended, n = False, len(buf)
        try:
            cut = self.split_in_place(buf, n)
        except LayoutError:
            raise SpeculationFailed from None
        if cut is None or cut[1] != n or self.ended:
            raise SpeculationFailed
        return cut[0]

    def split_in_place(self, buf: bytearray, n: int) -> tuple[int, int] | None:
        """Rewrite the whole events at the front of `buf[:n]` as NDJSON, args lifted.

        `buf` starts between two events (or right after the array's `[`). Returns (end of
        the NDJSON, start of the rest), or None when `buf[:n]` holds no whole event (yet).
        Raises `LayoutError` when something other than a comma and blanks sits between two
        events.
        """
        if self.ended or n == 0:
            return None
        arr = np.frombuffer(buf, dtype=np.uint8, count=n)
        if self._scratch.size < n:
            self._scratch = np.zeros(max(n, 2 * self._scratch.size), dtype=np.uint8)
        scratch = self._scratch[:n]
        candidates = _brace_candidates(arr, scratch)
        quotes = scratch.view(bool)
        string_quotes(arr, quotes)
        braces, depth = _braces(candidates, quotes, arr)
        starts, ends = _events(arr, braces, depth)
        count, self.ended = _check_gaps(arr, starts, ends)
        if count == 0:
            return None
        starts, ends = starts[:count], ends[:count]
        last = int(ends[-1])
        out = arr[: last + 1]
        out[: starts[0]] = _SPACE  # blanks and the comma before the first event
        control = quotes[: last + 1]
        np.less(out, _SPACE, out=control)
        out[np.flatnonzero(control)] = _SPACE  # control bytes can only be blanks here
        _blank_gaps(out, ends)
        self.exact = needs_exact_timestamps(buf, last + 1)
        if self.exact:
            exact_timestamps(out)
        inside = int(np.searchsorted(braces, last, side="right"))
        braces, depth = braces[:inside], depth[:inside]
        lift_any_args(out, braces, depth, ends)
        drop_flows(out, starts, ends)
        return last + 1, last + 1


Mask = np.ndarray[Any, np.dtype[np.bool_]]


def string_quotes(arr: Bytes, mask: Mask) -> None:
    """Mark in `mask` the quotes that open or close strings in `arr` (which starts outside one).

    A quote is escaped when an odd run of backslashes precedes it. The few backslashes
    followed by a quote are found as 2-byte words; their runs are followed one byte back at
    a time.
    """
    np.equal(arr, _QUOTE, out=mask)
    maybe = pairs(arr, b'\\"')
    if maybe.size == 0:
        return
    odd = np.ones(maybe.size, bool)
    live = np.arange(maybe.size)
    back = 1
    while live.size:
        pos = maybe[live] - back
        run = (pos >= 0) & (arr[np.maximum(pos, 0)] == _BACKSLASH)
        live = live[run]
        odd[live] ^= True
        back += 1
    mask[maybe[odd] + 1] = False


def pairs(arr: Bytes, pair: bytes) -> Positions:
    """Start positions of the 2-byte `pair` in `arr`, ascending (as words, 2 alignments)."""
    key = int.from_bytes(pair, "little")
    hits = []
    for off in (0, 1):
        words = (arr.size - off) // 2
        if words > 0:
            view = arr[off : off + 2 * words].view("<u2")
            hits.append(np.flatnonzero(view == key) * 2 + off)
    return np.sort(np.concatenate(hits)) if hits else np.zeros(0, np.int64)


def _brace_candidates(arr: Bytes, scratch: Bytes) -> Positions:
    """Positions of every `{` and `}` in `arr`, in strings or not (`scratch`: work space).

    `{` and `}` are 0x7B and 0x7D: less 0x7B, they are the bytes 0 and 2 (bit 1 aside).
    """
    np.subtract(arr, _OPEN, out=scratch)
    np.bitwise_and(scratch, 0xFD, out=scratch)
    return np.flatnonzero(np.equal(scratch, 0, out=scratch.view(bool)))


def _braces(candidates: Positions, quotes: Mask, arr: Bytes) -> tuple[Positions, Positions]:
    """The braces outside strings, and the depth after each (0 between the array's events).

    `quotes` marks the string quotes (`string_quotes`). A brace is inside a string when an
    odd number of quotes precede it: the parity of the quotes between consecutive braces is
    an XOR over each stretch (one pass, no positions of quotes), accumulated over the
    stretches.
    """
    if candidates.size == 0:
        return candidates, candidates
    # the stretch before the first brace starts at 0 (an empty one if the brace is at 0:
    # reduceat then gives that byte, a brace, so 0 all the same)
    stretches = np.concatenate((np.zeros(1, np.int64), candidates))
    parity = np.bitwise_xor.reduceat(quotes.view(np.uint8), stretches)
    outside = np.bitwise_xor.accumulate(parity)[:-1] == 0
    braces = candidates[outside]
    step = (arr[braces] == _OPEN).astype(np.int64) * 2 - 1
    return braces, np.cumsum(step)


def _events(arr: Bytes, braces: Positions, depth: Positions) -> tuple[Positions, Positions]:
    """The opening and closing brace of each event (whole ones first, then one cut off).

    Depth below 0 means the braces of the object that holds the array: nothing from there
    on is an event (the gap check finds the array's `]` before it).
    """
    below = np.flatnonzero(depth < 0)
    if below.size:
        braces, depth = braces[: below[0]], depth[: below[0]]
    opening = arr[braces] == _OPEN
    starts = braces[opening & (depth == 1)]
    ends = braces[~opening & (depth == 0)]
    return starts, ends


def _check_gaps(arr: Bytes, starts: Positions, ends: Positions) -> tuple[int, bool]:
    """How many whole events lead the block, and whether the array ends after them.

    Between two events there must be blanks and one comma; before the first, blanks and at
    most one comma (what follows the previous block's last event). A gap whose first token
    is `]` ends the array: the events before it are the last.
    """
    count = ends.size
    if count == 0:
        lead = _first_token(arr, 0, int(starts[0]) if starts.size else arr.size)
        return 0, lead == ord("]")
    lo = np.concatenate(([0], ends[: count - 1] + 1))
    hi = starts[:count]
    bad = _bad_gaps(arr, lo, hi)
    if bad.size == 0:
        return count, False
    i = int(bad[0])
    gap = bytes(arr[lo[i] : hi[i]])
    if gap.lstrip(b" \t\r\n,")[:1] == b"]":
        return i, True
    raise LayoutError(int(lo[i]), gap.strip()[:40])


def _first_token(arr: Bytes, lo: int, hi: int) -> int:
    """The first byte in `arr[lo:hi]` that is not a blank or a comma, or -1."""
    rest = bytes(arr[lo:hi]).lstrip(b" \t\r\n,")
    return rest[0] if rest else -1


_BLANK_OR_COMMA = np.zeros(256, bool)
_BLANK_OR_COMMA[list(b" \t\r\n,")] = True


def _bad_gaps(arr: Bytes, lo: Positions, hi: Positions) -> Positions:
    """Indices of the gaps `arr[lo:hi]` that are not blanks around one comma (the first gap:
    at most one comma)."""
    width = hi - lo
    commas = np.zeros(lo.size, np.int64)
    other = np.zeros(lo.size, bool)
    narrow = np.flatnonzero(width <= _GAP_MAX)
    for j in range(int(width[narrow].max()) if narrow.size else 0):
        at = narrow[width[narrow] > j]
        byte = arr[lo[at] + j]
        commas[at] += byte == _COMMA
        other[at] |= ~_BLANK_OR_COMMA[byte]
    for i in np.flatnonzero(width > _GAP_MAX):  # rare: a gap of many blanks
        gap = bytes(arr[lo[i] : hi[i]])
        commas[i] = gap.count(b",")
        other[i] = bool(gap.strip(b" \t\r\n,"))
    expected = np.ones(lo.size, np.int64)
    bad = other | (commas != expected)
    bad[0] = other[0] | (commas[0] > 1)
    return np.flatnonzero(bad)


def _blank_gaps(out: Bytes, ends: Positions) -> None:
    """Blank the comma between consecutive events and end each event's line after its `}`.

    The gaps hold only blanks (already spaces) and one comma each (`_check_gaps`).
    """
    if ends.size < 2:
        return
    lo = ends[:-1] + 1
    at = lo
    while at.size:  # most layouts write the comma right after the brace: one step
        comma = out[at] == _COMMA
        out[at[comma]] = _SPACE
        at = at[~comma] + 1
    out[lo] = _NEWLINE


def _near(out: Bytes, anchor: Positions, step: int) -> Positions:
    """The first non-blank byte within `_NEAR` bytes of each anchor, going `step`; -1 if none.

    Blanks here are spaces only: the splitter has turned every other blank to one. Steps
    one byte at a time over the anchors not settled yet: most settle in a step or two.
    """
    found = np.full(anchor.size, -1, np.int64)
    todo = np.arange(anchor.size)
    pos = anchor
    for _ in range(_NEAR):
        pos = pos + step
        inside = (pos >= 0) & (pos < out.size)
        if not inside.all():
            todo, pos = todo[inside], pos[inside]
        token = out[pos] != _SPACE
        found[todo[token]] = pos[token]
        todo, pos = todo[~token], pos[~token]
        if todo.size == 0:
            break
    return found


_ARGS_KEY = b'"args"'


def lift_any_args(out: Bytes, braces: Positions, depth: Positions, ends: Positions) -> None:
    """Lift each event's `args` object into the event itself, in place, in any layout.

    The same rewrite as `json_scan.lift_args` (the key, the colon and the brace that opens
    the object turn to spaces, and so does the brace that closes it), but found from the
    string quotes and brace depths instead of Kineto's line breaks: from each object that
    opens at depth 2 (a value of an event, wherever its key sits among the event's keys),
    the blanks are stepped back over to a `:` and a string `"args"` (an opening quote, not
    the end of a longer string); the object closes at the next brace that brings the depth
    back to 1. Events with no args, an empty args object or two args objects are left as
    they are (the reader parses an args object left in place by a slower path).
    """
    if ends.size == 0:
        return
    opens = braces[(depth == 2) & (out[braces] == _OPEN)]  # objects that are event values
    colon = _near(out, opens, -1)
    keep = (colon >= len(_ARGS_KEY)) & (out[np.maximum(colon, 0)] == ord(":"))
    brace, colon = opens[keep], colon[keep]
    end = _near(out, colon, -1)  # the key's closing quote
    key = end - len(_ARGS_KEY) + 1
    keep = end >= len(_ARGS_KEY) - 1
    for i, byte in enumerate(_ARGS_KEY):
        keep &= out[np.maximum(key + i, 0)] == byte
    brace, key = brace[keep], key[keep]
    keep = out[np.maximum(key - 1, 0)] != _BACKSLASH  # `"args"`, not the end of `"\"args"`
    brace, key = brace[keep], key[keep]
    event = np.searchsorted(ends, key)
    one = np.ones(key.size, bool)  # the event's only args key (JSON keeps the last of two)
    same = event[1:] == event[:-1]
    one[1:] &= ~same
    one[:-1] &= ~same
    brace, key = brace[one], key[one]
    first = _near(out, brace, 1)
    keep = (first >= 0) & (out[np.maximum(first, 0)] == _QUOTE)  # not an empty object
    key, brace = key[keep], brace[keep]
    if key.size == 0:
        return
    at = np.searchsorted(braces, brace)
    closing = np.flatnonzero((depth == 1) & (out[braces] == _CLOSE))
    close = braces[closing[np.minimum(np.searchsorted(closing, at), closing.size - 1)]]
    width = brace - key + 1
    for j in range(int(width.max())):
        sel = width > j
        out[key[sel] + j] = _SPACE
    out[close] = _SPACE


#: A flow event's first key and value (`"ph": "s"` start, `"ph": "f"` finish), as json.dump
#: writes them with its default separators and with compact ones.
_FLOW_HEADS = tuple(
    np.uint64(int.from_bytes(p, "little"))
    for p in (b'"ph": "s', b'"ph": "f', b'"ph":"s"', b'"ph":"f"')
)
#: Longest flow event blanked (Kineto's are about 120 bytes).
_FLOW_MAX = 512


def drop_flows(out: Bytes, starts: Positions, ends: Positions) -> None:
    """Blank each flow event into the line before it, in place (see `json_scan.merge_flows`).

    Only events whose first key is `"ph"` with the value `"s"` or `"f"` are blanked; the
    block's first event is kept.
    """
    if starts.size < 2 or out.size < 8:
        return
    token = _near(out, starts[1:], 1)
    fits = (token >= 0) & (token + 8 <= out.size)
    words: np.ndarray[Any, np.dtype[np.uint64]] = np.ndarray(
        (out.size - 7,), "<u8", out, strides=(1,)
    )
    head = words[np.where(fits, token, 0)]
    flow = fits & np.isin(head, _FLOW_HEADS)
    lo = ends[:-1] + 1  # the newline that ends the event before
    hi = ends[1:]
    flow &= (hi - lo < _FLOW_MAX) & (hi - lo >= 8)
    if not flow.any():
        return
    lo, hi = lo[flow], hi[flow]
    width = hi - lo + 1
    blanks = np.uint64(int.from_bytes(b" " * 8, "little"))
    for j in range(0, int(width.max()) - 7, 8):
        inside = lo + j + 8 <= hi + 1
        words[lo[inside] + j] = blanks
    words[hi - 7] = blanks
