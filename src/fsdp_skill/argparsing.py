"""argparse that reports bad arguments in one line, as every fsdp-skill command does."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage block first; one line naming the problem is enough.
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def positive_int(text: str) -> int:
    """argparse `type=` for counts: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
