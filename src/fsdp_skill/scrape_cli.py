"""`fsdp-skill scrape`: refresh references/web from docs.pytorch.org (or a mirror), then the index.

The command sits beside the pipeline driver rather than in sources/web/: the scraper there only
produces pages, and fsdp_skill.build.refresh_web checks, indexes and swaps them in.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsdp_skill import paths
from fsdp_skill.argparsing import OneLineParser
from fsdp_skill.build import BuildError, refresh_web
from fsdp_skill.sources.web.config import ConfigError, load_config
from fsdp_skill.sources.web.fetch import FetchError
from fsdp_skill.sources.web.html_to_md import ConversionError
from fsdp_skill.sources.web.inventory import InventoryError
from fsdp_skill.sources.web.scrape import ScrapeError

PROG = "fsdp-skill scrape"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Scrape the PyTorch distributed docs and tutorials into references/web/ "
        "and rebuild the index; the previous references keep serving on any failure.",
    )
    p.add_argument(
        "--version",
        help="docs version to scrape: a release like 2.13, 'stable' or "
        "'main' (default: the config's)",
    )
    p.add_argument(
        "--config", type=Path, help="scrape config YAML (default: the packaged scrape.yaml)"
    )
    p.add_argument(
        "--base-url",
        help="site root to fetch from, holding docs/<version>/ and "
        "tutorials/ (default: https://docs.pytorch.org/); URLs in "
        "the output stay the public ones",
    )
    p.add_argument("--references", type=Path, help="references folder (default: the skill's)")
    p.add_argument(
        "--cache-dir", type=Path, help="raw-page cache (default: <references>/.cache/web)"
    )
    p.add_argument("--index-dir", type=Path, help="index folder (default: <references>/index)")
    return p


def _skill_guides() -> Path | None:
    """The skill's own guides, indexed with the new pages even when --references is a data
    folder elsewhere (FSDP_SKILL_DATA_DIR, the user cache)."""
    guides = Path(paths.page_dirs()["guide"])
    return guides if guides.is_dir() else None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed its one-line usage error
        return int(exc.code or 0)
    try:
        cfg = load_config(args.config).with_overrides(version=args.version, base_url=args.base_url)
    except ConfigError as exc:  # a bad option or config value is a usage error
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        result = refresh_web(
            cfg,
            args.references or Path(paths.data_dir()),
            cache_dir=args.cache_dir,
            index_dir=args.index_dir,
            guides_dir=_skill_guides(),
        )
    except (
        BuildError,
        ConfigError,
        ScrapeError,
        FetchError,
        ConversionError,
        InventoryError,
        OSError,
    ) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; previous references left in place", file=sys.stderr)
        return 130
    print(
        result.report.render()
        if result.changed
        else f"no change: {result.pages} pages, {result.requests} requests, "
        f"{result.not_modified} not modified"
    )
    if result.uncovered:
        n = sum(len(v) for v in result.uncovered.values())
        print(
            f"warning: {n} objects.inv object(s) on scraped pages are carried by no chunk",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
