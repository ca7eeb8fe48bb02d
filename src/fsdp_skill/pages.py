"""Reference pages: markdown with YAML front matter (format in references/README.md)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from fsdp_skill import files

REQUIRED = ("title", "url", "source", "torch_version", "page")
OPTIONAL = ("category",)


class PageError(ValueError):
    """A page that does not follow the format; the message names the file and the problem."""


def read_page(path: str | os.PathLike[str]) -> tuple[dict[str, object], str]:
    """Return (meta, body) of a page file."""
    return parse_page(Path(path).read_text(encoding="utf-8"), path)


def parse_page(text: str, path: str | os.PathLike[str]) -> tuple[dict[str, object], str]:
    """Return (meta, body) of a page's text; `path` names the page in error messages."""
    if not text.startswith("---\n"):
        raise PageError(f"{path}: no YAML front matter (the file must start with '---')")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise PageError(f"{path}: front matter is not closed with '---'")
    try:
        meta = yaml.safe_load(text[4:end]) or {}
    except yaml.YAMLError as exc:
        raise PageError(
            f"{path}: front matter is not valid YAML ({exc.__class__.__name__})"
        ) from None
    if not isinstance(meta, dict):
        raise PageError(f"{path}: front matter is not a mapping of fields")
    missing = [k for k in REQUIRED if not meta.get(k)]
    if missing:
        raise PageError(f"{path}: front matter lacks {', '.join(missing)}")
    meta["torch_version"] = str(meta["torch_version"])
    return meta, text[end + 5 :]


def format_page(meta: dict[str, object], body: str) -> str:
    """The text of a page: the front matter fields in their documented order, then `body`."""
    front = {k: meta[k] for k in REQUIRED}
    front.update({k: meta[k] for k in OPTIONAL if meta.get(k)})
    fm = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=10_000)
    return f"---\n{fm}---\n{body}"


def write_page(path: str | os.PathLike[str], meta: dict[str, object], body: str) -> None:
    """Write a page file atomically (see fsdp_skill.files)."""
    files.write_text(path, format_page(meta, body))
