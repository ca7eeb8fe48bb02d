"""Reference pages -> search chunks.

A page is split at its headings, then each section is packed from whole blocks (paragraphs,
list items, tables, code fences) up to a size cap. A code fence is never split. Every chunk
is self-describing: it carries its breadcrumbs, and a chunk that continues an API entry
starts with that entry's signature again.

The chunker works on a page's text and knows nothing of where pages live: the caller says what
each chunk's `path` field holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

from fsdp_skill.pages import read_page

MAX_CHARS = 1800
TAIL_FRACTION = 3  # a last part under limit / TAIL_FRACTION is merged into the one before
_md = MarkdownIt("commonmark").enable("table")


@dataclass
class Chunk:
    id: str
    title: str
    breadcrumbs: list[str]
    url: str
    objects: list[str]
    source: str
    torch_version: str
    path: str
    text: str
    page: str = ""
    signature: str = field(default="", repr=False)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class _Section:
    level: int
    title: str
    crumbs: list[str]
    objects: list[str] = field(default_factory=list)
    anchor: str = ""
    blocks: list[tuple[str, str]] = field(default_factory=list)  # (kind, text)


def slugify(title: str) -> str:
    """GitHub-style heading slug, so guide URLs resolve to the heading on a markdown viewer."""
    keep = "".join(c for c in title.lower().strip() if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def _comment_fields(html: str) -> dict[str, str]:
    """Read `<!-- objects: a, b -->` / `<!-- anchor: x -->` lines of an html block."""
    found = {}
    for line in html.splitlines():
        line = line.strip()
        if line.startswith("<!--") and line.endswith("-->"):
            key, sep, value = line[4:-3].strip().partition(":")
            if sep and key.strip() in ("objects", "anchor"):
                found[key.strip()] = value.strip()
    return found


def _only_comments(html: str) -> bool:
    lines = [ln.strip() for ln in html.splitlines() if ln.strip()]
    return bool(lines) and all(ln.startswith("<!--") and ln.endswith("-->") for ln in lines)


def _blocks(body: str) -> Iterator[tuple[str, str, Token]]:
    """Yield (kind, text, token) for each top-level block; list items count as blocks."""
    lines = body.splitlines()
    tokens = _md.parse(body)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0 or tok.map is None or tok.nesting == -1:
            i += 1
            continue
        if tok.type in ("bullet_list_open", "ordered_list_open"):
            # Each top-level item is a block, so long parameter lists can split between items.
            depth, j = 0, i
            while True:
                t = tokens[j]
                if t.type == "list_item_open" and t.level == 1:
                    yield "item", "\n".join(lines[t.map[0] : t.map[1]]).rstrip(), t
                depth += t.nesting if t.type.endswith(("list_open", "list_close")) else 0
                j += 1
                if depth == 0:
                    break
            i = j
            continue
        text = "\n".join(lines[tok.map[0] : tok.map[1]]).rstrip()
        if tok.type == "heading_open":
            yield "heading", tokens[i + 1].content, tok
        else:
            yield tok.type, text, tok
        i += 1


def _sections(meta: dict[str, object], body: str) -> list[_Section]:
    root = _Section(level=1, title=meta["title"], crumbs=[meta["title"]])
    sections, stack = [root], [root]
    for kind, text, tok in _blocks(body):
        current = sections[-1]
        if kind == "heading":
            level = int(tok.tag[1])
            if level == 1 and not current.blocks and current is root:
                # The page's own H1 names the page again.
                continue
            while len(stack) > 1 and stack[-1].level >= level:
                stack.pop()
            sec = _Section(level=level, title=text, crumbs=stack[-1].crumbs + [text])
            stack.append(sec)
            sections.append(sec)
            continue
        if kind == "html_block" and _only_comments(text):
            # Metadata for the chunker (objects, anchor) or for the tests (run markers, error
            # ids): none of it is text a reader needs.
            if not current.blocks:
                fields = _comment_fields(text)
                if "objects" in fields:
                    current.objects = [o.strip() for o in fields["objects"].split(",") if o.strip()]
                current.anchor = fields.get("anchor", current.anchor)
            continue
        current.blocks.append((kind, text))
    return sections


def _pack(blocks: list[tuple[str, str]], limit: int) -> list[list[tuple[str, str]]]:
    """Group consecutive blocks into parts of at most `limit` chars (a big block stays whole)."""
    parts, cur, size = [], [], 0
    for kind, text in blocks:
        sep = "\n" if kind == "item" and cur and cur[-1][0] == "item" else "\n\n"
        add = len(text) + (len(sep) if cur else 0)
        if cur and size + add > limit:
            parts.append(cur)
            cur, size = [], 0
            add = len(text)
        cur.append((kind, text))
        size += add
    if cur:
        if len(parts) and size < limit // TAIL_FRACTION:
            # A short tail read alone has lost its section's context (a lone bullet ranked first
            # and showed nothing else): it joins the part before, which may then pass the limit.
            parts[-1].extend(cur)
        else:
            parts.append(cur)
    return parts


def _join(blocks: list[tuple[str, str]]) -> str:
    out = ""
    for n, (kind, text) in enumerate(blocks):
        if n:
            out += "\n" if kind == "item" and blocks[n - 1][0] == "item" else "\n\n"
        out += text
    return out


def chunk_markdown(
    meta: dict[str, object], body: str, path: str, max_chars: int = MAX_CHARS
) -> list[Chunk]:
    """Chunks of one page given its front matter and body.

    `path` is where a reader finds the page (each chunk's `path` field), e.g.
    references/api/distributed.md.
    """
    chunks = []
    for sec in _sections(meta, body):
        if not sec.blocks:
            continue
        signature = ""
        if sec.objects and sec.blocks[0][0] == "fence":
            signature = sec.blocks[0][1]
        if sec.anchor:
            url = f"{meta['url']}#{sec.anchor}"
        elif meta["source"] == "guide" and sec.level > 1:
            url = f"{meta['url']}#{slugify(sec.title)}"
        else:
            url = meta["url"]
        key = sec.anchor or (slugify(sec.title) if sec.level > 1 else "")
        budget = max_chars - (len(signature) + 2 if signature else 0)
        for n, part in enumerate(_pack(sec.blocks, budget)):
            text = _join(part)
            if n and signature:
                text = signature + "\n\n" + text
            chunks.append(
                Chunk(
                    id=f"{meta['source']}:{meta['page']}#{key}:{n}",
                    title=sec.title,
                    breadcrumbs=list(sec.crumbs),
                    url=url,
                    objects=list(sec.objects),
                    source=meta["source"],
                    torch_version=meta["torch_version"],
                    path=path,
                    text=text,
                    page=meta["page"],
                    signature=signature,
                )
            )
    _dedupe_ids(chunks)
    return chunks


def _dedupe_ids(chunks: list[Chunk]) -> None:
    seen: dict[str, int] = {}
    for c in chunks:
        if c.id in seen:
            seen[c.id] += 1
            c.id = f"{c.id}.{seen[c.id]}"
        else:
            seen[c.id] = 0


def chunk_page(
    file: str | os.PathLike[str], path: str | None = None, max_chars: int = MAX_CHARS
) -> list[Chunk]:
    """Chunks of the page file `file`; `path` as in chunk_markdown (default: `file` itself)."""
    meta, body = read_page(file)
    return chunk_markdown(meta, body, os.fspath(file) if path is None else path, max_chars)
