"""The one HTTP client of the scraper: polite, allowlisted, cached with conditional requests."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin, urlsplit

import requests

from .config import ClientSettings

MAX_REDIRECTS = 5
# The whole distributed.html is under 1 MB; anything far larger is not a docs page.
MAX_BODY_BYTES = 32 * 1024 * 1024


class FetchError(RuntimeError):
    """A URL could not be fetched; the message names the URL and the reason."""


@dataclass
class FetchResult:
    url: str
    body: bytes
    status: int            # 200, or 304 when the cached copy was confirmed unchanged
    from_cache: bool


class RawCache:
    """Raw response bodies plus their validators, one pair of files per URL.

    Keyed by the URL actually fetched, since an ETag only means something to the server
    that issued it.
    """

    def __init__(self, root: Path):
        self.root = Path(root)

    def _paths(self, url: str) -> tuple[Path, Path]:
        key = hashlib.sha256(url.encode("utf-8")).hexdigest()[:32]
        base = self.root / key[:2] / key
        return base.with_suffix(".body"), base.with_suffix(".json")

    def get(self, url: str) -> tuple[dict, bytes] | None:
        body_p, meta_p = self._paths(url)
        try:
            meta = json.loads(meta_p.read_text(encoding="utf-8"))
            body = body_p.read_bytes()
        except (OSError, ValueError):
            return None
        # A body that does not match its recorded digest is a torn write: treat as absent.
        if meta.get("url") != url or meta.get("sha256") != hashlib.sha256(body).hexdigest():
            return None
        return meta, body

    def put(self, url: str, body: bytes, etag: str | None, last_modified: str | None) -> None:
        body_p, meta_p = self._paths(url)
        meta = {"url": url, "etag": etag, "last_modified": last_modified,
                "sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
        old = self.get(url)
        if old is not None and old[0] == meta:
            return  # same bytes, same validators: leave the files (and their mtimes) alone
        body_p.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(body_p, body)
        _atomic_write(meta_p, json.dumps(meta, indent=1, sort_keys=True).encode("utf-8"))


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class PoliteClient:
    """GET with a rate limit, timeouts, retries with backoff, a host allowlist and a cache."""

    def __init__(self, settings: ClientSettings, allowed_hosts: set[str], cache: RawCache | None,
                 *, session: requests.Session | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 log: Callable[[str], None] | None = None):
        self.settings = settings
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        self.cache = cache
        self.session = session or requests.Session()
        self.session.headers["User-Agent"] = settings.user_agent
        self._sleep = sleep
        self._last_request = 0.0
        self.request_count = 0
        self.log = log or (lambda msg: print(msg, file=sys.stderr))

    def close(self) -> None:
        self.session.close()

    def _check_host(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise FetchError(f"{url}: refusing scheme {parts.scheme!r}")
        if parts.netloc.lower() not in self.allowed_hosts:
            raise FetchError(f"{url}: host {parts.netloc!r} is not in the allowlist")

    def _throttle(self) -> None:
        wait = self._last_request + self.settings.min_interval_s - time.monotonic()
        if wait > 0:
            self._sleep(wait)
        self._last_request = time.monotonic()

    def fetch(self, url: str) -> FetchResult:
        self._check_host(url)
        cached = self.cache.get(url) if self.cache else None
        headers = {}
        if cached:
            meta = cached[0]
            if meta.get("etag"):
                headers["If-None-Match"] = meta["etag"]
            if meta.get("last_modified"):
                headers["If-Modified-Since"] = meta["last_modified"]

        delay = self.settings.backoff_s
        attempts = self.settings.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                status, final_url, body, resp_headers = self._get_following(url, headers)
            except _Transient as exc:
                if attempt == attempts:
                    raise FetchError(f"{url}: {exc} (gave up after {attempts} tries)") from None
                self.log(f"  retry {attempt}/{attempts - 1} in {delay:.1f}s: {url}: {exc}")
                self._sleep(delay)
                delay *= 2
                continue
            if status == 304:
                if not cached:
                    raise FetchError(f"{url}: 304 Not Modified without a cached copy")
                return FetchResult(url, cached[1], 304, True)
            if self.cache:
                self.cache.put(url, body, resp_headers.get("ETag"), resp_headers.get("Last-Modified"))
            return FetchResult(url, body, status, False)
        raise AssertionError("unreachable")

    def _get_following(self, url: str, headers: dict) -> tuple[int, str, bytes, dict]:
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            self._check_host(current)
            self._throttle()
            self.request_count += 1
            timeout = (self.settings.connect_timeout_s, self.settings.read_timeout_s)
            try:
                resp = self.session.get(current, headers=headers, timeout=timeout,
                                        allow_redirects=False, stream=True)
            except (requests.Timeout, requests.ConnectionError) as exc:
                raise _Transient(_short(exc)) from None
            except requests.RequestException as exc:
                raise FetchError(f"{current}: {_short(exc)}") from None
            with resp:
                if resp.is_redirect:
                    location = resp.headers.get("Location", "")
                    current = urljoin(current, location)
                    if urlsplit(current).netloc.lower() not in self.allowed_hosts:
                        raise FetchError(f"{url}: redirect to {current} refused (host not in allowlist)")
                    continue
                if resp.status_code >= 500:
                    raise _Transient(f"HTTP {resp.status_code}")
                if resp.status_code == 304:
                    return 304, current, b"", dict(resp.headers)
                if resp.status_code != 200:
                    raise FetchError(f"{url}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
                body = _read_body(resp)
                return 200, current, body, dict(resp.headers)
        raise FetchError(f"{url}: more than {MAX_REDIRECTS} redirects")


class _Transient(Exception):
    """A failure worth another try: timeout, dropped connection, short body, 5xx."""


def _read_body(resp: requests.Response) -> bytes:
    chunks, size = [], 0
    try:
        for chunk in resp.iter_content(64 * 1024):
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise FetchError(f"{resp.url}: body larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError,
            requests.ConnectionError, requests.Timeout) as exc:
        raise _Transient(f"broken body: {_short(exc)}") from None
    body = b"".join(chunks)
    expected = resp.headers.get("Content-Length")
    # urllib3 already enforces this for identity bodies; keep the check for decoded ones too.
    if expected and expected.isdigit() and not resp.headers.get("Content-Encoding"):
        if len(body) != int(expected):
            raise _Transient(f"truncated body: {len(body)} of {expected} bytes")
    return body


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
