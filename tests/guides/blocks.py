"""Find every python code block an agent reads (SKILL.md, references/guides/**) and its run marker.

Each ```python block is preceded by one marker comment saying how the tests run it:

    <!-- run: world=2 -->                       torchrun, gloo on CPU, 2 ranks
    <!-- run: world=2 setup=toy_fsdp2 -->       first call setups.toy_fsdp2(namespace)
    <!-- run: world=1 adapt=cpu -->             CUDA-written code run on CPU: "nccl"->"gloo",
                                                "cuda"->"cpu", .cuda()/set_device are no-ops
    <!-- run: world=2 raises="shapes cannot" --> must raise an error containing the text
    <!-- run: world=1 legacy -->                shows a deprecated API on purpose: warnings allowed
    <!-- run: cuda world=1 -->                  needs a GPU: run by tests/gpu/run.sh, not on CPU
    <!-- norun: why it cannot run -->           not runnable code (the reason is required)

A block without a marker fails the test suite, so nothing an agent copies goes unchecked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!--\s*(run|norun)\s*:\s*(.*?)\s*-->$")
FLAGS = {"cuda", "legacy"}
KEYS = {"world", "setup", "adapt", "raises"}


class MarkerError(ValueError):
    pass


@dataclass
class Block:
    path: Path
    line: int  # line of the opening fence
    code: str
    mode: str = ""  # run | norun | "" (unmarked)
    world: int = 1
    setup: str = ""
    adapt: str = ""
    raises: str = ""
    flags: set[str] = field(default_factory=set)
    reason: str = ""

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def cuda(self) -> bool:
        return "cuda" in self.flags


def agent_files(root: Path = ROOT) -> list[Path]:
    return [root / "SKILL.md", *sorted((root / "references" / "guides").rglob("*.md"))]


def _parse_marker(block: Block, kind: str, value: str) -> None:
    block.mode = kind
    if kind == "norun":
        if not value:
            raise MarkerError(f"{block.id}: `norun:` needs a reason")
        block.reason = value
        return
    for tok in shlex.split(value):
        key, eq, val = tok.partition("=")
        if not eq:
            if tok not in FLAGS:
                raise MarkerError(f"{block.id}: unknown run flag {tok!r}")
            block.flags.add(tok)
        elif key not in KEYS:
            raise MarkerError(f"{block.id}: unknown run option {key!r}")
        elif key == "world":
            block.world = int(val)
        else:
            setattr(block, key, val)
    if block.adapt not in ("", "cpu"):
        raise MarkerError(f"{block.id}: adapt must be cpu")


def parse_file(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        if s.startswith("```"):
            lang = s[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            if lang == "python":
                block = Block(path, i + 1, "\n".join(lines[i + 1 : j]))
                k = i - 1
                while k >= 0 and not lines[k].strip():
                    k -= 1
                m = MARKER.match(lines[k].strip()) if k >= 0 else None
                if m:
                    _parse_marker(block, m.group(1), m.group(2))
                out.append(block)
            i = j + 1
            continue
        i += 1
    return out


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [b for p in agent_files(root) for b in parse_file(p)]
