"""ringcomm's version, in a module of its own so that any part of the package can read it without
importing the package (pyproject.toml carries the same number)."""

__version__ = "0.1.0"
