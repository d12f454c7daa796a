"""The command's entry point: the memory allocator and polars' threads set before polars
loads, then the CLI.

polars allocates through jemalloc, which by default keeps freed pages for about ten seconds
before it gives them back. Reading a trace frees most of what it allocated (the parsed
blocks), so those pages stayed resident through the analyses and counted in the peak: on
a 200 MB trace the process held about 470 MB right after reading, 270 MB of it once purged.
With a background thread that purges pages unused for 200 ms, the peak of a 200 MB
trace's report fell by 12-20 % (with Python stacks 618 -> 502 MB, minified 415 -> 332 MB)
and the 1 GB trace's by 15 %, at no measurable cost in time. jemalloc also gives each of up
to four arenas per core its own pages: on the 16-core host, 4 arenas in all held the peak of
a 741 MB trace's report at 1270-1355 MB instead of 1457-1483 MB, in the same 3.2-3.3 s (one
arena: 1329-1339 MB, 3.3 s). A value the user set wins.
jemalloc reads the setting once, when polars' library loads: so here, before any import
of polars (this module and the package's `__init__` import none).

polars' own threads are set here too (`polars_threads`), for the same reason: its pool is
made once, when it loads.
"""

from __future__ import annotations

import os

from traceanalyzer.parallel import usable_cores

#: jemalloc's options (the `_RJEM_` prefix is polars' build of it).
ALLOCATOR_VARIABLE = "_RJEM_MALLOC_CONF"
ALLOCATOR_CONF = "background_thread:true,dirty_decay_ms:200,muzzy_decay_ms:0,narenas:4"


def tune_allocator() -> None:
    """Set the allocator's options for this process and its children, unless set."""
    os.environ.setdefault(ALLOCATOR_VARIABLE, ALLOCATOR_CONF)


#: polars' thread pool size (read once, when polars loads).
THREADS_VARIABLE = "POLARS_MAX_THREADS"


def polars_threads(cores: int) -> int:
    """polars' threads on `cores` cores: all of them up to 8, at least 8 beyond, and half
    of them from 16 up.

    The read parses up to 8 blocks at once, each spread over polars' pool; with a pool as
    large as the cores, its threads contended with the read's own for the cores. On the
    16-core host, 3 rounds interleaved (H200), a pool of 8 against 16: the 741 MB stacks
    trace's report in 3.74-4.04 s against 3.77-4.35 s, its peak 1067-1103 MB against
    1205-1224 MB and its CPU 21 s against 25-27 s; the 164 MB trace's 1.87-2.16 s against
    2.08-2.34 s, peak 430-441 MB against 471-477 MB; reports identical. On 8 cores a pool
    of 4 was slower (741 MB: 4.65-5.32 s against 4.15-4.67 s): up to 8 cores it is all of them.
    """
    return min(cores, max(8, cores // 2))


def tune_threads() -> None:
    """Set polars' threads for this process and its children (`polars_threads` of the cores
    it may run on), unless set."""
    os.environ.setdefault(THREADS_VARIABLE, str(polars_threads(usable_cores())))


def main() -> None:
    """Console-script entry point: tune the allocator and polars' threads, then run the
    CLI."""
    tune_allocator()
    tune_threads()
    from traceanalyzer.cli import main as cli_main

    cli_main()
