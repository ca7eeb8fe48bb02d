"""Pipeline driver: sources -> pages -> chunks -> index, rebuilt only when stale.

The index is fresh when it was built for the installed torch and from exactly the page files
present now (their fingerprint, see fsdp_skill.freshness). Two entry points change the pages
and the index, and both hold the one build lock (`.build.lock` in the data folder) while they
do, so concurrent first searches build once and a search never rebuilds beside a scrape:

- `ensure_index`: regenerate the API pages from the installed torch when they are missing or
  outdated, then the index.
- `refresh_web`: the scraper's new pages for references/web/ (fetched and converted by
  fsdp_skill.sources.web.scrape), checked, indexed and swapped in together with the index.

Everything is written into temp paths and renamed into place, so nobody reads half a file and a
kill at any point leaves the previous pages and index in use; the next holder of the lock
clears what a killed run left behind.

The stage modules (sources, chunking, pages, index.builder) are imported where they are used:
`ensure_index` on a fresh index, which every `fsdp-skill build` and the query path's staleness
fallback start with, needs none of them.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fsdp_skill import files, paths, view
from fsdp_skill.freshness import ENGINE, fingerprint, stale_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from fsdp_skill.sources.web.config import ScrapeConfig
    from fsdp_skill.sources.web.fetch import PoliteClient
    from fsdp_skill.sources.web.report import ChangeReport
    from fsdp_skill.sources.web.scrape import ScrapedSite

# Which torch (and engine) made references/api/; not a page (no .md), so never indexed.
API_MARKER = "build-info.txt"
# The one lock for the pages and the index of a data folder, whoever changes them.
LOCK_FILE = ".build.lock"
# Names the web refresh writes and may therefore remove: stage folders in the data folder
# (mkdtemp's 8-character suffix), and in the index folder the files being copied in and the
# previous index files kept until the swap is done.
_STAGE_PREFIX = ".scrape-"
_STAGE_RE = re.compile(r"^\.scrape-[a-z0-9_]{8}$")
_INDEX_SIDE_RE = re.compile(r"^\.(?P<name>.+)\.scrape-(?P<kind>tmp|old)-[0-9a-f]{8}$")


class BuildError(Exception):
    """A build that cannot proceed; the message says what to do."""


def _say(msg: str) -> None:
    print(f"fsdp-skill: {msg}", file=sys.stderr, flush=True)


def _api_pages_version(api_dir: str | os.PathLike[str]) -> str | None:
    """torch version the generated docstring pages were built from, or None when there are
    none or another engine version made them."""
    marker = Path(api_dir) / API_MARKER
    if not marker.exists():
        return None
    version, _, engine = marker.read_text().strip().partition("\n")
    return version if engine == ENGINE else None


def build_docstring_pages(
    api_dir: str | os.PathLike[str], progress: Callable[[str], None] = _say
) -> None:
    """(Re)generate references/api from the installed torch, swapping the folder in whole."""
    try:
        import torch
    except ImportError:  # a dependency the query path can run without; these pages need it
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


def _swap_dir(new: Path, target: str | os.PathLike[str]) -> None:
    """Put folder `new` at `target`, replacing it (in one atomic exchange where the OS has
    one, see fsdp_skill.files); the old tree is removed afterwards."""
    target = Path(target)
    previous = files.swap_in(
        Path(new), target, target.with_name(f".{target.name}-old-{os.getpid()}")
    )
    if previous is not None:
        files.rmtree(previous)


def page_path(source: str, rel: str | os.PathLike[str]) -> str:
    """Where a reader finds a page in the skill (each chunk's `path` field): references/<the
    source's folder>/<the page's path in it>, wherever the data folder really is."""
    return f"references/{paths.SOURCE_DIRS[source]}/{Path(rel).as_posix()}"


def collect_chunks(dirs: dict[str, str]) -> list[dict[str, object]]:
    """All chunks of all pages in `dirs` ({source: folder}), flagged for the default search
    view (see fsdp_skill.view)."""
    from fsdp_skill.chunking import chunk_page
    from fsdp_skill.pages import PageError

    by_source: dict[str, list[dict[str, object]]] = {}
    for source in ("guide", "web", "docstring"):
        folder = dirs.get(source)
        if not folder or not os.path.isdir(folder):
            continue
        found = by_source.setdefault(source, [])
        for path in sorted(Path(folder).rglob("*.md")):
            rel = path.relative_to(folder)
            if any(part.startswith(".") for part in rel.parts):
                continue
            try:
                page_chunks = chunk_page(path, page_path(source, rel))
            except PageError as exc:
                raise BuildError(f"bad reference page: {exc}") from None
            except UnicodeDecodeError:
                raise BuildError(f"bad reference page: {path} is not UTF-8 text") from None
            found.extend(c.to_dict() for c in page_chunks)
    api_version = _api_pages_version(dirs["docstring"]) if dirs.get("docstring") else None
    stale = view.assign_flags(by_source, api_version)
    if stale:
        _say(
            f"note: scraped pages describe torch {', '.join(sorted(stale))}, the API pages torch "
            f"{api_version}; searching the API pages by default (refresh: fsdp-skill scrape "
            f"--version {view.release(api_version)})"
        )
    return [c for source_chunks in by_source.values() for c in source_chunks]


def content_hash(dirs: dict[str, str]) -> str:
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
    refs_root: str | os.PathLike[str],
    index_dir: str | os.PathLike[str],
    *,
    web_dir: str | os.PathLike[str] | None = None,
    guides_dir: str | os.PathLike[str] | None = None,
    torch_version: str | None = None,
    variant: str | None = None,
) -> dict[str, object]:
    """Index the pages under refs_root (api/, guides/, web/) into index_dir; returns the manifest.

    web_dir / guides_dir override where those pages are read from (refresh_web indexes a new
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
    stamp = fingerprint(dirs)
    chunks = collect_chunks(dirs)
    if not chunks:
        raise BuildError(f"no reference pages found under {refs_root}")
    version = torch_version or _api_pages_version(dirs["docstring"]) or "none"
    manifest: dict[str, object] = {
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


def ensure_index(
    root: str | None = None, progress: Callable[[str], None] = _say, force: bool = False
) -> str:
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
    with _build_lock(os.path.join(data, LOCK_FILE), progress):
        # Another process may have built it while we waited for the lock.
        reason = "forced" if force else stale_reason(index_file, dirs, torch_version)
        if reason is None:
            return index_file
        _remove_leftovers(Path(data), Path(index_file).parent, progress)
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


# ---- the scraped pages ------------------------------------------------------------------------


@dataclass
class ScrapeResult:
    """What refresh_web did."""

    pages: int  # pages scraped
    requests: int  # HTTP requests sent, objects.inv included
    not_modified: int  # pages the server answered 304 for
    changed: bool  # whether references/web and the index were replaced
    report: ChangeReport  # what the new pages change against the previous ones
    uncovered: dict[str, list[str]] = field(default_factory=dict)  # page -> objects no chunk has
    index_built: bool = False
    seconds: float = 0.0


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


def refresh_web(
    cfg: ScrapeConfig,
    refs_root: str | os.PathLike[str],
    *,
    index_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    guides_dir: str | os.PathLike[str] | None = None,
    client: PoliteClient | None = None,
    index_builder: Callable[..., object] | None = None,
    log: Callable[[str], None] | None = None,
) -> ScrapeResult:
    """Scrape the docs site into refs_root/web and rebuild the index with it, all or nothing.

    Nothing under refs_root changes unless every page was fetched, converted, chunked and
    indexed; a refresh whose pages come out byte-identical rewrites no file at all.

    The pages are fetched and converted first, in memory and without the lock: that takes
    minutes, and a search that has to rebuild the index meanwhile must not wait on the network.
    Writing the new tree, building the index from it (plus the other page folders) and
    swapping both in then happen under the build lock, so that no stage folder exists but
    while its writer holds the lock, and whoever takes the lock next may remove what it finds.

    index_dir defaults to refs_root/index, cache_dir (the raw page cache) to
    refs_root/.cache/web, guides_dir to refs_root/guides. index_builder replaces build_index
    (same call, without guides_dir unless one is given).
    """
    from fsdp_skill.sources.web.scrape import ScrapeError, fetch_site

    log = log or _stderr
    started = time.monotonic()
    refs_root = Path(refs_root)
    refs_root.mkdir(parents=True, exist_ok=True)
    web_dir = refs_root / paths.SOURCE_DIRS["web"]
    index_dir = Path(index_dir) if index_dir else refs_root / "index"
    cache_dir = Path(cache_dir) if cache_dir else refs_root / ".cache" / "web"
    lock = refs_root / LOCK_FILE

    with _build_lock(lock, log):
        # Before fetching: a killed run may have left web/ moved aside, and a scrape that then
        # fails must still leave it back in place.
        _remove_leftovers(refs_root, index_dir, log)
    if index_dir.exists() and not index_dir.is_dir():
        raise ScrapeError(f"index folder {index_dir} exists and is not a folder")
    site = fetch_site(cfg, cache_dir=cache_dir, client=client, log=log)
    uncovered = _check_web_pages(site)
    for page, names in uncovered.items():
        log(
            f"warning: {page}: {len(names)} objects.inv object(s) no chunk carries: "
            + ", ".join(names[:8])
            + (" ..." if len(names) > 8 else "")
        )

    with _build_lock(lock, log):
        _remove_leftovers(refs_root, index_dir, log)  # a run killed while we fetched
        report = site.report(web_dir)
        changed = not (index_dir.is_dir() and site.same_as(web_dir))
        if changed:
            _install_web(
                site, report, refs_root, web_dir, index_dir, guides_dir, index_builder, log
            )
        else:
            log(f"scrape: no change in {len(site.pages)} pages; nothing rewritten")
    return ScrapeResult(
        len(site.pages),
        site.requests,
        site.not_modified,
        changed,
        report,
        uncovered,
        changed,
        time.monotonic() - started,
    )


def _check_web_pages(site: ScrapedSite) -> dict[str, list[str]]:
    """Chunk every scraped page from its text and return, per page, the objects.inv objects no
    chunk carries. A page the chunker rejects, or that gives no chunk, fails the scrape."""
    from fsdp_skill.chunking import chunk_markdown
    from fsdp_skill.pages import parse_page
    from fsdp_skill.sources.web.scrape import ScrapeError

    uncovered: dict[str, list[str]] = {}
    for page, scraped in site.pages.items():
        rel = page + ".md"
        try:
            meta, body = parse_page(scraped.markdown, rel)
            chunks = chunk_markdown(meta, body, page_path("web", rel))
        except Exception as exc:  # the chunker's own errors: report, do not swap
            raise ScrapeError(f"page {rel}: the chunker rejected it: {exc}") from None
        if not chunks:
            raise ScrapeError(f"page {rel}: produced no chunks")
        missing = sorted(set(scraped.inventory_names) - {o for c in chunks for o in c.objects})
        if missing:
            uncovered[page] = missing
    return uncovered


def _install_web(
    site: ScrapedSite,
    report: ChangeReport,
    refs_root: Path,
    web_dir: Path,
    index_dir: Path,
    guides_dir: str | os.PathLike[str] | None,
    index_builder: Callable[..., object] | None,
    log: Callable[[str], None],
) -> None:
    """Stage the new web tree, index it with the other page folders, swap both in. Called
    under the build lock."""
    from fsdp_skill.sources.web.scrape import ScrapeError

    stage = Path(tempfile.mkdtemp(prefix=_STAGE_PREFIX, dir=refs_root))
    try:
        new_web = stage / "web"
        site.write(new_web, report)
        new_index = stage / "index"
        log("scrape: building the index")
        extra = {"guides_dir": guides_dir} if guides_dir else {}
        try:
            manifest = (index_builder or build_index)(
                refs_root, new_index, web_dir=new_web, **extra
            )
        except Exception as exc:
            raise ScrapeError(f"index build failed: {type(exc).__name__}: {exc}") from None
        if not isinstance(manifest, dict) or not new_index.is_dir() or not any(new_index.iterdir()):
            raise ScrapeError("index build produced no index")
        _swap_web_and_index(stage, new_web, web_dir, new_index, index_dir)
        log("scrape: " + report.summary())
    finally:
        files.rmtree(stage)


def _swap_web_and_index(
    stage: Path, new_web: Path, web_dir: Path, new_index: Path, index_dir: Path
) -> None:
    """Put the new web tree and index in place; on any failure put the old ones back.

    web/ is ours, so it is swapped whole, in one atomic step where the OS can. The index folder
    may be a user's --index-dir holding other files, so only the files the builder wrote are
    moved into it, one atomic rename each; nothing else in it is touched.
    """
    from fsdp_skill.sources.web.scrape import ScrapeError

    try:
        previous = files.swap_in(new_web, web_dir, stage / "old-web")
    except OSError as exc:
        raise ScrapeError(f"could not swap in the new references: {exc}") from None
    try:
        _install_files(new_index, index_dir)
    except BaseException as exc:
        try:
            files.swap_back(web_dir, previous)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ScrapeError(f"could not swap in the new index: {exc}") from None
        raise


def _side_name(live: Path, kind: str) -> Path:
    return live.with_name(f".{live.name}.scrape-{kind}-{secrets.token_hex(4)}")


def _install_files(src_dir: Path, dest_dir: Path) -> None:
    """Move every file under src_dir to the same place under dest_dir, all or none."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    done: list[tuple[Path, Path | None]] = []  # (live file, its previous content's copy)
    try:
        for src in sorted(p for p in src_dir.rglob("*") if p.is_file()):
            live = dest_dir / src.relative_to(src_dir)
            if live.is_dir() and not live.is_symlink():
                raise OSError(errno.EISDIR, "a folder is in the way", str(live))
            live.parent.mkdir(parents=True, exist_ok=True)
            backup = None
            if os.path.lexists(live):
                backup = _side_name(live, "old")
                try:
                    os.link(live, backup, follow_symlinks=False)
                except OSError:
                    shutil.copy2(live, backup, follow_symlinks=False)
            done.append((live, backup))
            try:
                os.replace(src, live)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                tmp = _side_name(live, "tmp")  # another filesystem: copy beside it, then rename
                try:
                    shutil.copy2(src, tmp)
                    os.replace(tmp, live)
                finally:
                    if os.path.lexists(tmp):
                        os.unlink(tmp)
    except BaseException:
        for live, backup in reversed(done):
            try:
                if backup is not None and os.path.lexists(live) and os.path.samefile(backup, live):
                    os.unlink(backup)  # never replaced; and rename() between two links is a no-op
                elif backup is not None:
                    os.replace(backup, live)
                elif os.path.lexists(live):
                    os.unlink(live)
            except OSError:
                pass
        raise
    for _, backup in done:
        if backup is not None:
            try:
                os.unlink(backup)
            except OSError:
                pass


# ---- the lock, and what killed runs leave behind --------------------------------------------


# A build takes seconds; a lock held this long means a stuck or stopped process.
def _lock_timeout() -> float:
    try:
        return max(float(os.environ.get("FSDP_SKILL_LOCK_TIMEOUT_S", "300")), 0.0)
    except ValueError:
        return 300.0


@contextmanager
def _build_lock(path: str | os.PathLike[str], progress: Callable[[str], None]) -> Iterator[None]:
    """Hold the build lock, saying so when another build holds it, and never wait without end."""
    from filelock import FileLock, Timeout

    limit = _lock_timeout()
    lock = FileLock(str(path))
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


def _remove_leftovers(data: Path, index_dir: Path, log: Callable[[str], None]) -> None:
    """Clear what a killed build or scrape left in the data folder and the index folder.

    Called under the build lock: every temp path below is only ever created by a holder of the
    lock, so none of them belongs to a running process. Where the OS has no atomic folder swap,
    a kill between its two renames leaves web/ missing and the previous tree in the stage
    folder: that tree is put back first.
    """
    if not data.is_dir():
        return
    web_dir = data / paths.SOURCE_DIRS["web"]
    stages = []
    for p in data.iterdir():
        if p.name.startswith((".api-new-", ".api-old-")) and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        elif _STAGE_RE.match(p.name) and p.is_dir() and not p.is_symlink():
            stages.append(p)
    stages.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for stage in stages:
        for name in ("old-web", "old-0"):  # old-0: the name earlier versions used
            old = stage / name
            if not os.path.lexists(web_dir) and old.is_dir() and not old.is_symlink():
                os.rename(old, web_dir)
                log(f"scrape: put back {web_dir}, which an interrupted scrape had moved aside")
        files.rmtree(stage)
    # Temp files of index.bin (fsdp_skill.files names them), where ensure_index writes it.
    for folder in (data, data / "index"):
        if folder.is_dir():
            for p in folder.iterdir():
                if (
                    p.name.startswith((f".{paths.INDEX_FILE}.tmp-", f"{paths.INDEX_FILE}.tmp-"))
                    and p.is_file()
                ):
                    p.unlink(missing_ok=True)
    # Side files of a refresh_web killed while it moved the new index files in.
    if index_dir.is_dir():
        for side in index_dir.iterdir():
            m = _INDEX_SIDE_RE.match(side.name)
            if not m or side.is_symlink() or not side.is_file():
                continue
            live = index_dir / m.group("name")
            if m.group("kind") == "old" and not os.path.lexists(live):
                os.replace(side, live)
            else:
                side.unlink()


def compile_query_path() -> None:
    """Byte-compile this package, so each query skips compiling it (~5 ms) even where
    PYTHONDONTWRITEBYTECODE stops the interpreter from caching it. Best effort."""
    import compileall

    try:
        compileall.compile_dir(os.path.dirname(os.path.abspath(__file__)), quiet=2)
    except OSError:
        pass
