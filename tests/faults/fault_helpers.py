"""Helpers for the fault tests: a small docs site on 127.0.0.1 that misbehaves on request.

A uniquely named module, and no conftest.py in this folder: the skill tests import names from
`conftest`, which must stay theirs. Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fsdp_skill import files
from fsdp_skill.sources.web.config import ClientSettings, parse_config

PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title} &#8212; PyTorch 2.13 documentation</title></head>
<body><main><article class="bd-article">
<section id="{slug}"><h1>{title}</h1>
<p>{prose}</p>
{extra}
<dl class="py function">
<dt class="sig sig-object py" id="torch.fake.{name}"><span class="sig-prename descclassname">torch.fake.</span><span class="sig-name descname">{name}</span><span class="sig-paren">(</span><em class="sig-param">x</em><span class="sig-paren">)</span></dt>
<dd><p>Does {name}.</p></dd></dl>
</section></article></main></body></html>
"""

CLIENT = ClientSettings(
    user_agent="fsdp-skill-fault-tests",
    min_interval_s=0.0,
    connect_timeout_s=2.0,
    read_timeout_s=0.5,
    retries=1,
    backoff_s=0.0,
    page_deadline_s=20.0,
    run_deadline_s=60.0,
)


def inventory(names, extra_lines: bytes = b"") -> bytes:
    import zlib

    body = b"".join(f"torch.fake.{n} py:function 1 {n}.html#$ -\n".encode() for n in names)
    header = (
        b"# Sphinx inventory version 2\n# Project: PyTorch\n# Version: 2.13\n"
        b"# The remainder of this file is compressed using zlib.\n"
    )
    return header + zlib.compress(body + extra_lines, 9)


class Site:
    """docs/2.13/{alpha,beta}.html and objects.inv; `override[path]` replaces a body and
    `action[path]` picks a misbehaviour: "drip" (the body a byte at a time) or "drip-headers"."""

    def __init__(self):
        self.names = ["alpha", "beta"]
        self.prose = "First version."
        self.extra = ""
        self.override: dict[str, bytes] = {}
        self.action: dict[str, str] = {}
        self.drip_s = 0.05
        self.stop = threading.Event()

    def body(self, path: str) -> bytes | None:
        if path in self.override:
            return self.override[path]
        if path == "/docs/2.13/objects.inv":
            return inventory(self.names)
        for n in self.names:
            if path == f"/docs/2.13/{n}.html":
                return PAGE.format(
                    title=f"Page {n}", slug=f"page-{n}", prose=self.prose, extra=self.extra, name=n
                ).encode()
        return None

    def handler(self):
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.split("?")[0]
                body = site.body(path)
                if body is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                action = site.action.get(path, "")
                try:
                    if action == "drip-headers":
                        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                        for _ in range(100_000):
                            if site.stop.is_set():
                                return
                            self.wfile.write(b"X")
                            self.wfile.flush()
                            time.sleep(site.drip_s)
                        return
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if action == "drip":
                        for i in range(len(body)):
                            if site.stop.is_set():
                                return
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                            time.sleep(site.drip_s)
                        return
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def start_site(site: Site):
    server = _Server(("127.0.0.1", 0), site.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site.url = f"http://127.0.0.1:{server.server_address[1]}/"
    site.config = replace(
        parse_config(
            {
                "version": "2.13",
                "site_root": "https://docs.pytorch.org/",
                "docs_base": "docs/{version}/",
                "tutorials_base": "tutorials/",
                "pages": [{"page": n, "category": "reference"} for n in site.names],
            }
        ).with_overrides(base_url=site.url),
        client=CLIENT,
    )
    return server


def fake_builder(refs_root, index_dir, *, web_dir=None):
    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    pages = sorted(p.name for p in Path(web_dir).rglob("*.md"))
    (index_dir / "index.bin").write_text("\n".join(pages))
    (index_dir / "manifest.json").write_text(json.dumps({"pages": len(pages)}))
    return {"pages": len(pages)}


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root except caches and locks, with its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".cache" not in p.parts and not p.name.endswith(".lock")
    }


def watch_renames(monkeypatch, check) -> dict:
    """Run `check(where)` after every os.rename, os.replace and files.exchange: each of those
    moments is one where a SIGKILL could land, so what `check` asserts must hold at all of them.
    Returns a counter of the calls seen."""
    calls = {"n": 0}

    def wrap(real):
        def wrapper(*args, **kwargs):
            result = real(*args, **kwargs)
            calls["n"] += 1
            check(f"after {real.__name__} #{calls['n']} {args[0]} -> {args[1]}")
            return result

        return wrapper

    monkeypatch.setattr(os, "rename", wrap(os.rename))
    monkeypatch.setattr(os, "replace", wrap(os.replace))
    monkeypatch.setattr(files, "exchange", wrap(files.exchange))
    return calls


@pytest.fixture
def site():
    """A two-page docs site on 127.0.0.1 that misbehaves on request (see Site)."""
    s = Site()
    server = start_site(s)
    yield s
    s.stop.set()
    server.shutdown()
    server.server_close()
