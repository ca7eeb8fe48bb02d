"""`fsdp-skill scrape`: refresh references/web from docs.pytorch.org (or a mirror)."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from fsdp_skill.argparsing import OneLineParser
from fsdp_skill.sources.web.config import ConfigError, load_config
from fsdp_skill.sources.web.fetch import FetchError
from fsdp_skill.sources.web.html_to_md import ConversionError
from fsdp_skill.sources.web.inventory import InventoryError
from fsdp_skill.sources.web.scrape import ScrapeError, default_index_builder, scrape

PROG = "fsdp-skill scrape"


def _default_references() -> Path:
    from fsdp_skill import paths  # the skill's layout: $FSDP_SKILL_DATA_DIR, references/, ...

    return Path(paths.data_dir())


def _index_builder(refs: Path):
    """The lead's build_index, reading guides from the skill even when refs is a data dir."""
    builder = default_index_builder()
    if builder is None:
        return None
    try:
        from fsdp_skill import paths

        guides = Path(paths.page_dirs()["guide"])
    except (ImportError, KeyError):
        return builder
    if guides == refs / "guides" or not guides.is_dir():
        return builder
    return functools.partial(builder, guides_dir=guides)


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
        refs = args.references or _default_references()
        result = scrape(
            cfg,
            refs,
            cache_dir=args.cache_dir,
            index_dir=args.index_dir,
            index_builder=_index_builder(refs),
        )
    except (ConfigError, ScrapeError, FetchError, ConversionError, InventoryError, OSError) as exc:
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
