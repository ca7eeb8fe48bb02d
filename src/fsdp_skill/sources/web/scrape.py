"""Scrape orchestration: fetch, convert, check, then swap references/web + index atomically."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from fsdp_skill import files
from fsdp_skill.sources.web.config import ScrapeConfig
from fsdp_skill.sources.web.fetch import FetchError, PoliteClient, RawCache
from fsdp_skill.sources.web.html_to_md import ConversionError, ConvertedPage, convert_page
from fsdp_skill.sources.web.inventory import Inventory, InventoryError, parse_inventory
from fsdp_skill.sources.web.report import ChangeReport, diff_trees, read_tree

REPORT_FILE = ".scrape-report.json"
_UNSET = object()
# Names this module writes and may therefore remove: stage folders in refs_root (mkdtemp's
# 8-character suffix), and in the index folder the files being copied in and the previous
# index files kept until the swap is done.
_STAGE_PREFIX = ".scrape-"
_STAGE_RE = re.compile(r"^\.scrape-[a-z0-9_]{8}$")
_INDEX_SIDE_RE = re.compile(r"^\.(?P<name>.+)\.scrape-(?P<kind>tmp|old)-[0-9a-f]{8}$")


class ScrapeError(RuntimeError):
    """The scrape failed; the previous references are untouched."""


@dataclass
class ScrapeResult:
    pages: int
    requests: int
    not_modified: int
    changed: bool
    report: ChangeReport
    uncovered: dict[str, list[str]] = field(
        default_factory=dict
    )  # page -> objects no chunk carries
    index_built: bool = False
    seconds: float = 0.0


def default_index_builder() -> Callable | None:
    try:
        from fsdp_skill.build import build_index  # the lead's index builder
    except ImportError:
        return None
    return build_index


def default_chunker() -> Callable | None:
    try:
        from fsdp_skill.chunking import chunk_page
    except ImportError:
        return None
    return chunk_page


def scrape(
    cfg: ScrapeConfig,
    refs_root: Path,
    *,
    cache_dir: Path | None = None,
    index_dir: Path | None = None,
    index_builder=_UNSET,
    chunker=_UNSET,
    client: PoliteClient | None = None,
    log: Callable[[str], None] | None = None,
) -> ScrapeResult:
    """Scrape every configured page and refresh refs_root/web and the index.

    Nothing under refs_root changes unless every page was fetched, converted and indexed;
    a refresh whose pages come out byte-identical rewrites no file at all.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr))
    started = time.monotonic()
    refs_root = Path(refs_root)
    refs_root.mkdir(parents=True, exist_ok=True)
    web_dir = refs_root / "web"
    index_dir = Path(index_dir) if index_dir else refs_root / "index"
    cache_dir = Path(cache_dir) if cache_dir else refs_root / ".cache" / "web"
    builder = default_index_builder() if index_builder is _UNSET else index_builder
    chunk = default_chunker() if chunker is _UNSET else chunker

    lock = FileLock(str(refs_root / ".scrape.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ScrapeError(f"another scrape holds {refs_root / '.scrape.lock'}") from None
    own_client = client is None
    try:
        _recover(refs_root, web_dir, index_dir, log)
        if index_dir.exists() and not index_dir.is_dir():
            raise ScrapeError(f"index folder {index_dir} exists and is not a folder")
        client = client or PoliteClient(cfg.client, cfg.hosts(), RawCache(cache_dir), log=log)
    except BaseException:
        lock.release()
        raise
    deadline = started + cfg.client.run_deadline_s
    client.run_deadline = deadline
    try:
        pages, not_modified = _fetch_and_convert(cfg, client, log, deadline)
        uncovered = _check_coverage(pages, chunk)
        for page, names in uncovered.items():
            log(
                f"warning: {page}: {len(names)} objects.inv object(s) no chunk carries: "
                + ", ".join(names[:8])
                + (" ..." if len(names) > 8 else "")
            )
        new_files = {
            page + ".md": conv.markdown.encode("utf-8") for page, (_, conv) in pages.items()
        }
        old_tree = read_tree(web_dir)
        index_ok = builder is None or index_dir.is_dir()
        if index_ok and _same_pages(web_dir, new_files):
            report = ChangeReport.empty(len(new_files), old_tree)
            log(f"scrape: no change in {len(new_files)} pages; nothing rewritten")
            return ScrapeResult(
                len(pages),
                client.request_count,
                not_modified,
                False,
                report,
                uncovered,
                False,
                time.monotonic() - started,
            )
        report = diff_trees(old_tree, {k: v.decode("utf-8") for k, v in new_files.items()})
        built = _refresh(refs_root, web_dir, index_dir, new_files, report, builder, chunk, log)
        return ScrapeResult(
            len(pages),
            client.request_count,
            not_modified,
            True,
            report,
            uncovered,
            built,
            time.monotonic() - started,
        )
    finally:
        if own_client:
            client.close()
        lock.release()


# ---- fetching + conversion -------------------------------------------------------------------


def _load_inventory(cfg: ScrapeConfig, client: PoliteClient, tutorial: bool) -> Inventory:
    fetch_url, public_base = cfg.inventory_urls(tutorial)
    res = client.fetch(fetch_url)
    try:
        return parse_inventory(res.body, public_base, page_prefix="tutorials/" if tutorial else "")
    except InventoryError as exc:
        raise ScrapeError(f"{fetch_url}: {exc}") from None


def _recover(refs_root: Path, web_dir: Path, index_dir: Path, log) -> None:
    """Clear what a killed scrape left behind; called under the scrape lock.

    Stage folders go. Where the OS has no atomic folder swap, a kill between its two renames
    leaves web/ missing and the previous tree in the stage folder: that tree is put back first.
    """
    stages = [
        p
        for p in refs_root.iterdir()
        if _STAGE_RE.match(p.name) and p.is_dir() and not p.is_symlink()
    ]
    stages.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for stage in stages:
        for name in ("old-web", "old-0"):  # old-0: the name earlier versions used
            old = stage / name
            if not os.path.lexists(web_dir) and old.is_dir() and not old.is_symlink():
                os.rename(old, web_dir)
                log(f"scrape: put back {web_dir}, which an interrupted scrape had moved aside")
        files.rmtree(stage)
    if not index_dir.is_dir():
        return
    for side in index_dir.iterdir():
        m = _INDEX_SIDE_RE.match(side.name)
        if not m or side.is_symlink() or not side.is_file():
            continue
        live = index_dir / m.group("name")
        if m.group("kind") == "old" and not os.path.lexists(live):
            os.replace(side, live)
        else:
            side.unlink()


def _fetch_and_convert(cfg: ScrapeConfig, client: PoliteClient, log, deadline: float | None = None):
    inventories: dict[bool, Inventory] = {}
    for tutorial in sorted({spec.is_tutorial for spec in cfg.pages}):
        try:
            inventories[tutorial] = _load_inventory(cfg, client, tutorial)
        except FetchError as exc:
            raise ScrapeError(f"objects.inv: {exc}") from None
    docs_inv = inventories.get(False)
    # "stable"/"main" name no release; the inventory of the docs says which one they describe.
    if cfg.version[0].isdigit() or docs_inv is None:
        torch_version = cfg.version
    else:
        torch_version = docs_inv.version or cfg.version

    api_names = {o.name for inv in inventories.values() for o in inv.objects}
    pages: dict[str, tuple[list[str], ConvertedPage]] = {}
    not_modified = 0
    total = len(cfg.pages)
    for i, spec in enumerate(cfg.pages, 1):
        url = cfg.fetch_url(spec)
        try:
            res = client.fetch(url)
        except FetchError as exc:
            raise ScrapeError(f"page {spec.page}: {exc}") from None
        not_modified += res.status == 304
        log(
            f"[{i}/{total}] {spec.page}: "
            + (
                "304 unchanged"
                if res.status == 304
                else f"{res.status} {len(res.body) // 1024} KiB"
            )
        )
        inv = inventories[spec.is_tutorial]
        inv_names = [o.name for o in inv.by_page().get(spec.page, [])]
        try:
            conv = convert_page(
                res.body,
                page=spec.page,
                url=cfg.public_url(spec),
                torch_version=torch_version,
                category=spec.category,
                anchor_names=inv.names_by_anchor(spec.page),
                api_names=api_names,
            )
        except ConversionError as exc:
            raise ScrapeError(f"page {spec.page} ({url}): {exc}") from None
        pages[spec.page] = (inv_names, conv)
        if deadline is not None and time.monotonic() > deadline and i < total:
            raise ScrapeError(
                f"the scrape ran past its {cfg.client.run_deadline_s:g} s deadline "
                f"(client run_deadline_s) after {i} of {total} pages"
            )
    return pages, not_modified


def _check_coverage(pages, chunk) -> dict[str, list[str]]:
    """objects.inv objects of each page that no chunk lists in `objects`."""
    uncovered: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="fsdp-scrape-check-") as tmp:
        for page, (inv_names, conv) in pages.items():
            if not inv_names:
                continue
            carried = set(conv.objects)
            if chunk is not None:
                path = Path(tmp) / (page.replace("/", "__") + ".md")
                path.write_text(conv.markdown, encoding="utf-8")
                carried = {o for c in chunk(path) for o in (getattr(c, "objects", None) or [])}
            missing = sorted(set(inv_names) - carried)
            if missing:
                uncovered[page] = missing
    return uncovered


def _same_pages(web_dir: Path, new_files: dict[str, bytes]) -> bool:
    if not web_dir.is_dir():
        return False
    old = {p.relative_to(web_dir).as_posix() for p in web_dir.rglob("*.md")}
    if old != set(new_files):
        return False
    for rel, data in new_files.items():
        path = web_dir / rel
        if path.stat().st_size != len(data) or path.read_bytes() != data:
            return False
    return True


# ---- atomic refresh --------------------------------------------------------------------------


def _refresh(
    refs_root: Path,
    web_dir: Path,
    index_dir: Path,
    new_files: dict[str, bytes],
    report: ChangeReport,
    builder,
    chunk,
    log,
) -> bool:
    stage = Path(tempfile.mkdtemp(prefix=_STAGE_PREFIX, dir=refs_root))
    try:
        new_web = stage / "web"
        for rel, data in new_files.items():
            path = new_web / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (new_web / REPORT_FILE).write_text(json.dumps(report.as_dict(), indent=1), encoding="utf-8")
        if chunk is not None:
            for rel in new_files:
                try:
                    chunks = chunk(new_web / rel)
                except Exception as exc:  # the chunker's own errors: report, do not swap
                    raise ScrapeError(f"page {rel}: the chunker rejected it: {exc}") from None
                if not chunks:
                    raise ScrapeError(f"page {rel}: produced no chunks")
        new_index = None
        if builder is not None:
            new_index = stage / "index"
            log("scrape: building the index")
            try:
                manifest = builder(refs_root, new_index, web_dir=new_web)
            except Exception as exc:
                raise ScrapeError(f"index build failed: {type(exc).__name__}: {exc}") from None
            if (
                not isinstance(manifest, dict)
                or not new_index.is_dir()
                or not any(new_index.iterdir())
            ):
                raise ScrapeError("index build produced no index")
        else:
            log("warning: no index builder available (fsdp_skill.build); index not rebuilt")
        _swap(stage, new_web, web_dir, new_index, index_dir)
        log("scrape: " + report.summary())
        return new_index is not None
    finally:
        files.rmtree(stage)


def _swap(
    stage: Path, new_web: Path, web_dir: Path, new_index: Path | None, index_dir: Path
) -> None:
    """Put the new web tree and index in place; on any failure put the old ones back.

    web/ is ours, so it is swapped whole, in one atomic step where the OS can. The index folder
    may be a user's --index-dir holding other files, so only the files the builder wrote are
    moved into it, one atomic rename each; nothing else in it is touched.
    """
    try:
        previous = files.swap_in(new_web, web_dir, stage / "old-web")
    except OSError as exc:
        raise ScrapeError(f"could not swap in the new references: {exc}") from None
    try:
        if new_index is not None:
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
