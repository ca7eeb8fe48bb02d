"""The one HTTP client of the scraper: polite, allowlisted, cached with conditional requests."""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3 import PoolManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import ConnectionPool, HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import InvalidHeader, MaxRetryError
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

from fsdp_skill import files
from fsdp_skill.sources.web.config import ClientSettings

MAX_REDIRECTS = 5
# The whole distributed.html is under 1 MB; anything far larger is not a docs page.
MAX_BODY_BYTES = 32 * 1024 * 1024
# Answers worth another try; every other status is final (a 404 or 403 will not change).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# The longest single wait, backoff or Retry-After: a server asking for a day gets a minute, and
# the page deadline still ends the fetch if the waits add up.
MAX_WAIT_S = 60.0


class FetchError(RuntimeError):
    """A URL could not be fetched; the message names the URL and the reason."""


@dataclass
class FetchResult:
    url: str
    body: bytes
    status: int  # 200, or 304 when the cached copy was confirmed unchanged
    from_cache: bool


class RawCache:
    """Raw response bodies plus their validators, one pair of files per URL.

    Keyed by the URL actually fetched, since an ETag only means something to the server
    that issued it.
    """

    def __init__(self, root: Path) -> None:
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
        meta = {
            "url": url,
            "etag": etag,
            "last_modified": last_modified,
            "sha256": hashlib.sha256(body).hexdigest(),
            "size": len(body),
        }
        old = self.get(url)
        if old is not None and old[0] == meta:
            return  # same bytes, same validators: leave the files (and their mtimes) alone
        body_p.parent.mkdir(parents=True, exist_ok=True)
        files.write_bytes(body_p, body)
        files.write_bytes(meta_p, json.dumps(meta, indent=1, sort_keys=True).encode("utf-8"))


@dataclass
class _Budget:
    """One fetch's retries and deadline, shared by urllib3's retries and the body loop."""

    deadline: float
    why: str  # the message for running past the deadline
    retries: int  # retries allowed, of either kind
    used: int = 0
    dog: _Watchdog | None = None


class PoliteClient:
    """GET with a rate limit, timeouts, retries with backoff, a host allowlist and a cache.

    One fetch at a time: the retry policy on the adapter carries the running fetch's budget.
    """

    def __init__(
        self,
        settings: ClientSettings,
        allowed_hosts: set[str],
        cache: RawCache | None,
        *,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        self.cache = cache
        self.session = session or requests.Session()
        self.session.headers["User-Agent"] = settings.user_agent
        # Connections this client opened, so the deadline watchdog can cut the one in use.
        self._live: weakref.WeakSet = weakref.WeakSet()
        self._adapter = _TrackingAdapter(self._live)
        self.session.mount("http://", self._adapter)
        self.session.mount("https://", self._adapter)
        self._sleep = sleep
        self._last_request = 0.0
        self.request_count = 0
        # time.monotonic() by which the whole run must be done; None: only page deadlines.
        self.run_deadline: float | None = None
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

        budget = _Budget(*self._deadline(), retries=self.settings.retries)
        # urllib3 retries statuses and connection errors inside each request; this loop stays for
        # what it cannot retry: a body that breaks or comes up short after the headers.
        while True:
            try:
                try:
                    status, body, resp_headers = self._try_once(url, headers, budget)
                except _Transient as exc:
                    if budget.used >= budget.retries:
                        raise FetchError(
                            f"{url}: {exc} (gave up after {budget.used + 1} tries)"
                        ) from None
                    delay = _backoff(self.settings.backoff_s, MAX_WAIT_S, budget.used + 1)
                    self._wait_to_retry(budget, url, delay, str(exc))
                    continue
            except _DeadlineHit:
                raise FetchError(f"{url}: {budget.why}") from None
            except _OutOfTime as exc:
                raise FetchError(
                    f"{url}: {exc}; no time left for another try ({budget.why})"
                ) from None
            if status == 304:
                if not cached:
                    raise FetchError(f"{url}: 304 Not Modified without a cached copy")
                return FetchResult(url, cached[1], 304, True)
            if self.cache:
                self.cache.put(
                    url, body, resp_headers.get("ETag"), resp_headers.get("Last-Modified")
                )
            return FetchResult(url, body, status, False)

    def _try_once(self, url: str, headers: dict, budget: _Budget) -> tuple[int, bytes, dict]:
        """One request and its redirects, cut at the deadline by a watchdog."""
        if time.monotonic() >= budget.deadline:
            raise _DeadlineHit()
        with _Watchdog(budget.deadline - time.monotonic(), self._cut) as dog:
            budget.dog = dog
            try:
                status, _final_url, body, resp_headers = self._get_following(url, headers, budget)
            except Exception:
                if dog.fired:  # whatever the cut connection raised, the cause is the deadline
                    raise _DeadlineHit() from None
                raise
        if dog.fired:  # finished as the deadline hit: the body may be cut short
            raise _DeadlineHit()
        return status, body, resp_headers

    def _deadline(self) -> tuple[float, str]:
        """When this fetch must be done, and the message for running past it."""
        page = time.monotonic() + self.settings.page_deadline_s
        if self.run_deadline is not None and self.run_deadline < page:
            return self.run_deadline, (
                f"the scrape ran past its {self.settings.run_deadline_s:g} s "
                "deadline (client run_deadline_s)"
            )
        return page, (
            f"no complete answer within the {self.settings.page_deadline_s:g} s page "
            "deadline (client page_deadline_s)"
        )

    def _wait_to_retry(self, budget: _Budget, url: str, delay: float, reason: str) -> None:
        """Count, log and wait out one retry of either kind, or refuse it past the deadline."""
        now = time.monotonic()
        if now >= budget.deadline or (budget.dog is not None and budget.dog.fired):
            raise _DeadlineHit()
        if now + delay >= budget.deadline:
            raise _OutOfTime(reason)
        budget.used += 1
        self.log(f"  retry {budget.used}/{budget.retries} in {delay:.1f}s: {url}: {reason}")
        self._sleep(delay)

    def _retry_policy(self, budget: _Budget, url: str) -> _PoliteRetry:
        """urllib3's retries for one request, with what is left of this fetch's budget."""
        left = budget.retries - budget.used

        def before_retry(delay: float, reason: str) -> None:
            self._wait_to_retry(budget, url, delay, reason)
            # urllib3 sends the retry itself: keep the rate limit and the count for it too.
            self._throttle()
            self.request_count += 1

        return _PoliteRetry(
            total=left,
            connect=left,
            read=left,
            status=left,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=frozenset({"GET"}),
            backoff_factor=self.settings.backoff_s,
            backoff_max=MAX_WAIT_S,
            respect_retry_after_header=True,
            raise_on_status=False,  # the last 429 or 5xx comes back and is reported as such
            redirect=False,  # redirects are followed by hand, each hop checked
            before_retry=before_retry,
            retries_before=budget.used,
        )

    def _cut(self) -> None:
        """Called by the watchdog: shut the open sockets down, which ends a blocked read."""
        for conn in list(self._live):
            for sock in {getattr(conn, "sock", None), getattr(conn, "watched_sock", None)} - {None}:
                try:
                    # The plain socket's shutdown, also for TLS: it wakes the reader without
                    # touching the TLS state another thread is using.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except (OSError, TypeError, ValueError):
                    pass

    def _get_following(
        self, url: str, headers: dict, budget: _Budget
    ) -> tuple[int, str, bytes, dict]:
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            self._check_host(current)
            self._throttle()
            self.request_count += 1
            timeout = (self.settings.connect_timeout_s, self.settings.read_timeout_s)
            self._adapter.max_retries = self._retry_policy(budget, current)
            try:
                resp = self.session.get(
                    current, headers=headers, timeout=timeout, allow_redirects=False, stream=True
                )
            except (requests.Timeout, requests.ConnectionError) as exc:
                # urllib3 has retried these already, as far as the budget went.
                raise FetchError(
                    f"{url}: {_cause(exc)} (gave up after {budget.used + 1} tries)"
                ) from None
            except requests.RequestException as exc:
                raise FetchError(f"{current}: {_short(exc)}") from None
            with resp:
                if resp.is_redirect:
                    location = resp.headers.get("Location", "")
                    current = urljoin(current, location)
                    if urlsplit(current).netloc.lower() not in self.allowed_hosts:
                        raise FetchError(
                            f"{url}: redirect to {current} refused (host not in allowlist)"
                        )
                    continue
                # urllib3 hands one of these back only once the budget has run out.
                if resp.status_code in RETRY_STATUSES:
                    raise FetchError(
                        f"{url}: HTTP {resp.status_code} (gave up after {budget.used + 1} tries)"
                    )
                if resp.status_code == 304:
                    return 304, current, b"", dict(resp.headers)
                if resp.status_code != 200:
                    raise FetchError(f"{url}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
                body = _read_body(resp)
                return 200, current, body, dict(resp.headers)
        raise FetchError(f"{url}: more than {MAX_REDIRECTS} redirects")


class _Transient(Exception):
    """A body that broke or came up short: worth another try of the whole request."""


class _OutOfTime(Exception):
    """Another try was due, but its wait would run past the deadline."""


class _DeadlineHit(Exception):
    """The page or run deadline passed while a request was in flight."""


class _Watchdog:
    """Calls `cut` once `seconds` have passed, unless the block has ended by then.

    Timeouts bound each wait for a byte; only a clock that runs beside the request bounds the
    whole of it, headers and body, however slowly the server drips them.
    """

    def __init__(self, seconds: float, cut: Callable[[], None]) -> None:
        self._cut = cut
        self._lock = threading.Lock()
        self._over = False
        self.fired = False
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        with self._lock:
            if self._over:
                return
            self.fired = True
        self._cut()

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._over = True
        self._timer.cancel()


def _tracked_pools(live: weakref.WeakSet) -> dict:
    """urllib3 pool classes whose connections register in `live` when they connect."""

    # The socket is kept as well: http.client drops `conn.sock` once a response that closes the
    # connection (HTTP/1.0, `Connection: close`) owns it, and that body must still be cut.
    class Conn(HTTPConnection):
        def connect(self) -> None:
            live.add(self)
            super().connect()
            self.watched_sock = self.sock

    class TLSConn(HTTPSConnection):
        def connect(self) -> None:
            live.add(self)
            super().connect()
            self.watched_sock = self.sock

    class Pool(HTTPConnectionPool):
        ConnectionCls = Conn

    class TLSPool(HTTPSConnectionPool):
        ConnectionCls = TLSConn

    return {"http": Pool, "https": TLSPool}


class _PoliteRetry(Retry):
    """urllib3's `Retry`, waiting through the client instead of its own `time.sleep`.

    The client's wait checks the deadline first (a sleep inside urllib3 could not be cut short),
    logs the retry and uses the client's clock, so rate limit and tests see every wait.
    """

    # Without this a 413 with a Retry-After would be retried too; only RETRY_STATUSES are.
    RETRY_AFTER_STATUS_CODES = frozenset({429, 503})

    def __init__(
        self,
        *args: Any,
        before_retry: Callable[[float, str], None] | None = None,
        retries_before: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.before_retry = before_retry
        self.retries_before = retries_before  # retries this fetch made in earlier requests

    def new(self, **kw: Any) -> _PoliteRetry:
        retry = super().new(**kw)
        retry.before_retry, retry.retries_before = self.before_retry, self.retries_before
        return retry

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> _PoliteRetry:
        if response is not None:
            # Before a retry urllib3 reads the unwanted body to the end to reuse the connection;
            # a 429 or 503 may promise gigabytes, so drop the connection instead.
            response.close()
        return super().increment(method, url, response, error, _pool, _stacktrace)

    def get_backoff_time(self) -> float:
        # backoff_s, 2x, 4x ... counted over the whole fetch (urllib3 alone starts at 0 and
        # restarts with each request the body loop makes).
        return _backoff(
            self.backoff_factor, self.backoff_max, self.retries_before + len(self.history)
        )

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        try:
            seconds = super().get_retry_after(response)
        except InvalidHeader:
            return None  # unreadable: wait the usual backoff instead
        return None if seconds is None else min(seconds, self.backoff_max)

    def sleep(self, response: BaseHTTPResponse | None = None) -> None:
        if self.before_retry is None:
            super().sleep(response)
            return
        last = self.history[-1] if self.history else None
        if last is not None and last.status:
            reason = f"HTTP {last.status}"
        elif last is not None and last.error is not None:
            reason = _short(last.error)
        else:
            reason = "retry"
        delay = None
        if response is not None and self.respect_retry_after_header:
            delay = self.get_retry_after(response)
            if delay is not None:
                asked = "".join(
                    c for c in response.headers.get("Retry-After", "") if c.isprintable()
                )
                reason += f" (Retry-After: {asked[:40]})"
        if delay is None:
            delay = self.get_backoff_time()
        self.before_retry(delay, reason)


def _backoff(factor: float, cap: float, n: int) -> float:
    """The wait before the n-th retry of a fetch (n >= 1)."""
    return float(min(cap, factor * 2 ** (n - 1)))


class _TrackingAdapter(HTTPAdapter):
    """requests' adapter, with connections the deadline watchdog can find (proxies too).

    The client sets `max_retries` to a `_PoliteRetry` before each request.
    """

    def __init__(self, live: weakref.WeakSet) -> None:
        self._live = live
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _tracked_pools(self._live)

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> PoolManager:
        manager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):  # SOCKS pools have classes of their own
            manager.pool_classes_by_scheme = _tracked_pools(self._live)
        return manager


def _read_body(resp: requests.Response) -> bytes:
    chunks, size = [], 0
    try:
        for chunk in resp.iter_content(64 * 1024):
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise FetchError(f"{resp.url}: body larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
    except (
        requests.exceptions.ChunkedEncodingError,
        requests.exceptions.ContentDecodingError,
        requests.ConnectionError,
        requests.Timeout,
    ) as exc:
        raise _Transient(f"broken body: {_short(exc)}") from None
    body = b"".join(chunks)
    expected = resp.headers.get("Content-Length")
    # urllib3 already enforces this for identity bodies; keep the check for decoded ones too.
    if expected and expected.isdigit() and not resp.headers.get("Content-Encoding"):
        if len(body) != int(expected):
            raise _Transient(f"truncated body: {len(body)} of {expected} bytes")
    return body


def _cause(exc: requests.RequestException) -> str:
    """The reason inside requests' wrapper around urllib3's "Max retries exceeded"."""
    inner = exc.args[0] if exc.args else None
    if isinstance(inner, MaxRetryError) and inner.reason is not None:
        return _short(inner.reason)
    return _short(exc)


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
