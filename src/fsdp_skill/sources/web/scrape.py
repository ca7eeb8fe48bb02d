"""Scrape the docs site: fetch every configured page with its objects.inv, convert it to a
reference page, and write the new page tree where the caller says.

This module produces pages and nothing else. Checking their chunks, indexing them and putting
the new tree and index in place is the pipeline driver's job (fsdp_skill.build.refresh_web),
under its build lock; nothing here takes a lock or changes references/web/.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fsdp_skill import files
from fsdp_skill.sources.web.config import ScrapeConfig
from fsdp_skill.sources.web.fetch import FetchError, PoliteClient, RawCache
from fsdp_skill.sources.web.html_to_md import ConversionError, convert_page
from fsdp_skill.sources.web.inventory import Inventory, InventoryError, parse_inventory
from fsdp_skill.sources.web.report import ChangeReport, diff_trees, read_tree

# Written into each new web/ tree: what the scrape that made it changed.
REPORT_FILE = ".scrape-report.json"


class ScrapeError(RuntimeError):
    """The scrape failed; the previous references are untouched."""


@dataclass
class ScrapedPage:
    markdown: str  # the page file's text, front matter included
    inventory_names: list[str]  # the objects.inv objects documented on this page


@dataclass
class ScrapedSite:
    """Every configured page, fetched and converted, in memory: nothing is written yet."""

    pages: dict[str, ScrapedPage]  # page key (its path under web/, without .md) -> page
    requests: int
    not_modified: int

    def files(self) -> dict[str, bytes]:
        """The page tree: path under web/ -> file bytes."""
        return {page + ".md": p.markdown.encode("utf-8") for page, p in self.pages.items()}

    def same_as(self, web_dir: Path) -> bool:
        """Whether the tree at web_dir holds exactly these page files, byte for byte."""
        if not web_dir.is_dir():
            return False
        new = self.files()
        old = {p.relative_to(web_dir).as_posix() for p in web_dir.rglob("*.md")}
        if old != set(new):
            return False
        for rel, data in new.items():
            path = web_dir / rel
            if path.stat().st_size != len(data) or path.read_bytes() != data:
                return False
        return True

    def report(self, web_dir: Path) -> ChangeReport:
        """What replacing the tree at web_dir (missing: empty) by these pages changes."""
        return diff_trees(
            read_tree(web_dir), {p + ".md": s.markdown for p, s in self.pages.items()}
        )

    def write(self, dest: Path, report: ChangeReport) -> None:
        """Write the page tree, and `report` beside it (REPORT_FILE), into the new folder dest."""
        for rel, data in self.files().items():
            files.write_bytes(dest / rel, data)
        files.write_text(dest / REPORT_FILE, json.dumps(report.as_dict(), indent=1))


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


def fetch_site(
    cfg: ScrapeConfig,
    *,
    cache_dir: Path | None = None,
    client: PoliteClient | None = None,
    log: Callable[[str], None] | None = None,
) -> ScrapedSite:
    """Fetch and convert every page of `cfg`, within its run deadline; ScrapeError on failure.

    cache_dir holds the raw pages between runs, so a refresh asks the server only whether they
    changed (None: no cache). A given `client` is used as it is and left open.
    """
    log = log or _stderr
    own_client = client is None
    client = client or PoliteClient(
        cfg.client, cfg.hosts(), RawCache(cache_dir) if cache_dir else None, log=log
    )
    deadline = time.monotonic() + cfg.client.run_deadline_s
    client.run_deadline = deadline
    try:
        pages, not_modified = _fetch_and_convert(cfg, client, log, deadline)
        return ScrapedSite(pages, client.request_count, not_modified)
    finally:
        if own_client:
            client.close()


def _load_inventory(cfg: ScrapeConfig, client: PoliteClient, tutorial: bool) -> Inventory:
    fetch_url, public_base = cfg.inventory_urls(tutorial)
    res = client.fetch(fetch_url)
    try:
        return parse_inventory(res.body, public_base, page_prefix="tutorials/" if tutorial else "")
    except InventoryError as exc:
        raise ScrapeError(f"{fetch_url}: {exc}") from None


def _fetch_and_convert(
    cfg: ScrapeConfig, client: PoliteClient, log: Callable[[str], None], deadline: float
) -> tuple[dict[str, ScrapedPage], int]:
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
    pages: dict[str, ScrapedPage] = {}
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
        inv_names = [o.name for o in inv.by_page().get(spec.page, [])]
        pages[spec.page] = ScrapedPage(conv.markdown, inv_names)
        if time.monotonic() > deadline and i < total:
            raise ScrapeError(
                f"the scrape ran past its {cfg.client.run_deadline_s:g} s deadline "
                f"(client run_deadline_s) after {i} of {total} pages"
            )
    return pages, not_modified
