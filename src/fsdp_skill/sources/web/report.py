"""Change report between two references/web trees: pages and API objects added/removed/changed."""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

OBJECTS_PREFIX = "<!-- objects:"
LIST_LIMIT = 15
_md = MarkdownIt("commonmark")


def read_tree(web_dir: Path) -> dict[str, str]:
    if not web_dir.is_dir():
        return {}
    return {
        p.relative_to(web_dir).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(web_dir.rglob("*.md"))
    }


def _objects_comment(text: str) -> list[str] | None:
    """The names an `<!-- objects: a, b -->` line lists; None for any other block."""
    text = text.strip()
    if "\n" in text or not (text.startswith(OBJECTS_PREFIX) and text.endswith("-->")):
        return None
    return [n.strip() for n in text[len(OBJECTS_PREFIX) : -3].split(",") if n.strip()]


def page_objects(markdown: str) -> dict[str, str]:
    """Object name -> digest of the section that documents it (heading to next heading).

    Sections are cut at the page's top-level headings as markdown-it reads them, so a `#` line
    inside a code fence stays in its section. A section documents the objects that its first
    block, an `<!-- objects: -->` comment, names (as the chunker reads it); the digest covers the
    section's other lines. The front matter falls in the unnamed part before the first heading.
    """
    # markdown-it's line numbers count a lone "\r" as a line break too.
    markdown = markdown.replace("\r\n", "\n").replace("\r", "\n")
    lines = markdown.split("\n")
    tokens = _md.parse(markdown)
    heads = [t.map for t in tokens if t.type == "heading_open" and t.level == 0 and t.map]
    # [start, end) of each section's body: the part before the first heading, then one for each
    # heading, from the line after it to the next heading.
    starts = [0] + [h[1] for h in heads]
    ends = [h[0] for h in heads] + [len(lines)]
    first: dict[int, Token] = {}  # section -> its first block
    for tok in tokens:
        if tok.level != 0 or tok.nesting == -1 or not tok.map or tok.type == "heading_open":
            continue
        section = bisect.bisect_right(starts, tok.map[0]) - 1
        if tok.map[0] < ends[section]:
            first.setdefault(section, tok)
    out: dict[str, str] = {}
    for section, block in first.items():
        names = _objects_comment(block.content) if block.type == "html_block" else None
        if not names:
            continue
        skip = range(*block.map)
        body = [lines[i] for i in range(starts[section], ends[section]) if i not in skip]
        digest = hashlib.sha256("\n".join(body).encode("utf-8")).hexdigest()[:16]
        for name in names:
            out[name] = digest
    return out


def _page_key(rel: str) -> str:
    return rel[:-3] if rel.endswith(".md") else rel


@dataclass
class ChangeReport:
    pages_added: list[str] = field(default_factory=list)
    pages_removed: list[str] = field(default_factory=list)
    pages_changed: list[str] = field(default_factory=list)
    objects_added: list[str] = field(default_factory=list)
    objects_removed: list[str] = field(default_factory=list)
    objects_changed: list[str] = field(default_factory=list)
    pages_total: int = 0
    objects_total: int = 0

    @classmethod
    def empty(cls, pages_total: int, tree: dict[str, str]) -> ChangeReport:
        objs: set[str] = set()
        for text in tree.values():
            objs.update(page_objects(text))
        return cls(pages_total=pages_total, objects_total=len(objs))

    @property
    def changed(self) -> bool:
        return bool(self.pages_added or self.pages_removed or self.pages_changed)

    def summary(self) -> str:
        return (
            f"pages +{len(self.pages_added)} -{len(self.pages_removed)} ~{len(self.pages_changed)}"
            f" ({self.pages_total} total); API objects +{len(self.objects_added)}"
            f" -{len(self.objects_removed)} ~{len(self.objects_changed)} ({self.objects_total} total)"
        )

    def render(self) -> str:
        lines = ["change report: " + self.summary()]
        for label, items in (
            ("pages added", self.pages_added),
            ("pages removed", self.pages_removed),
            ("pages changed", self.pages_changed),
            ("objects added", self.objects_added),
            ("objects removed", self.objects_removed),
            ("objects changed", self.objects_changed),
        ):
            if items:
                more = f" ... (+{len(items) - LIST_LIMIT})" if len(items) > LIST_LIMIT else ""
                lines.append(f"  {label}: " + ", ".join(items[:LIST_LIMIT]) + more)
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def diff_trees(old: dict[str, str], new: dict[str, str]) -> ChangeReport:
    old_objs: dict[str, str] = {}
    new_objs: dict[str, str] = {}
    for text in old.values():
        old_objs.update(page_objects(text))
    for text in new.values():
        new_objs.update(page_objects(text))
    return ChangeReport(
        pages_added=sorted(_page_key(p) for p in set(new) - set(old)),
        pages_removed=sorted(_page_key(p) for p in set(old) - set(new)),
        pages_changed=sorted(_page_key(p) for p in set(old) & set(new) if old[p] != new[p]),
        objects_added=sorted(set(new_objs) - set(old_objs)),
        objects_removed=sorted(set(old_objs) - set(new_objs)),
        objects_changed=sorted(
            n for n in set(old_objs) & set(new_objs) if old_objs[n] != new_objs[n]
        ),
        pages_total=len(new),
        objects_total=len(new_objs),
    )
