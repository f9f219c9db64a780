"""The one terminal every step writes to (stderr, via rich). A leaf: imports nothing
of minibuild, so any module may use it without an import cycle."""

from __future__ import annotations

import sys

from rich.console import Console

# Wide enough for the verify table when output goes to a log file or CI.
console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 150)


def print_error(message: str) -> None:
    """`error: MESSAGE`, the message printed as given (no rich markup)."""
    console.print("[bold red]error:[/] ", end="")
    console.print(message, markup=False)
