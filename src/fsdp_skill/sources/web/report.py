"""Change report between two references/web trees: pages and API objects added/removed/changed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

OBJECTS_PREFIX = "<!-- objects:"
LIST_LIMIT = 15


def read_tree(web_dir: Path) -> dict[str, str]:
    if not web_dir.is_dir():
        return {}
    return {
        p.relative_to(web_dir).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(web_dir.rglob("*.md"))
    }


def page_objects(markdown: str) -> dict[str, str]:
    """Object name -> digest of the section that documents it (heading to next heading)."""
    out: dict[str, str] = {}
    names: list[str] = []
    body: list[str] = []
    in_fence = None

    def close() -> None:
        if names:
            digest = hashlib.sha256("\n".join(body).encode("utf-8")).hexdigest()[:16]
            for n in names:
                out[n] = digest

    for line in markdown.split("\n"):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            in_fence = None if in_fence == fence else (in_fence or fence)
        if in_fence is None and line.startswith("#"):
            close()
            names, body = [], []
            continue
        if (
            in_fence is None
            and stripped.startswith(OBJECTS_PREFIX)
            and stripped.endswith("-->")
            and not body
        ):
            inner = stripped[len(OBJECTS_PREFIX) : -3]
            names = [n.strip() for n in inner.split(",") if n.strip()]
            continue
        body.append(line)
    close()
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
        objs = set()
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

    def as_dict(self) -> dict:
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
