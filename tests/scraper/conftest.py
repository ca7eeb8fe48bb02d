"""Local HTTP servers (127.0.0.1 only) and configs for the scraper tests; no internet."""

from __future__ import annotations

import functools
import http.server
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fsdp_skill.sources.web.config import ClientSettings, load_config, parse_config

FIXTURE_SITE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "pytorch-docs"


class _QuietThreadingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _StaticHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


def _start(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = _QuietThreadingServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


@pytest.fixture(scope="session")
def fixture_site() -> Path:
    if not (FIXTURE_SITE / "docs" / "2.13" / "objects.inv").is_file():
        pytest.skip(f"offline docs site not found at {FIXTURE_SITE}")
    return FIXTURE_SITE


@pytest.fixture(scope="session")
def site_server(fixture_site):
    """The offline copy of docs.pytorch.org served read-only from its folder."""
    server, url = _start(functools.partial(_StaticHandler, directory=str(fixture_site)))
    yield url
    server.shutdown()
    server.server_close()


FAST_CLIENT = ClientSettings(
    user_agent="fsdp-skill-tests",
    min_interval_s=0.0,
    connect_timeout_s=2.0,
    read_timeout_s=0.5,
    retries=2,
    backoff_s=0.0,
)


@pytest.fixture(scope="session")
def fast_client() -> ClientSettings:
    return FAST_CLIENT


@pytest.fixture(scope="session")
def site_config(site_server):
    """The committed scrape.yaml, pointed at the local server, without politeness delays."""
    return replace(load_config(), client=FAST_CLIENT).with_overrides(base_url=site_server)


# ---- a small synthetic site whose server can be told to misbehave ------------------------

PAGE_HTML = """<!DOCTYPE html><html><head><title>{title} &#8212; PyTorch 2.13 documentation</title>
<script type="application/ld+json">{{"@type": "Article", "articleBody": "JSONLD-LEAK"}}</script>
</head><body><nav class="bd-breadcrumbs">BREADCRUMB-LEAK</nav>
<main id="main-content"><div class="rating">Rate this Page</div>
<div id="pytorch-article"><article class="bd-article">
<section id="{slug}"><h1>{title}<a class="headerlink" href="#{slug}">#</a></h1>
<p>{prose}</p>
<dl class="py function">
<dt class="sig sig-object py" id="{obj}"><span class="sig-prename descclassname"><span class="pre">torch.fake.</span></span><span class="sig-name descname"><span class="pre">{name}</span></span><span class="sig-paren">(</span><em class="sig-param"><span class="n"><span class="pre">x</span></span></em><span class="sig-paren">)</span><a class="reference internal" href="_modules/x.html"><span class="viewcode-link"><span class="pre">[source]</span></span></a><a class="headerlink" href="#{obj}">#</a></dt>
<dd><p>Does {name}.</p></dd></dl>
</section></article></div>
<footer class="bd-footer-article">FOOTER-LEAK</footer></main></body></html>
"""

NO_ARTICLE_HTML = "<html><head><title>Oops</title></head><body><div>No article</div></body></html>"


def make_inventory(objects: list[tuple[str, str, str]]) -> bytes:
    import sphobjinv as soi

    inv = soi.Inventory()
    inv.project, inv.version = "PyTorch", "2.13"
    for name, role, uri in objects:
        inv.objects.append(
            soi.DataObjStr(name=name, domain="py", role=role, priority="1", uri=uri, dispname="-")
        )
    return soi.compress(inv.data_file(contract=True))


class FaultSite:
    """Pages for docs/2.13/{alpha,beta}.html plus objects.inv, and a per-path fault plan.

    plan[path] is a list of actions used one per request (the last one repeats):
    "ok", "500", "404", "slow", "truncate", "noarticle", "redirect:<url>".
    """

    def __init__(self, prose: str = "First version."):
        self.prose = prose
        self.plan: dict[str, list[str]] = {}
        self.hits: dict[str, int] = {}
        self.names = ["alpha", "beta"]

    def body(self, path: str) -> bytes | None:
        if path == "/docs/2.13/objects.inv":
            return make_inventory(
                [(f"torch.fake.{n}", "function", f"{n}.html#$") for n in self.names]
            )
        for n in self.names:
            if path == f"/docs/2.13/{n}.html":
                return PAGE_HTML.format(
                    title=f"Page {n}",
                    slug=f"page-{n}",
                    prose=self.prose,
                    obj=f"torch.fake.{n}",
                    name=n,
                ).encode()
        return None

    def handler(self):
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.split("?")[0]
                site.hits[path] = site.hits.get(path, 0) + 1
                actions = site.plan.get(path, ["ok"])
                action = actions.pop(0) if len(actions) > 1 else actions[0]
                body = site.body(path)
                if action == "404" or body is None:
                    return self._send(404, b"not found")
                if action == "500":
                    return self._send(500, b"boom")
                if action == "slow":
                    time.sleep(1.5)
                    return self._send(200, body)
                if action.startswith("redirect:"):
                    self.send_response(302)
                    self.send_header("Location", action.split(":", 1)[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if action == "truncate":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if action == "noarticle":
                    return self._send(200, NO_ARTICLE_HTML.encode())
                return self._send(200, body)

            def _send(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


@pytest.fixture
def fault_site():
    site = FaultSite()
    server, url = _start(site.handler())
    site.url = url
    site.config = parse_config(
        {
            "version": "2.13",
            "site_root": "https://docs.pytorch.org/",
            "docs_base": "docs/{version}/",
            "tutorials_base": "tutorials/",
            "pages": [{"page": n, "category": "reference"} for n in site.names],
        }
    ).with_overrides(base_url=url)
    site.config = replace(site.config, client=FAST_CLIENT)
    yield site
    server.shutdown()
    server.server_close()
