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
