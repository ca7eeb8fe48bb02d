"""Scraper configuration: load and validate scrape.yaml into plain dataclasses."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from fsdp_skill import files

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "data" / "scrape.yaml"
TUTORIALS_PREFIX = "tutorials/"
# A page key becomes a file path under references/web/: keep it to plain path segments.
_PAGE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*$")
_VERSION_RE = re.compile(r"^(stable|main|\d+\.\d+(\.\d+)?)$")


class ConfigError(ValueError):
    """The scrape config (or a command-line override of it) is unusable."""


@dataclass(frozen=True)
class ClientSettings:
    user_agent: str = "pytorch-fsdp-skill-scraper/0.1"
    min_interval_s: float = 0.5
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 1.0
    # Wall-clock limits: the timeouts above bound each wait for a byte, so a server that drips
    # one byte a second would otherwise hold a page, and the run, for as long as it likes.
    page_deadline_s: float = 300.0  # one page or objects.inv, every try and redirect included
    run_deadline_s: float = 1800.0  # the whole scrape


@dataclass(frozen=True)
class PageSpec:
    page: str  # docs path without .html, or tutorials/<dir>/<name>
    category: str

    @property
    def is_tutorial(self) -> bool:
        return self.page.startswith(TUTORIALS_PREFIX)


@dataclass(frozen=True)
class ScrapeConfig:
    version: str
    site_root: str  # public root, e.g. https://docs.pytorch.org/
    docs_base: str  # relative to site_root, may hold {version}
    tutorials_base: str
    pages: tuple[PageSpec, ...]
    allowed_hosts: tuple[str, ...] = ()
    client: ClientSettings = field(default_factory=ClientSettings)
    base_url: str | None = None  # where pages are fetched from; None: site_root

    # --- URLs -----------------------------------------------------------------------------
    def _rel_base(self, tutorial: bool) -> str:
        rel = self.tutorials_base if tutorial else self.docs_base
        return rel.replace("{version}", self.version)

    def _rel_path(self, spec: PageSpec) -> str:
        if spec.is_tutorial:
            return self._rel_base(True) + spec.page[len(TUTORIALS_PREFIX) :] + ".html"
        return self._rel_base(False) + spec.page + ".html"

    def public_url(self, spec: PageSpec) -> str:
        return self.site_root + self._rel_path(spec)

    def fetch_url(self, spec: PageSpec) -> str:
        return self.fetch_root + self._rel_path(spec)

    @property
    def fetch_root(self) -> str:
        return self.base_url or self.site_root

    def inventory_urls(self, tutorial: bool) -> tuple[str, str]:
        """(fetch URL, public base URL) of the objects.inv of the docs or the tutorials."""
        rel = self._rel_base(tutorial)
        return self.fetch_root + rel + "objects.inv", self.site_root + rel

    def hosts(self) -> set[str]:
        hosts = {h.lower() for h in self.allowed_hosts}
        hosts.add(urlsplit(self.fetch_root).netloc.lower())
        return hosts

    def with_overrides(
        self, *, version: str | None = None, base_url: str | None = None
    ) -> ScrapeConfig:
        cfg = self
        if version is not None:
            cfg = replace(cfg, version=_check_version(version))
        if base_url is not None:
            cfg = replace(cfg, base_url=_check_root(base_url, "--base-url"))
        return cfg


def _check_version(v: object) -> str:
    v = str(v).strip()
    if not _VERSION_RE.match(v):
        raise ConfigError(f"version {v!r} is not 'stable', 'main' or a release like '2.13'")
    return v


def _check_root(url: object, what: str) -> str:
    url = str(url).strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{what} {url!r} is not an http(s) URL")
    if parts.query or parts.fragment:
        raise ConfigError(f"{what} {url!r} must not carry a query or fragment")
    return url if url.endswith("/") else url + "/"


def _check_rel(value: object, what: str) -> str:
    value = str(value).strip()
    if value.startswith("/") or "://" in value or ".." in value.split("/"):
        raise ConfigError(f"{what} {value!r} must be a path relative to site_root")
    return value if value.endswith("/") or not value else value + "/"


# Settings that must be > 0 (a zero timeout would make requests refuse every call; a zero
# deadline fails every page) and those that may be 0.
_POSITIVE = ("connect_timeout_s", "read_timeout_s", "page_deadline_s", "run_deadline_s")
_NON_NEGATIVE = ("min_interval_s", "backoff_s")
MAX_RETRIES = 20


def _check_client(client: ClientSettings, where: str) -> None:
    for key in _POSITIVE + _NON_NEGATIVE:
        value = getattr(client, key)
        low_ok = key in _NON_NEGATIVE and value == 0
        if not math.isfinite(value) or (value <= 0 and not low_ok):
            kind = "a positive" if key in _POSITIVE else "a non-negative"
            raise ConfigError(
                f"{where}: client setting {key} must be {kind} number of seconds, got {value:g}"
            )
    if not 0 <= client.retries <= MAX_RETRIES:
        raise ConfigError(
            f"{where}: client setting retries must be 0 to {MAX_RETRIES}, got {client.retries}"
        )
    if not client.user_agent.strip():
        raise ConfigError(f"{where}: client setting user_agent must not be empty")


# A FIFO, a device or a huge file given as --config is refused instead of read forever.
MAX_CONFIG_BYTES = 1024 * 1024


def load_config(path: Path | None = None) -> ScrapeConfig:
    path = Path(path) if path else DEFAULT_CONFIG
    try:
        raw = yaml.safe_load(files.read_capped(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"config {path} nests too deeply to be a scrape config") from None
    return parse_config(raw, str(path))


def parse_config(raw: object, where: str = "config") -> ScrapeConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: top level must be a mapping")
    for key in ("version", "site_root", "docs_base", "tutorials_base", "pages"):
        if key not in raw:
            raise ConfigError(f"{where}: missing key {key!r}")
    pages_raw = raw["pages"]
    if not isinstance(pages_raw, list) or not pages_raw:
        raise ConfigError(f"{where}: 'pages' must be a non-empty list")
    pages: list[PageSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(pages_raw):
        if not isinstance(item, dict) or "page" not in item or "category" not in item:
            raise ConfigError(f"{where}: pages[{i}] needs 'page' and 'category'")
        page = str(item["page"]).strip().removesuffix(".html")
        if not _PAGE_RE.match(page) or ".." in page.split("/"):
            raise ConfigError(f"{where}: pages[{i}] has a bad page path {page!r}")
        if page.startswith(TUTORIALS_PREFIX) and page.count("/") != 2:
            raise ConfigError(f"{where}: tutorial page {page!r} must be tutorials/<dir>/<name>")
        if page in seen:
            raise ConfigError(f"{where}: page {page!r} is listed twice")
        seen.add(page)
        pages.append(PageSpec(page=page, category=str(item["category"]).strip()))
    client_raw = raw.get("client") or {}
    if not isinstance(client_raw, dict):
        raise ConfigError(f"{where}: 'client' must be a mapping")
    known = set(ClientSettings.__dataclass_fields__)
    unknown = set(client_raw) - known
    if unknown:
        raise ConfigError(f"{where}: unknown client setting(s) {sorted(unknown)}")
    try:
        client = ClientSettings(
            **{
                k: (str(v) if k == "user_agent" else int(v) if k == "retries" else float(v))
                for k, v in client_raw.items()
            }
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(f"{where}: bad client setting: {exc}") from None
    _check_client(client, where)
    hosts = raw.get("allowed_hosts") or []
    if not isinstance(hosts, list):
        raise ConfigError(f"{where}: 'allowed_hosts' must be a list")
    site_root = _check_root(raw["site_root"], "site_root")
    return ScrapeConfig(
        version=_check_version(raw["version"]),
        site_root=site_root,
        docs_base=_check_rel(raw["docs_base"], "docs_base"),
        tutorials_base=_check_rel(raw["tutorials_base"], "tutorials_base"),
        pages=tuple(pages),
        allowed_hosts=tuple(str(h).lower() for h in hosts) + (urlsplit(site_root).netloc.lower(),),
        client=client,
    )
