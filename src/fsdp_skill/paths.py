"""Where the skill, its references and its index live.

Imported on every query: stdlib `os`/`sys` only (both are loaded by the interpreter anyway).
"""

import os
import sys

SKILL_NAME = "pytorch-fsdp"
INDEX_FILE = "index.bin"
# Page folders under references/, by the `source` their pages carry.
SOURCE_DIRS = {"guide": "guides", "docstring": "api", "web": "web"}


def skill_root() -> str:
    """The skill folder: $FSDP_SKILL_ROOT, else the nearest folder above this file with SKILL.md.

    Works for a checkout (src/fsdp_skill/ -> repo root), an editable install, and an installed
    skill copy (DIR/pytorch-fsdp/src/fsdp_skill/).
    """
    env = os.environ.get("FSDP_SKILL_ROOT")
    if env:
        return os.path.abspath(env)
    here = os.path.dirname(os.path.abspath(__file__))
    d = here
    for _ in range(4):
        d = os.path.dirname(d)
        if os.path.isfile(os.path.join(d, "SKILL.md")):
            return d
    # A plain (non-editable) install has no skill folder around it: keep data in the cache.
    return os.path.join(user_cache_dir(), "skill")


def user_cache_dir() -> str:
    """$XDG_CACHE_HOME/pytorch-fsdp-skill, else ~/.cache/pytorch-fsdp-skill, on every platform.

    macOS and Windows get ~/.cache too, not ~/Library/Caches or %LOCALAPPDATA% as platformdirs
    would give: scripts/search.py runs with no installed dependency, so this stays stdlib-only.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pytorch-fsdp-skill")


def references_dir(root: str | None = None) -> str:
    return os.path.join(root or skill_root(), "references")


def _writable(path: str) -> bool:
    """True when `path` (or the nearest existing folder above it) accepts new files."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.access(path, os.W_OK | os.X_OK)


def data_dir(root: str | None = None) -> str:
    """Folder for generated pages (api/, web/) and the index.

    $FSDP_SKILL_DATA_DIR wins; else references/ inside the skill when it is writable; else a
    per-skill folder in the user cache, so a read-only skill install still gets an index.
    """
    env = os.environ.get("FSDP_SKILL_DATA_DIR")
    if env:
        return os.path.abspath(env)
    refs = references_dir(root)
    if _writable(refs) or (
        os.path.isfile(os.path.join(refs, "index", INDEX_FILE))
        and os.path.abspath(root or skill_root()) not in _SHIPPED_STALE
    ):
        # A read-only install that ships its index serves it while it is fresh.
        return refs
    return cache_data_dir(root)


# Read-only skill folders whose shipped index was found stale in this process: their data
# moves to the user cache (see use_cache_for).
_SHIPPED_STALE: set[str] = set()


def cache_data_dir(root: str | None = None) -> str:
    key = "".join(c if c.isalnum() else "_" for c in os.path.abspath(root or skill_root()))
    return os.path.join(user_cache_dir(), key.strip("_")[-120:])


def use_cache_for(root: str | None = None) -> bool:
    """Serve this read-only skill from the user cache from now on; False when it is writable
    (or FSDP_SKILL_DATA_DIR is set), so nothing changes."""
    if os.environ.get("FSDP_SKILL_DATA_DIR") or _writable(references_dir(root)):
        return False
    _SHIPPED_STALE.add(os.path.abspath(root or skill_root()))
    return True


def index_path(root: str | None = None) -> str:
    return os.path.join(data_dir(root), "index", INDEX_FILE)


def page_dirs(root: str | None = None) -> dict[str, str]:
    """Folders holding pages, by source: guides ship with the skill, the rest are generated."""
    data = data_dir(root)
    return {
        "guide": os.path.join(references_dir(root), SOURCE_DIRS["guide"]),
        "docstring": os.path.join(data, SOURCE_DIRS["docstring"]),
        "web": os.path.join(data, SOURCE_DIRS["web"]),
    }


def installed_torch_version() -> str | None:
    """torch's version from its dist-info folder name, without importing torch (~1 s).

    None when torch is not installed in this interpreter.
    """
    # site-packages first: listing the standard library's folder is wasted work.
    entries = sorted(sys.path, key=lambda p: not p.endswith(("site-packages", "dist-packages")))
    for entry in entries:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("torch-") and name.endswith(".dist-info"):
                return name[len("torch-") : -len(".dist-info")]
    return None
