"""Where independent pieces of work run: local worker processes, or a dask.distributed
cluster. `batch` sends it whole runs; `ranks` sends it the ranks of one job."""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any, TypeVar

from traceanalyzer import termination
from traceanalyzer.errors import ConfigError

#: Seconds to wait for a dask scheduler to answer before giving up.
DASK_CONNECT_TIMEOUT_S = 10

T = TypeVar("T")
R = TypeVar("R")


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask where the system has one
    (Linux), else every core (macOS and Windows have no `os.sched_getaffinity`)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def run_all(
    fn: Callable[[T], R], items: Sequence[T], jobs: int | None, scheduler: str | None
) -> Iterator[tuple[int, R]]:
    """(index, fn(item)) for every item, as each finishes: on a dask scheduler, else in
    `jobs` worker processes (default: every core this process may run on; 1: here, one at
    a time). `fn` must be a module-level function and the items picklable."""
    if scheduler:
        yield from _run_dask(fn, items, scheduler)
        return
    workers = min(jobs or usable_cores(), len(items))
    if workers > 1 and not children_can_start():
        workers = 1  # here, one at a time (polars still runs each on every core)
    if workers <= 1:
        for i, item in enumerate(items):
            yield i, fn(item)
        return
    # spawn, not fork: polars' thread pool is already running in this process, and a forked
    # child inherits its locks mid-use (a deadlock)
    # each worker runs polars single-threaded: the processes are the parallelism, and two
    # polars thread pools per core would only contend (set before the children import it)
    saved = os.environ.get("POLARS_MAX_THREADS")
    os.environ["POLARS_MAX_THREADS"] = "1"
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"))
    try:
        # the workers start as the items are submitted: a SIGTERM while one is being handed
        # its start-up data would leave it half-started (a traceback) and unknown to `_stop`,
        # so the signal waits until every worker has been handed its start-up data
        with termination.held():
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        for future in as_completed(futures):
            yield futures[future], future.result()
    except BaseException:  # interrupted or terminated: stop the workers now, not after the queue
        _stop(pool)
        raise
    else:
        pool.shutdown()
    finally:
        if saved is None:
            os.environ.pop("POLARS_MAX_THREADS", None)
        else:
            os.environ["POLARS_MAX_THREADS"] = saved


def children_can_start() -> bool:
    """Whether spawned worker processes can start: a spawned child first runs the caller's
    main script again (as `__mp_main__`), so a plain script that calls the API at its top
    level, without an `if __name__ == "__main__":` guard, would start the work again in
    every child (and the pool breaks). True in a notebook or an interactive session (no
    main file), under `python -m` (imported by name) and for a script with such a guard."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None:
        return True
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return False  # cannot tell: do not risk it
    return any(isinstance(node, ast.If) and _is_main_guard(node.test) for node in tree.body)


def _is_main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    name = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    return name and main


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued work and end the running workers (so the caller's scratch folder
    can be removed at once)."""
    processes = list((pool._processes or {}).values())  # no public handle on the workers
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=5)


def _run_dask(fn: Callable[[T], R], items: Sequence[T], scheduler: str) -> Iterator[tuple[int, R]]:
    """Send the items to a dask.distributed cluster (the `dask` extra)."""
    try:
        from dask.distributed import Client
        from dask.distributed import as_completed as dask_completed
    except ImportError as exc:
        raise ConfigError(
            "--dask-scheduler needs dask.distributed",
            hint="pip install 'traceanalyzer[dask]'",
        ) from exc
    try:
        client = Client(scheduler, timeout=DASK_CONNECT_TIMEOUT_S)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"cannot reach the dask scheduler at {scheduler!r} ({exc})",
            hint="check the address (tcp://HOST:8786) and that `dask scheduler` runs there",
        ) from exc
    with client:
        futures = client.map(fn, list(items), pure=False)
        index: dict[Any, int] = {f.key: i for i, f in enumerate(futures)}
        for future in dask_completed(futures):  # type: ignore[no-untyped-call]
            yield index[future.key], future.result()
