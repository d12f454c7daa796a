"""`python -m traceanalyzer` runs the command-line interface."""

from __future__ import annotations

from traceanalyzer.entry import main

if __name__ == "__main__":
    main()
