"""`fsdp-skill bundle`: the installed skill as one self-contained zip.

For agents that take an uploaded skill and cannot install packages when they run it: the zip
holds exactly what `fsdp-skill install` copies (SKILL.md, scripts, guides, the generated
reference pages and index, and the `fsdp_skill` code the scripts import) under one
`pytorch-fsdp/` folder, so `python3 scripts/search.py QUERY` works there with a Python that has
no packages at all. The torch version the references were built from is in the bundle's
SKILL.md (`metadata: torch-version`) and in the file name.

The index is served only while it matches the exact page files it was built from (size and
modification time), and unzipping does not keep modification times. So the bundle also carries
`references/index/bundle-mtimes.tsv` (each page's size, time and SHA-256): the first search in
the unzipped folder puts the times back on the pages whose content is unchanged, then deletes
that file. An edited page keeps its new time, and the index is rebuilt as for any edit.

Imported by `scripts/search.py` for `restore_times` only: module level is stdlib `os`/`sys`,
and everything else is imported by the functions that write a bundle or an export.
"""

from __future__ import annotations

import os
import sys

# Not typing.TYPE_CHECKING: importing typing would be the first non-os/sys import here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import zipfile
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from fsdp_skill.index.store import Index
    from fsdp_skill.mcp_server import Docs
    from fsdp_skill.skill.install import Plan

    # (first section, page path, page text, API names of its entries)
    Page = tuple[dict[str, Any], str, str, list[str]]

TIMES_FILE = "references/index/bundle-mtimes.tsv"


def restore_times(root: str | os.PathLike[str]) -> None:
    """Give the unzipped pages back the times the bundle's index was built with; best effort."""
    marker = os.path.join(root, *TIMES_FILE.split("/"))
    try:
        with open(marker, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    import hashlib

    for line in lines:
        parts = line.split("\t")
        if len(parts) != 4:
            continue
        rel, size, mtime_ns, digest = parts
        if rel.startswith("/") or ".." in rel.split("/") or not rel.startswith("references/"):
            continue
        path = os.path.join(root, *rel.split("/"))
        try:
            if os.path.getsize(path) != int(size):
                continue
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != digest:
                    continue  # edited since: its new time makes the index rebuild, as it should
            os.utime(path, ns=(int(mtime_ns), int(mtime_ns)))
        except (OSError, ValueError):
            continue
    try:
        os.unlink(marker)
    except OSError:
        pass


# -- writing a bundle (fsdp-skill bundle) ---------------------------------------------------


def with_torch_metadata(skill_md: str, version: str) -> str:
    """SKILL.md with `torch-version: "<version>"` in its frontmatter's `metadata:` map."""
    if not skill_md.startswith("---\n"):
        raise ValueError("SKILL.md has no frontmatter")
    end = skill_md.find("\n---\n", 4)
    if end < 0:
        raise ValueError("SKILL.md frontmatter is not closed")
    front, rest = skill_md[4:end].split("\n"), skill_md[end:]
    entry = f'torch-version: "{version}"'
    at = next((i for i, ln in enumerate(front) if ln.rstrip() == "metadata:"), None)
    if at is None:
        front += ["metadata:", f"  {entry}"]
    else:
        block = at + 1
        indent = "  "
        if block < len(front) and front[block][:1] in (" ", "\t"):
            indent = front[block][: len(front[block]) - len(front[block].lstrip())]
        # Drop an earlier torch-version entry of this map, then put ours first.
        i = block
        while i < len(front) and (front[i].startswith(indent) or not front[i].strip()):
            if front[i].strip().startswith("torch-version:"):
                del front[i]
                continue
            i += 1
        front.insert(block, indent + entry)
    return "---\n" + "\n".join(front) + rest


def _zip_time(mtime: float) -> tuple[int, int, int, int, int, int]:
    import time

    t = time.localtime(max(mtime, 315532800))  # zip dates start in 1980
    return t[:6]


def _safe_version(version: str) -> str:
    return "".join(c if c.isalnum() or c in ".+-_" else "_" for c in version) or "unknown"


def default_name(version: str) -> str:
    """pytorch-fsdp-<package version>-torch<torch version>.zip"""
    from fsdp_skill import __version__
    from fsdp_skill.paths import SKILL_NAME

    return f"{SKILL_NAME}-{__version__}-torch{_safe_version(version)}.zip"


def bundle(
    output: str | os.PathLike[str] | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    ensure_index: Callable[[Path], Path] | None = None,
    build: bool = True,
    log: Callable[[str], None] = print,
) -> Path:
    """Write the zip; returns its path. Raises InstallError with a one-line message."""
    from pathlib import Path

    from fsdp_skill import paths
    from fsdp_skill.skill import install as I

    root_p = Path(root) if root is not None else Path(paths.skill_root())
    if build:
        I.build_index(root_p, ensure_index)
    dirs = paths.page_dirs(str(root_p))
    version, stamp = _fresh_index(root_p, dirs)
    plan = I.plan(root_p, Path(paths.SKILL_NAME))
    out = _output_path(output, version)
    try:
        _write_zip(out, plan, version, stamp, dirs)
    except OSError as e:
        raise I.InstallError(f"{getattr(e, 'filename', None) or out}: {e.strerror or e}") from None
    except ValueError as e:  # SKILL.md without frontmatter
        raise I.InstallError(f"{root_p / 'SKILL.md'}: {e}") from None
    size = out.stat().st_size
    log(f"wrote {out} ({len(plan.files) + 1} files, {I.human_size(size)}, torch {version})")
    return out


def _fresh_index(root: Path, dirs: dict[str, str]) -> tuple[str, str]:
    """(torch version, page stamp) of the index, refused unless it matches the pages on disk."""
    from fsdp_skill import paths
    from fsdp_skill.freshness import fingerprint
    from fsdp_skill.index.store import Index, IndexFileError
    from fsdp_skill.skill.install import InstallError

    try:
        index = Index(paths.index_path(str(root)))
    except IndexFileError as e:
        raise InstallError(f"no usable index to bundle ({e}); run: fsdp-skill build") from None
    try:
        version = index.header.get("torch_version", "") or "unknown"
        stamp = index.stamp()
    except IndexFileError as e:
        raise InstallError(f"the index is corrupt ({e}); run: fsdp-skill build --force") from None
    finally:
        index.close()
    if stamp != fingerprint(dirs):
        raise InstallError("the index does not match the reference pages; run: fsdp-skill build")
    return version, stamp


def _output_path(output: str | os.PathLike[str] | None, version: str) -> Path:
    """--output as given, the default name inside it when it is a folder, or in the cwd."""
    from pathlib import Path

    from fsdp_skill.skill.install import InstallError

    out = Path(output).expanduser() if output else Path.cwd() / default_name(version)
    if out.is_dir() or (output and str(output).endswith(("/", os.sep))):
        if not out.is_dir():
            raise InstallError(f"{out}: no such folder")
        out = out / default_name(version)
    if not out.parent.is_dir():
        raise InstallError(f"{out.parent}: no such folder")
    return out


def _write_zip(out: Path, plan: Plan, version: str, stamp: str, dirs: dict[str, str]) -> None:
    """The planned files under pytorch-fsdp/, SKILL.md stamped with the torch version, and the
    pages' times (TIMES_FILE); written through a temp file, so `out` is whole or untouched."""
    import hashlib
    import zipfile

    from fsdp_skill import files, paths
    from fsdp_skill.freshness import fingerprint
    from fsdp_skill.skill.install import InstallError

    times = []
    with (
        files.replacing(out) as f,
        zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf,
    ):
        for rel, src, _ in plan.files:
            st = src.stat()
            info = _zip_info(f"{paths.SKILL_NAME}/{rel}", st.st_mtime, st.st_mode & 0xFFFF)
            data = src.read_bytes()
            if rel == "SKILL.md":
                data = with_torch_metadata(data.decode("utf-8"), version).encode("utf-8")
            elif rel.startswith("references/") and rel.endswith(".md"):
                times.append(
                    f"{rel}\t{len(data)}\t{st.st_mtime_ns}\t{hashlib.sha256(data).hexdigest()}"
                )
            zf.writestr(info, data)
        info = _zip_info(f"{paths.SKILL_NAME}/{TIMES_FILE}", 0, 0o644)
        zf.writestr(info, "\n".join(times) + "\n")
        # Pages edited while we zipped would leave the bundle's index stale: refuse it.
        if fingerprint(dirs) != stamp:
            raise InstallError("reference pages changed while bundling; run the command again")


def _zip_info(name: str, mtime: float, mode: int) -> zipfile.ZipInfo:
    import zipfile

    info = zipfile.ZipInfo(name, date_time=_zip_time(mtime))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = mode << 16
    return info


# -- llms.txt (fsdp-skill export --llms-txt DIR) --------------------------------------------

SOURCE_HEADINGS = {
    "guide": "Guides",
    "web": "PyTorch documentation pages",
    "docstring": "API reference",
}


def _first_sentence(text: str, limit: int = 160) -> str:
    """A page's one-line description: its first prose line, cut at a sentence end."""
    for block in text.split("\n\n"):
        line = " ".join(block.split())
        if not line or line.startswith(("```", "|", "#", "<!--", "- ", "* ")):
            continue
        for stop in (". ", "? ", "! "):
            at = line.find(stop)
            if 0 < at < limit:
                return line[: at + 1]
        return line if len(line) <= limit else line[: limit - 3].rsplit(" ", 1)[0] + "..."
    return ""


def export_llms_txt(
    folder: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = print,
) -> tuple[Path, Path]:
    """Write llms.txt (an index of the pages: title, versioned URL, one line each) and
    llms-full.txt (every page's text) into `folder`, following the llms.txt convention."""
    from pathlib import Path

    from fsdp_skill import files
    from fsdp_skill.mcp_server import Docs, ToolFailure
    from fsdp_skill.skill.install import InstallError

    out = Path(folder).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InstallError(f"{out}: cannot create: {e.strerror or e}") from None
    docs = Docs(str(root) if root else None)
    try:
        pages, version = docs.with_index(lambda index: _collect_pages(docs, index))
    except ToolFailure as e:
        raise InstallError(str(e)) from None
    finally:
        docs.close()
    order = {s: n for n, s in enumerate(SOURCE_HEADINGS)}
    pages.sort(key=lambda p: (order.get(p[0]["source"], 9), p[0]["breadcrumbs"][0].lower()))
    index_lines, full = _llms_lines(pages, version)
    try:
        files.write_text(out / "llms.txt", "\n".join(index_lines) + "\n")
        files.write_text(out / "llms-full.txt", "\n".join(full) + "\n")
    except OSError as e:
        raise InstallError(f"{getattr(e, 'filename', None) or out}: {e.strerror or e}") from None
    log(
        f"wrote {out / 'llms.txt'} and {out / 'llms-full.txt'} ({len(pages)} pages, torch {version})"
    )
    return out / "llms.txt", out / "llms-full.txt"


def _collect_pages(docs: Docs, index: Index) -> tuple[list[Page], str]:
    """Every page the search serves, with its text, and the index's torch version."""
    table = docs.section_table(index)
    pages = []
    for path, sections in table["pages"].items():
        if all(s["flags"] == "shadowed" for s in sections) or sections[0]["flags"] == "stale":
            continue  # the scraped page that replaces it is listed instead
        text = "\n\n".join(docs.page_parts(index, sections))
        apis = [s["objects"][0] for s in sections if s["objects"] and s["source"] != "guide"]
        pages.append((sections[0], path, text, apis))
    return pages, index.header.get("torch_version", "")


def _llms_lines(pages: list[Page], version: str) -> tuple[list[str], list[str]]:
    """The lines of llms.txt (one per page, under a heading per source) and of llms-full.txt."""
    from fsdp_skill import paths

    head = [
        f"# PyTorch FSDP and torch.distributed ({paths.SKILL_NAME} skill, torch {version})",
        "",
        f"> Version-pinned reference for distributed PyTorch training with FSDP2 (fully_shard), FSDP1, DDP, "
        f"ZeRO, DTensor, DeviceMesh, HSDP, tensor parallel, distributed checkpointing and torchrun: API "
        f"reference generated from torch {version}'s docstrings, docs.pytorch.org pages where scraped, and "
        f"task guides. Every URL points at the docs of that exact release.",
        "",
    ]
    index_lines, full = list(head), list(head)
    current = None
    for first, _path, text, apis in pages:
        if first["source"] != current:
            current = first["source"]
            index_lines += ["", f"## {SOURCE_HEADINGS.get(current, current)}", ""]
        url = first["url"].partition("#")[0]
        if apis and first["objects"]:
            # A reference page opens with its first API entry: name the entries instead.
            shown = ", ".join(f"`{a}`" for a in apis[:4])
            desc = f"{len(apis)} API entr{'y' if len(apis) == 1 else 'ies'}: {shown}" + (
                ", ..." if len(apis) > 4 else ""
            )
        else:
            desc = _first_sentence(text)
        index_lines.append(f"- [{first['breadcrumbs'][0]}]({url})" + (f": {desc}" if desc else ""))
        full += [
            "",
            f"# {first['breadcrumbs'][0]}",
            f"Source: {url} (torch {first['torch_version']})",
            "",
            text.strip(),
        ]
    return index_lines, full


def export_main(argv: list[str] | None = None) -> int:
    from fsdp_skill.argparsing import OneLineParser
    from fsdp_skill.skill.install import InstallError

    parser = OneLineParser(
        prog="fsdp-skill export",
        description="Export the references for tools that read the llms.txt convention.",
    )
    parser.add_argument(
        "--llms-txt",
        metavar="DIR",
        required=True,
        help="write DIR/llms.txt (an index of the pages with versioned URLs) and DIR/llms-full.txt",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.llms_txt.strip():
        parser.error("--llms-txt must name a folder, not an empty string")
    try:
        export_llms_txt(args.llms_txt)
    except InstallError as e:
        print(f"fsdp-skill export: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fsdp-skill export: interrupted", file=sys.stderr)
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    from fsdp_skill.argparsing import OneLineParser
    from fsdp_skill.skill.install import InstallError

    parser = OneLineParser(
        prog="fsdp-skill bundle",
        description="Build what is missing, then write the installed skill (SKILL.md, scripts, guides, "
        "generated references and index, the package code the scripts import) as one zip that works "
        "with a Python that has no packages.",
    )
    parser.add_argument(
        "--output",
        metavar="FILE.zip",
        help="where to write it (default: ./pytorch-fsdp-VERSION-torchTORCH.zip; a folder: "
        "that name inside it)",
    )
    parser.add_argument(
        "--no-build", action="store_true", help="bundle the index as it is; build nothing"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.output is not None and not args.output.strip():
        parser.error("--output must name a file, not an empty string")
    try:
        bundle(args.output, build=not args.no_build)
    except InstallError as e:
        print(f"fsdp-skill bundle: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(
            f"fsdp-skill bundle: {getattr(e, 'filename', None) or 'error'}: {e.strerror or e}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("fsdp-skill bundle: interrupted; nothing written", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
