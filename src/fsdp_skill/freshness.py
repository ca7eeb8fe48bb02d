"""Is the index servable? Checked on every query, so: stdlib os/sys and our light modules only."""

import os

from fsdp_skill.index.store import Index, IndexFileError

# Version of the code that turns sources into pages, chunks and term weights. An index or
# generated pages made by another version are rebuilt, never served. tests/core/
# test_engine_version.py fails when that code changes without a bump here.
ENGINE = "11"


def fingerprint(dirs: dict[str, str]) -> str:
    """The page files in `dirs` ({source: folder}) as they are now: one line per file
    (`source/relpath size mtime_ns`), sorted.

    An index stores the fingerprint of the pages it was built from, and is stale when the pages'
    fingerprint differs. Cheap enough to recompute on every query (a few dozen stat calls), and
    any edit, addition or removal of a page changes it. Names starting with "." (temp files,
    stage folders) are skipped, as the builder skips them.
    """
    lines = []

    def walk(folder: str, rel: str) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for e in entries:
            if e.name.startswith("."):
                continue
            if e.is_dir():
                walk(e.path, rel + e.name + "/")
            elif e.name.endswith(".md"):
                st = e.stat()
                lines.append(f"{rel}{e.name}\t{st.st_size}\t{st.st_mtime_ns}")

    for source in sorted(dirs):
        walk(dirs[source], source + "/")
    lines.sort()
    return "\n".join(lines)


def open_if_fresh(
    index_file: str, dirs: dict[str, str], torch_version: str | None
) -> tuple[Index | None, str | None]:
    """(open Index, None) when the index can be served, else (None, why not).

    Fresh means: readable and intact, built for the installed torch (when torch is installed;
    without it any intact index is served), and built from exactly the page files present now.
    """
    try:
        idx = Index(index_file)
    except IndexFileError as exc:
        return None, "missing" if not os.path.exists(index_file) else str(exc)
    try:
        built_for = idx.header.get("torch_version")
        if idx.header.get("engine") != ENGINE:
            reason = f"built by another version of fsdp-skill (engine {idx.header.get('engine')}, now {ENGINE})"
        elif torch_version and built_for != torch_version:
            reason = f"built for torch {built_for}, installed torch is {torch_version}"
        elif idx.stamp() != fingerprint(dirs):
            reason = "reference pages changed since the index was built"
        else:
            return idx, None
    except IndexFileError as exc:
        reason = str(exc)
    idx.close()
    return None, reason


def stale_reason(index_file: str, dirs: dict[str, str], torch_version: str | None) -> str | None:
    """Why the index at `index_file` cannot be served (None when it is fresh)."""
    idx, reason = open_if_fresh(index_file, dirs, torch_version)
    if idx is not None:
        idx.close()
    return reason
