"""Pipeline driver: sources -> pages -> chunks -> index, rebuilt only when stale.

The index is fresh when it was built for the installed torch and from exactly the page files
present now (their fingerprint). Builds take a file lock, write into temp paths and rename,
so concurrent first searches build once and nobody reads half a file.
"""

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from fsdp_skill import files, paths
from fsdp_skill.freshness import ENGINE, stale_reason

# Which torch (and engine) made references/api/; not a page (no .md), so never indexed.
API_MARKER = "build-info.txt"


class BuildError(Exception):
    """A build that cannot proceed; the message says what to do."""


def _say(msg):
    print(f"fsdp-skill: {msg}", file=sys.stderr, flush=True)


def _api_pages_version(api_dir):
    """torch version the generated docstring pages were built from, or None when there are
    none or another engine version made them."""
    marker = Path(api_dir) / API_MARKER
    if not marker.exists():
        return None
    version, _, engine = marker.read_text().strip().partition("\n")
    return version if engine == ENGINE else None


def build_docstring_pages(api_dir, progress=_say):
    """(Re)generate references/api from the installed torch, swapping the folder in whole."""
    try:
        import torch
    except ImportError:
        raise BuildError("building the API references needs torch: pip install torch") from None
    from fsdp_skill.sources.docstrings import build_pages

    api_dir = Path(api_dir)
    api_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".api-new-", dir=api_dir.parent))
    files.public_mode(tmp, directory=True)
    try:
        with warnings.catch_warnings():
            # Touching deprecated aliases (torch.distributed.reduce_op) warns; not the user's concern.
            warnings.simplefilter("ignore")
            build_pages(tmp, str(torch.__version__), progress=None)
        (tmp / API_MARKER).write_text(f"{torch.__version__}\n{ENGINE}")
        _swap_dir(tmp, api_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"wrote API reference pages for torch {torch.__version__} to {api_dir}")


def _swap_dir(new, target):
    """Put folder `new` at `target`, replacing it (in one atomic exchange where the OS has
    one, see fsdp_skill.files); the old tree is removed afterwards."""
    target = Path(target)
    previous = files.swap_in(
        Path(new), target, target.with_name(f".{target.name}-old-{os.getpid()}")
    )
    if previous is not None:
        files.rmtree(previous)


def collect_chunks(dirs):
    """All chunks of all pages in `dirs` ({source: folder}), web pages shadowing docstring pages."""
    from fsdp_skill.chunking import chunk_page
    from fsdp_skill.pages import PageError

    chunks, web_pages, stale_web = [], set(), set()
    api_version = _api_pages_version(dirs["docstring"]) if dirs.get("docstring") else None
    api_release = _release(api_version) if api_version else None
    for source in ("guide", "web", "docstring"):
        folder = dirs.get(source)
        if not folder or not os.path.isdir(folder):
            continue
        for path in sorted(Path(folder).rglob("*.md")):
            if any(part.startswith(".") for part in path.relative_to(folder).parts):
                continue
            try:
                page_chunks = chunk_page(path)
            except PageError as exc:
                raise BuildError(f"bad reference page: {exc}") from None
            except UnicodeDecodeError:
                raise BuildError(f"bad reference page: {path} is not UTF-8 text") from None
            for c in page_chunks:
                d = c.to_dict()
                d["flags"] = ""
                if source == "web" and api_release and _release(c.torch_version) != api_release:
                    # Scraped for another torch than the installed one: searchable with
                    # `--source web`, but it must not replace the current API pages.
                    d["flags"] = "stale"
                    stale_web.add(c.torch_version)
                elif source == "web":
                    web_pages.add(c.page)
                elif source == "docstring" and c.page in web_pages:
                    # The scraped page replaces this one by default; `--source docstring` finds it.
                    d["flags"] = "shadowed"
                chunks.append(d)
    if stale_web:
        _say(
            f"note: scraped pages describe torch {', '.join(sorted(stale_web))}, the API pages torch "
            f"{api_version}; searching the API pages by default (refresh: fsdp-skill scrape --version "
            f"{api_release})"
        )
    return chunks


def _release(version):
    """'2.13.0+cpu' -> '2.13'; the docs site has one page set per major.minor."""
    return ".".join(str(version).split("+")[0].split(".")[:2])


def content_hash(dirs):
    h = hashlib.sha256()
    for source in sorted(dirs):
        folder = dirs[source]
        if not os.path.isdir(folder):
            continue
        for path in sorted(Path(folder).rglob("*.md")):
            h.update(str(path.relative_to(folder)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def build_index(
    refs_root, index_dir, *, web_dir=None, guides_dir=None, torch_version=None, variant=None
):
    """Index the pages under refs_root (api/, guides/, web/) into index_dir; returns the manifest.

    web_dir / guides_dir override where those pages are read from (the scraper indexes a new
    web tree before swapping it in). Writes index.bin and manifest.json atomically.
    """
    from fsdp_skill.index import builder

    refs_root = Path(refs_root)
    dirs = {
        "docstring": str(refs_root / paths.SOURCE_DIRS["docstring"]),
        "guide": str(guides_dir or (refs_root / paths.SOURCE_DIRS["guide"])),
        "web": str(web_dir or (refs_root / paths.SOURCE_DIRS["web"])),
    }
    started = time.perf_counter()
    # Stamp before reading: a page edited during the build then makes the index stale.
    stamp = paths.fingerprint(dirs)
    chunks = collect_chunks(dirs)
    if not chunks:
        raise BuildError(f"no reference pages found under {refs_root}")
    version = torch_version or _api_pages_version(dirs["docstring"]) or "none"
    manifest = {
        "engine": ENGINE,
        "torch_version": version,
        "content_hash": content_hash(dirs),
        "chunks": len(chunks),
        "sources": {
            s: sum(1 for c in chunks if c["source"] == s) for s in ("docstring", "web", "guide")
        },
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    header = {k: str(v) for k, v in manifest.items() if k != "sources"}
    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    n_terms = builder.build(
        chunks,
        str(index_dir / paths.INDEX_FILE),
        header,
        stamp,
        variant=variant or builder.DEFAULT_VARIANT,
    )
    manifest["terms"] = n_terms
    manifest["variant"] = variant or builder.DEFAULT_VARIANT
    manifest["seconds"] = round(time.perf_counter() - started, 2)

    files.write_text(index_dir / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    return manifest


def ensure_index(root=None, progress=_say, force=False):
    """Return the path of a fresh index for the skill at `root`, building what is missing."""
    root = root or paths.skill_root()
    data = paths.data_dir(root)
    index_file = paths.index_path(root)
    dirs = paths.page_dirs(root)
    torch_version = paths.installed_torch_version()
    reason = "forced" if force else stale_reason(index_file, dirs, torch_version)
    if reason is None:
        return index_file
    if torch_version is None and _api_pages_version(dirs["docstring"]) is None:
        raise BuildError(
            "no usable index, and building one needs torch: pip install torch, then rerun"
        )
    try:
        os.makedirs(data, exist_ok=True)
    except OSError as exc:
        raise BuildError(
            f"cannot create {data} ({exc.strerror}); set FSDP_SKILL_DATA_DIR to a writable folder"
        ) from None
    with _build_lock(os.path.join(data, ".build.lock"), progress):
        # Another process may have built it while we waited for the lock.
        reason = "forced" if force else stale_reason(index_file, dirs, torch_version)
        if reason is None:
            return index_file
        _remove_leftovers(data)
        progress(f"building the search index ({reason})")
        api_dir = dirs["docstring"]
        api_version = _api_pages_version(api_dir)
        if force or api_version is None or (torch_version and api_version != torch_version):
            if torch_version is not None:
                build_docstring_pages(api_dir, progress)
        manifest = build_index(
            data,
            os.path.dirname(index_file),
            guides_dir=dirs["guide"],
            torch_version=torch_version or _api_pages_version(api_dir),
        )
        progress(
            f"indexed {manifest['chunks']} chunks ({manifest['terms']} terms) in {manifest['seconds']} s"
        )
    compile_query_path()
    return index_file


# A build takes seconds; a lock held this long means a stuck or stopped process.
def _lock_timeout():
    try:
        return max(float(os.environ.get("FSDP_SKILL_LOCK_TIMEOUT_S", "300")), 0.0)
    except ValueError:
        return 300.0


@contextmanager
def _build_lock(path, progress):
    """Hold the build lock, saying so when another build holds it, and never wait without end."""
    from filelock import FileLock, Timeout

    limit = _lock_timeout()
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress(
            f"waiting for another build of the index to finish (lock {path}, up to {limit:g} s)"
        )
        try:
            lock.acquire(timeout=limit)
        except Timeout:
            raise BuildError(
                f"another process has held {path} for over {limit:g} s; "
                "stop it (or, if none is running, retry)"
            ) from None
    try:
        yield
    finally:
        lock.release()


def _remove_leftovers(data):
    """Delete temp folders and files a killed build left behind; called under the build lock,
    when no other build can be using them."""
    for folder in (Path(data), Path(data) / "index"):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if p.name.startswith((".api-new-", ".api-old-")) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif (
                p.name.startswith((f".{paths.INDEX_FILE}.tmp-", f"{paths.INDEX_FILE}.tmp-"))
                and p.is_file()
            ):
                p.unlink(missing_ok=True)


def compile_query_path():
    """Byte-compile this package, so each query skips compiling it (~5 ms) even where
    PYTHONDONTWRITEBYTECODE stops the interpreter from caching it. Best effort."""
    import compileall

    try:
        compileall.compile_dir(os.path.dirname(os.path.abspath(__file__)), quiet=2)
    except OSError:
        pass
