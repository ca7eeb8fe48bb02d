"""Read the error catalog (references/guides/errors/*.md) into entries the tests check.

An entry is a `##` section whose leading comment block names it:

    ## DDP: Expected to have finished reduction in the prior iteration
    <!-- objects: torch.nn.parallel.DistributedDataParallel -->
    <!-- error: ddp-unused-parameters -->
    <!-- repro: cpu -->                      (or `cuda`, or `none: why it cannot be reproduced`)

followed by the message as torch prints it in the section's first ```text block (`<...>`
stands for a part that varies: names, numbers, paths), **Cause**, **Fix** and a `Source:` URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "references" / "guides" / "errors"
PLACEHOLDER = "<...>"


@dataclass
class Entry:
    id: str
    path: Path
    line: int
    heading: str
    repro: str = ""  # cpu | cuda | none
    why: str = ""  # for repro none
    objects: list[str] = field(default_factory=list)
    message: str = ""
    body: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def pattern(self) -> re.Pattern:
        return message_pattern(self.message)


def message_pattern(message: str) -> re.Pattern:
    """The message as a regex: `<...>` matches any text, any run of whitespace any other."""
    parts = [re.escape(" ".join(p.split())) for p in message.strip().split(PLACEHOLDER)]
    body = ".+?".join(parts)
    body = body.replace(r"\ ", r"\s+")
    return re.compile(body, re.S)


def matches(message: str, printed: str) -> bool:
    return bool(message.strip()) and message_pattern(message).search(printed) is not None


_COMMENT = re.compile(r"^<!--\s*([a-z]+)\s*:\s*(.*?)\s*-->$")


def parse_file(path: Path) -> list[Entry]:
    """Entries of one catalog file; sections without an `error:` comment are prose."""
    entries: list[Entry] = []
    cur: Entry | None = None
    fields: dict[str, str] | None = None  # the comment block right after a heading
    heading = (0, "")
    fence: str | None = None
    buf: list[str] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if fence is None and line.startswith("## "):
            heading, fields, cur = (n, line[3:].strip()), {}, None
            continue
        if fields is not None:
            m = _COMMENT.match(stripped)
            if m:
                fields[m.group(1)] = m.group(2)
                continue
            if "error" in fields:
                kind, _, why = fields.get("repro", "").partition(":")
                cur = Entry(
                    id=fields["error"],
                    path=path,
                    line=heading[0],
                    heading=heading[1],
                    repro=kind.strip(),
                    why=why.strip(),
                    objects=[o.strip() for o in fields.get("objects", "").split(",") if o.strip()],
                )
                entries.append(cur)
            fields = None
        if cur is None:
            continue
        cur.body += line + "\n"
        if fence is None and stripped.startswith("```"):
            fence, buf = stripped[3:].strip(), []
        elif fence is not None and stripped.startswith("```"):
            if fence == "text" and not cur.message:
                cur.message = "\n".join(buf)
            fence = None
        elif fence is not None:
            buf.append(line)
    return entries


def load(folder: Path = CATALOG) -> list[Entry]:
    out: list[Entry] = []
    for path in sorted(folder.glob("*.md")):
        out += parse_file(path)
    return out
