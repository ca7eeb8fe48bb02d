"""The default search view: which indexed chunks a search without `--source` returns.

Every chunk of every page is indexed, so `--source web|docstring|guide` reaches each one. Each
chunk's `flags` field tells the default view to skip it (the query side skips both flags):

- `shadowed`: a docstring page (references/api/) with the same page key as a scraped page
  (references/web/). Both describe the same module; the docs site's page carries the prose,
  notes and examples around the docstrings, so it replaces the generated one rather than
  doubling every hit.
- `stale`: a scraped page made for another torch release (major.minor) than the API pages were
  built from. It would describe an API that is not the installed one, so it replaces nothing
  and the installed torch's docstring pages keep serving; `--source web` still finds it.

Guides carry no flag: they are the skill's own text.
"""

from __future__ import annotations

SHADOWED = "shadowed"
STALE = "stale"


def release(version: object) -> str:
    """'2.13.0+cpu' -> '2.13'; the docs site has one page set per major.minor."""
    return ".".join(str(version).split("+")[0].split(".")[:2])


def assign_flags(chunks: dict[str, list[dict[str, object]]], api_version: str | None) -> set[str]:
    """Set the `flags` of every chunk in `chunks` ({source: chunk dicts}); return the torch
    versions of the scraped pages flagged stale (empty when none are).

    `api_version` is the torch version the docstring pages were built from; None (no API pages)
    makes no scraped page stale.
    """
    api_release = release(api_version) if api_version else None
    stale_versions: set[str] = set()
    web_pages = set()
    for c in chunks.get("web", []):
        if api_release and release(c["torch_version"]) != api_release:
            c["flags"] = STALE
            stale_versions.add(str(c["torch_version"]))
        else:
            c["flags"] = ""
            web_pages.add(c["page"])
    for c in chunks.get("docstring", []):
        c["flags"] = SHADOWED if c["page"] in web_pages else ""
    for source, source_chunks in chunks.items():
        if source not in ("web", "docstring"):
            for c in source_chunks:
                c["flags"] = ""
    return stale_versions
