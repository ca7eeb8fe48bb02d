"""Docstring source: render the installed torch's distributed APIs as reference pages.

One markdown page per docs.pytorch.org page it mirrors (see data/api_pages.yaml), so every
chunk links to the real, versioned page and anchor of the installed torch.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from fsdp_skill.apinames import resolve
from fsdp_skill.pages import write_page
from fsdp_skill.sources.docstring_md import render

PAGES_SPEC = Path(__file__).resolve().parent.parent / "data" / "api_pages.yaml"
DOCS_URL = "https://docs.pytorch.org/docs/{version}/{page}.html"


def docs_version(version: str) -> str:
    """The docs.pytorch.org folder for a torch version: '2.13.0+cpu' -> '2.13'.

    'main' where no release docs match: a nightly or pre-release ('2.14.0.dev20260101',
    '2.14.0a0+git...', '2.14.0rc1'), a build from a git checkout (local part `+git...`, which
    may be ahead of its release), or a version string that does not parse (the latest docs
    are a better link than a folder that does not exist).
    """
    try:
        parsed = Version(str(version))
    except InvalidVersion:
        return "main"
    if parsed.is_prerelease or (parsed.local or "").startswith("git"):
        return "main"
    major, minor = (*parsed.release, 0)[:2]
    return f"{major}.{minor}"


def own_doc(obj: Any) -> str | None:
    """The object's own docstring: never a parent class's (inspect.getdoc walks the MRO)."""
    if isinstance(obj, property):
        obj = obj.fget
    doc = getattr(obj, "__doc__", None)
    if (
        inspect.isclass(obj)
        and doc is not None
        and any(doc is getattr(b, "__doc__", None) for b in obj.__mro__[1:])
    ):
        return None
    return doc if isinstance(doc, str) and doc.strip() else None


def _pybind_split(name: str, doc: str) -> tuple[str | None, str]:
    """pybind11 docstrings start with `name(arg: type) -> ret`: split that signature off."""
    first, _, rest = doc.strip().partition("\n")
    short = name.rsplit(".", 1)[-1]
    if first.startswith(short + "(") or first.startswith("(") or "(self:" in first:
        return first.strip(), rest
    return None, doc


# `torch.distributed.distributed_c10d.ProcessGroup` -> `ProcessGroup`: a module path before a
# class name costs characters in every search hit and tells the reader nothing the page does not.
_QUALIFIED_TYPE = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+(_?[A-Z][A-Za-z0-9_]*)")
LONG_ANNOTATION = 64
_ENUM_REPR = re.compile(r"<([A-Za-z_][\w.]*): [^<>]*>")
# `<function noop_context_fn at 0x7f4aa45c3880>`: the address changes with every build.
_FUNCTION_REPR = re.compile(r"<function (<?[\w.]+>?) at 0x[0-9a-f]+>")


def compact_signature(sig: str) -> str:
    """Short type names and plain enum defaults in the parameters; the API's own name stays whole."""
    head, paren, params = sig.partition("(")
    if not paren:
        return sig
    params = _QUALIFIED_TYPE.sub(r"\1", _ENUM_REPR.sub(r"\1", _FUNCTION_REPR.sub(r"\1", params)))
    close = _matching_paren(params)
    ret = params[close + 1 :]
    if ret.startswith(" -> "):
        ret = " -> " + _short_annotation(ret[4:])
    return head + paren + ", ".join(_short_param(p) for p in _split_top(params[:close])) + ")" + ret


def _short_annotation(ann: str) -> str:
    # Expanded type aliases (the state-dict value types) run to hundreds of characters.
    return ann if len(ann) <= LONG_ANNOTATION else ann.split("[", 1)[0] + "[...]"


def _short_param(param: str) -> str:
    name, colon, rest = param.partition(": ")
    if not colon:
        return param
    ann, eq, default = rest.partition(" = ")
    return f"{name}: {_short_annotation(ann)}" + (f" = {default}" if eq else "")


def _split_top(params: str) -> list[str]:
    """Split a parameter list at its top-level commas."""
    out: list[str] = []
    depth = start = 0
    for i, c in enumerate(params):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(params[start:i].strip())
            start = i + 1
    if params[start:].strip():
        out.append(params[start:].strip())
    return out


def _matching_paren(params: str) -> int:
    """Index of the `)` closing the parameter list (params starts just after the `(`)."""
    depth = 0
    for i, c in enumerate(params):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
    return len(params)


def signature(name: str, obj: Any, doc: str) -> tuple[str | None, str]:
    """The API's signature line (with its qualified name), and the doc text without it."""
    sig, rest = _signature(name, obj, doc)
    return (compact_signature(sig) if sig else sig), rest


def _signature(name: str, obj: Any, doc: str) -> tuple[str | None, str]:
    kind = "class " if inspect.isclass(obj) else ""
    if isinstance(obj, property) or (not callable(obj) and not inspect.ismodule(obj)):
        return f"property {name}" if isinstance(obj, property) else name, doc
    if inspect.ismodule(obj):
        return None, doc
    try:
        return f"{kind}{name}{inspect.signature(obj)}", doc
    except (TypeError, ValueError):
        sig, rest = _pybind_split(name, doc)
        if sig:
            params = sig[sig.index("(") :] if "(" in sig else "()"
            return f"{kind}{name}{params}", rest
        return f"{kind}{name}(...)", doc


def render_object(names: list[str], obj: Any, level: int, anchors: bool = True) -> str | None:
    """Markdown for one API entry, or None for an undocumented object (e.g. a bare pybind stub).

    `names` are every public name of the object on the page: the first is the heading, the
    rest are aliases (the same text published under another module path) that the entry
    carries in `objects` instead of repeating the text.
    """
    name = names[0]
    doc = own_doc(obj)
    if doc is None and not inspect.isclass(obj):
        return None
    # An undocumented class still gets its heading and signature, so that its documented
    # methods nest under it rather than under the entry before.
    sig, body = signature(name, obj, doc or "")
    if not body.strip() and not inspect.isclass(obj):
        return None
    lines = ["#" * level + " " + name, f"<!-- objects: {', '.join(names)} -->"]
    if anchors:
        lines.append(f"<!-- anchor: {name} -->")
    lines.append("")
    if sig:
        lines += ["```python", sig, "```", ""]
    if body.strip():
        lines.append(render(body, level, ", ".join(names)))
    return "\n".join(lines)


def _member_level(name: str, class_names: set[str]) -> int:
    """Methods and properties nest one level under their class when the class is on the page."""
    owner = name.rsplit(".", 1)[0]
    return 3 if owner in class_names else 2


def build_pages(
    out_dir: str | Path,
    torch_version: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write one page per spec entry into out_dir; returns the list of written paths."""
    import torch  # noqa: F401  (import errors surface here with a clear message upstream)

    version = str(torch_version or torch.__version__)
    short = docs_version(version)
    spec = yaml.safe_load(PAGES_SPEC.read_text())["pages"]
    merged: dict[str, dict[str, Any]] = {}
    for entry in spec:
        merged.setdefault(entry["page"], {"title": entry["title"], "parts": []})["parts"].append(
            entry
        )
    written: list[Path] = []
    for page, info in merged.items():
        if progress:
            progress(f"docstrings: {page}")
        url = DOCS_URL.format(version=short, page=page)
        entries, by_identity, class_names = [], {}, set()
        for part in info["parts"]:
            for name in part["objects"]:
                obj = resolve(name)
                if obj is None:
                    continue
                key = id(obj.fget) if isinstance(obj, property) else id(obj)
                if key in by_identity and not isinstance(obj, (int, str, bool, float)):
                    by_identity[key][0].append(name)
                    continue
                if inspect.isclass(obj):
                    class_names.add(name)
                entry = ([name], obj, _member_level(name, class_names), part.get("anchors", True))
                by_identity[key] = entry
                entries.append(entry)
        blocks = [t for t in (render_object(*e) for e in entries) if t]
        body = f"# {info['title']}\n\n" + "\n".join(blocks)
        path = Path(out_dir) / f"{page}.md"
        meta = {
            "title": info["title"],
            "url": url,
            "source": "docstring",
            "torch_version": version,
            "page": page,
        }
        write_page(path, meta, body)
        written.append(path)
    return written


def main() -> None:  # pragma: no cover - debugging aid: python -m fsdp_skill.sources.docstrings OUT
    out = sys.argv[1] if len(sys.argv) > 1 else "references/api"
    for p in build_pages(out, progress=lambda m: print(m, file=sys.stderr)):
        print(p, os.path.getsize(p))


if __name__ == "__main__":  # pragma: no cover
    main()
