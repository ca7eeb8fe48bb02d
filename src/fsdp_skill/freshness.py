"""Is the index servable? Checked on every query, so: stdlib os/sys and our light modules only."""

import os

from fsdp_skill import paths
from fsdp_skill.index.store import Index, IndexError_

# Version of the code that turns sources into pages, chunks and term weights. An index or
# generated pages made by another version are rebuilt, never served. tests/core/
# test_engine_version.py fails when that code changes without a bump here.
ENGINE = "8"


def open_if_fresh(index_file, dirs, torch_version):
    """(open Index, None) when the index can be served, else (None, why not).

    Fresh means: readable and intact, built for the installed torch (when torch is installed;
    without it any intact index is served), and built from exactly the page files present now.
    """
    try:
        idx = Index(index_file)
    except IndexError_ as exc:
        return None, "missing" if not os.path.exists(index_file) else str(exc)
    try:
        built_for = idx.header.get("torch_version")
        if idx.header.get("engine") != ENGINE:
            reason = f"built by another version of fsdp-skill (engine {idx.header.get('engine')}, now {ENGINE})"
        elif torch_version and built_for != torch_version:
            reason = f"built for torch {built_for}, installed torch is {torch_version}"
        elif idx.stamp() != paths.fingerprint(dirs):
            reason = "reference pages changed since the index was built"
        else:
            return idx, None
    except IndexError_ as exc:
        reason = str(exc)
    idx.close()
    return None, reason


def stale_reason(index_file, dirs, torch_version):
    """Why the index at `index_file` cannot be served (None when it is fresh)."""
    idx, reason = open_if_fresh(index_file, dirs, torch_version)
    if idx is not None:
        idx.close()
    return reason
