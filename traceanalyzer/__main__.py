"""`python -m traceanalyzer` runs the command-line interface."""

from __future__ import annotations

from traceanalyzer.cli import main

if __name__ == "__main__":
    main()
