"""The tool's version, in a module of its own: every layer may read it without importing the
package's `__init__` (which loads the notebook API on first use)."""

__version__ = "0.1.0"
