"""Status retries of the HTTP client: 429 and 5xx are retried with Retry-After honoured and
capped, other 4xx are final, and body failures share the same budget. Local server only."""

from __future__ import annotations

import http.server
import threading
import time
from dataclasses import replace

import pytest

from fsdp_skill.sources.web import fetch
from fsdp_skill.sources.web.config import ClientSettings
from fsdp_skill.sources.web.fetch import FetchError, PoliteClient

BODY = b"<html><body>hello</body></html>"
SETTINGS = ClientSettings(
    user_agent="fsdp-skill-tests",
    min_interval_s=0.0,
    connect_timeout_s=2.0,
    read_timeout_s=2.0,
    retries=2,
    backoff_s=0.0,
    page_deadline_s=20.0,
)


class PlanServer:
    """Answers each request with the next action of plan[path] (the last one repeats).

    Actions: "ok", "<status>", "<status>:<Retry-After value>", "truncate" (part of the promised
    body), "drop" (close without an answer), "stall503" (a 503 whose huge body stalls).
    """

    def __init__(self) -> None:
        self.plan: dict[str, list[str]] = {}
        self.hits: dict[str, int] = {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path
                server.hits[path] = server.hits.get(path, 0) + 1
                actions = server.plan.get(path, ["ok"])
                action = actions.pop(0) if len(actions) > 1 else actions[0]
                if action == "drop":
                    self.close_connection = True
                    return
                if action == "stall503":  # promises a huge body, sends a little, then waits
                    self.send_response(503)
                    self.send_header("Content-Length", str(10**9))
                    self.end_headers()
                    self.wfile.write(b"x" * 1024)
                    self.wfile.flush()
                    time.sleep(3)
                    self.close_connection = True
                    return
                if action == "truncate":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(BODY)))
                    self.end_headers()
                    self.wfile.write(BODY[:5])
                    self.close_connection = True
                    return
                code, _, retry_after = action.partition(":")
                status = 200 if code == "ok" else int(code)
                body = BODY if status == 200 else b"no"
                self.send_response(status)
                if retry_after:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"


@pytest.fixture
def server():
    srv = PlanServer()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def client_for(server, *, sleep=time.sleep, **changes):
    lines: list[str] = []
    client = PoliteClient(
        replace(SETTINGS, **changes), {server.host}, None, sleep=sleep, log=lines.append
    )
    return client, lines


def test_429_then_200_succeeds(server):
    server.plan["/p"] = ["429", "ok"]
    client, lines = client_for(server)
    result = client.fetch(server.url("/p"))
    assert result.status == 200 and result.body == BODY
    assert server.hits["/p"] == 2 and client.request_count == 2
    assert lines == [f"  retry 1/2 in 0.0s: {server.url('/p')}: HTTP 429"]


def test_retry_after_is_waited(server):
    server.plan["/p"] = ["429:1", "ok"]
    client, lines = client_for(server)
    started = time.monotonic()
    assert client.fetch(server.url("/p")).status == 200
    elapsed = time.monotonic() - started
    assert 0.95 <= elapsed < 5
    assert lines == [f"  retry 1/2 in 1.0s: {server.url('/p')}: HTTP 429 (Retry-After: 1)"]


def test_huge_retry_after_is_capped(server):
    server.plan["/p"] = ["503:99999", "ok"]
    waits: list[float] = []
    client, lines = client_for(server, sleep=waits.append, page_deadline_s=300.0)
    started = time.monotonic()
    assert client.fetch(server.url("/p")).status == 200
    assert waits == [fetch.MAX_WAIT_S] and time.monotonic() - started < 5
    assert "in 60.0s" in lines[0] and "Retry-After: 99999" in lines[0]


def test_retry_after_past_the_deadline_fails_at_once(server):
    server.plan["/p"] = ["429:99999"]
    client, _ = client_for(server, page_deadline_s=2.0)
    started = time.monotonic()
    with pytest.raises(FetchError) as info:
        client.fetch(server.url("/p"))
    assert time.monotonic() - started < 1.5
    assert server.hits["/p"] == 1
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{server.url('/p')}: HTTP 429 (Retry-After: 99999); no time left")
    assert "2 s page deadline" in msg


def test_unreadable_retry_after_falls_back_to_backoff(server):
    server.plan["/p"] = ["429:soon", "ok"]
    waits: list[float] = []
    client, _ = client_for(server, sleep=waits.append, backoff_s=0.25)
    assert client.fetch(server.url("/p")).status == 200
    assert waits == [0.25]


def test_503_beyond_the_budget_fails_with_one_line(server):
    server.plan["/p"] = ["503"]
    waits: list[float] = []
    client, lines = client_for(server, sleep=waits.append, backoff_s=1.0)
    with pytest.raises(FetchError) as info:
        client.fetch(server.url("/p"))
    assert str(info.value) == f"{server.url('/p')}: HTTP 503 (gave up after 3 tries)"
    assert server.hits["/p"] == 3 and client.request_count == 3
    assert waits == [1.0, 2.0] and len(lines) == 2


@pytest.mark.parametrize("action", ["404", "403", "404:1", "413:1", "501"])
def test_other_statuses_are_final(server, action):
    server.plan["/p"] = [action]
    client, lines = client_for(server)
    with pytest.raises(FetchError, match=rf"HTTP {action[:3]}"):
        client.fetch(server.url("/p"))
    assert server.hits["/p"] == 1 and client.request_count == 1 and lines == []


def test_dropped_connection_is_retried(server):
    server.plan["/p"] = ["drop", "ok"]
    client, lines = client_for(server)
    assert client.fetch(server.url("/p")).status == 200
    assert server.hits["/p"] == 2 and len(lines) == 1


def test_status_and_body_retries_share_one_budget(server):
    server.plan["/p"] = ["503", "truncate", "ok"]
    waits: list[float] = []
    client, lines = client_for(server, sleep=waits.append, backoff_s=1.0)
    assert client.fetch(server.url("/p")).status == 200
    assert waits == [1.0, 2.0]  # one doubling schedule across both kinds
    assert [ln.split(": ", 2)[-1][:11] for ln in lines] == ["HTTP 503", "broken body"]
    assert [ln.split()[1] for ln in lines] == ["1/2", "2/2"]

    server.plan["/q"] = ["truncate", "503", "truncate", "ok"]
    with pytest.raises(
        FetchError, match=r"/q: broken body: .*IncompleteRead.* \(gave up after 3 tries\)$"
    ):
        client.fetch(server.url("/q"))
    assert server.hits["/q"] == 3


def test_rate_limit_spaces_status_retries(server):
    server.plan["/p"] = ["503", "ok"]
    waits: list[float] = []
    client, _ = client_for(server, sleep=waits.append, min_interval_s=5.0)
    assert client.fetch(server.url("/p")).status == 200
    assert waits[0] == 0.0 and len(waits) == 2 and 4.0 < waits[1] <= 5.0


def test_body_of_a_retried_status_is_not_read(server):
    # Draining the 503's body would wait for the read timeout (2 s here) or read a gigabyte.
    server.plan["/p"] = ["stall503", "ok"]
    client, _ = client_for(server)
    started = time.monotonic()
    assert client.fetch(server.url("/p")).status == 200
    assert time.monotonic() - started < 1.5 and server.hits["/p"] == 2
