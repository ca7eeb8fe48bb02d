"""Scrape orchestration: fetch, convert, check, then swap references/web + index atomically."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from filelock import FileLock, Timeout

from .config import ScrapeConfig
from .fetch import FetchError, PoliteClient, RawCache
from .html_to_md import ConversionError, ConvertedPage, convert_page
from .inventory import Inventory, InventoryError, parse_inventory
from .report import ChangeReport, diff_trees, read_tree

REPORT_FILE = ".scrape-report.json"
_UNSET = object()


class ScrapeError(RuntimeError):
    """The scrape failed; the previous references are untouched."""


@dataclass
class ScrapeResult:
    pages: int
    requests: int
    not_modified: int
    changed: bool
    report: ChangeReport
    uncovered: dict[str, list[str]] = field(default_factory=dict)  # page -> objects no chunk carries
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


def scrape(cfg: ScrapeConfig, refs_root: Path, *, cache_dir: Path | None = None,
           index_dir: Path | None = None, index_builder=_UNSET, chunker=_UNSET,
           client: PoliteClient | None = None,
           log: Callable[[str], None] | None = None) -> ScrapeResult:
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
    client = client or PoliteClient(cfg.client, cfg.hosts(), RawCache(cache_dir), log=log)
    try:
        pages, not_modified = _fetch_and_convert(cfg, client, log)
        uncovered = _check_coverage(pages, chunk)
        for page, names in uncovered.items():
            log(f"warning: {page}: {len(names)} objects.inv object(s) no chunk carries: "
                + ", ".join(names[:8]) + (" ..." if len(names) > 8 else ""))
        new_files = {page + ".md": conv.markdown.encode("utf-8") for page, (_, conv) in pages.items()}
        old_tree = read_tree(web_dir)
        index_ok = builder is None or index_dir.is_dir()
        if index_ok and _same_pages(web_dir, new_files):
            report = ChangeReport.empty(len(new_files), old_tree)
            log(f"scrape: no change in {len(new_files)} pages; nothing rewritten")
            return ScrapeResult(len(pages), client.request_count, not_modified, False, report,
                                uncovered, False, time.monotonic() - started)
        report = diff_trees(old_tree, {k: v.decode("utf-8") for k, v in new_files.items()})
        built = _refresh(refs_root, web_dir, index_dir, new_files, report, builder, chunk, log)
        return ScrapeResult(len(pages), client.request_count, not_modified, True, report,
                            uncovered, built, time.monotonic() - started)
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


def _fetch_and_convert(cfg: ScrapeConfig, client: PoliteClient, log):
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
        log(f"[{i}/{total}] {spec.page}: "
            + ("304 unchanged" if res.status == 304 else f"{res.status} {len(res.body) // 1024} KiB"))
        inv = inventories[spec.is_tutorial]
        inv_names = [o.name for o in inv.by_page().get(spec.page, [])]
        try:
            conv = convert_page(res.body, page=spec.page, url=cfg.public_url(spec),
                                torch_version=torch_version, category=spec.category,
                                anchor_names=inv.names_by_anchor(spec.page), api_names=api_names)
        except ConversionError as exc:
            raise ScrapeError(f"page {spec.page} ({url}): {exc}") from None
        pages[spec.page] = (inv_names, conv)
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

def _refresh(refs_root: Path, web_dir: Path, index_dir: Path, new_files: dict[str, bytes],
             report: ChangeReport, builder, chunk, log) -> bool:
    stage = Path(tempfile.mkdtemp(prefix=".scrape-", dir=refs_root))
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
            if not isinstance(manifest, dict) or not new_index.is_dir() or not any(new_index.iterdir()):
                raise ScrapeError("index build produced no index")
        else:
            log("warning: no index builder available (fsdp_skill.build); index not rebuilt")
        _swap(stage, [(new_web, web_dir)] + ([(new_index, index_dir)] if new_index else []))
        log("scrape: " + report.summary())
        return new_index is not None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _swap(stage: Path, pairs: list[tuple[Path, Path]]) -> None:
    """Rename each new folder over its live one; on any failure put the old ones back."""
    done: list[tuple[Path, Path | None]] = []
    try:
        for n, (new, live) in enumerate(pairs):
            old = None
            if live.exists():
                old = stage / f"old-{n}"
                os.replace(live, old)
            done.append((live, old))
            os.replace(new, live)
    except OSError as exc:
        for live, old in reversed(done):
            if old is not None and old.exists():
                if live.exists():
                    shutil.rmtree(live, ignore_errors=True)
                os.replace(old, live)
        raise ScrapeError(f"could not swap in the new references: {exc}") from None

