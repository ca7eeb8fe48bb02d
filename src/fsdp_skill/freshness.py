"""Is the index servable? Checked on every query, so: stdlib os/sys and our light modules only."""

import os

from . import paths
from .index.store import Index, IndexError_


def stale_reason(index_file, dirs, torch_version):
    """Why the index at `index_file` cannot be served (None when it is fresh)."""
    try:
        idx = Index(index_file)
    except IndexError_ as exc:
        return "missing" if not os.path.exists(index_file) else str(exc)
    try:
        built_for = idx.header.get("torch_version")
        if torch_version and built_for != torch_version:
            return f"built for torch {built_for}, installed torch is {torch_version}"
        if idx.stamp() != paths.fingerprint(dirs):
            return "reference pages changed since the index was built"
    except IndexError_ as exc:
        return str(exc)
    finally:
        idx.close()
    return None
