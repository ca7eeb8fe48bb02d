"""How `fsdp-skill validate` words a finding: `PATH:LINE: message`, or `PATH: message`."""

from __future__ import annotations

import os


class Problems:
    """Ready-to-print problem lines, each naming a file under the skill folder shown as `root`."""

    def __init__(self, display_root: str) -> None:
        self.root = display_root
        self.items: list[str] = []

    def add(self, rel: str, line: int | None, message: str) -> None:
        where = os.path.join(self.root, rel) if rel else self.root
        self.items.append(f"{where}:{line}: {message}" if line else f"{where}: {message}")
