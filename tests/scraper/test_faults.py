"""A misbehaving local server: each fault gives its documented outcome and the previous
references stay intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_skill.build import refresh_web
from fsdp_skill.sources.web.fetch import FetchError, PoliteClient, RawCache
from fsdp_skill.sources.web.scrape import ScrapeError


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".cache" not in p.parts and not p.name.endswith(".lock")
    }


def fake_builder(refs_root, index_dir, *, web_dir=None):
    index_dir.mkdir(parents=True)
    pages = sorted(p.name for p in Path(web_dir).rglob("*.md"))
    (index_dir / "index.txt").write_text("\n".join(pages))
    return {"pages": len(pages)}


def _scrape(site, refs, **kw):
    kw.setdefault("index_builder", fake_builder)
    return refresh_web(site.config, refs, log=lambda m: None, **kw)


@pytest.fixture
def refs(fault_site, tmp_path):
    """references/ after one good scrape, with a snapshot of its files."""
    root = tmp_path / "references"
    _scrape(fault_site, root)
    fault_site.prose = "Second version."  # so a successful refresh would change files
    return root


def _expect_failure(site, refs, match):
    before = _tree(refs)
    with pytest.raises(ScrapeError, match=match):
        _scrape(site, refs)
    assert _tree(refs) == before
    assert not [p for p in refs.iterdir() if p.name.startswith(".scrape-")], "temp folder left"


def test_good_scrape_writes_pages_and_index(refs):
    md = (refs / "web" / "alpha.md").read_text()
    assert "source: web" in md and "url: https://docs.pytorch.org/docs/2.13/alpha.html" in md
    assert "```python\ntorch.fake.alpha(x)\n```" in md
    for leak in ("JSONLD-LEAK", "BREADCRUMB-LEAK", "FOOTER-LEAK", "Rate this", "[source]"):
        assert leak not in md
    assert (refs / "index" / "index.txt").read_text() == "alpha.md\nbeta.md"


def test_500_then_200_is_retried(fault_site, refs):
    fault_site.plan["/docs/2.13/alpha.html"] = ["500", "500", "ok"]
    result = _scrape(fault_site, refs)
    assert result.changed and "Second version." in (refs / "web" / "alpha.md").read_text()
    assert fault_site.hits["/docs/2.13/alpha.html"] >= 3


def test_timeout_fails_after_retries(fault_site, refs):
    fault_site.plan["/docs/2.13/beta.html"] = ["slow"]
    _expect_failure(fault_site, refs, r"beta.*timed out|beta.*Read timed out|beta.*gave up")


def test_truncated_body_fails(fault_site, refs):
    fault_site.plan["/docs/2.13/alpha.html"] = ["truncate"]
    _expect_failure(fault_site, refs, r"alpha.*gave up after 3 tries")
    assert fault_site.hits["/docs/2.13/alpha.html"] == 1 + 3  # the first scrape + 3 tries


def test_truncated_then_good_body_recovers(fault_site, refs):
    fault_site.plan["/docs/2.13/alpha.html"] = ["truncate", "ok"]
    assert _scrape(fault_site, refs).changed


def test_redirect_to_other_host_is_refused(fault_site, refs):
    fault_site.plan["/docs/2.13/beta.html"] = ["redirect:http://evil.invalid/docs/2.13/beta.html"]
    _expect_failure(fault_site, refs, r"redirect to http://evil.invalid.*refused")


def test_404_page_fails_without_retry(fault_site, refs):
    fault_site.plan["/docs/2.13/beta.html"] = ["404"]
    _expect_failure(fault_site, refs, r"page beta: .*HTTP 404")
    assert fault_site.hits["/docs/2.13/beta.html"] == 2  # the first scrape + one try


def test_page_without_main_article_fails(fault_site, refs):
    fault_site.plan["/docs/2.13/alpha.html"] = ["noarticle"]
    _expect_failure(fault_site, refs, r"page alpha .*no main article")


def test_index_build_failure_keeps_previous(fault_site, refs):
    def broken(refs_root, index_dir, *, web_dir=None):
        raise RuntimeError("disk full")

    before = _tree(refs)
    with pytest.raises(ScrapeError, match="index build failed: RuntimeError: disk full"):
        _scrape(fault_site, refs, index_builder=broken)
    assert _tree(refs) == before


def test_unchanged_site_rewrites_nothing(fault_site, tmp_path):
    root = tmp_path / "references"
    _scrape(fault_site, root)
    stamps = {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in root.rglob("*") if p.is_file()}
    result = _scrape(fault_site, root)
    assert not result.changed
    after = {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in root.rglob("*") if p.is_file()}
    assert after == stamps


def test_change_report_names_changed_pages(fault_site, refs):
    fault_site.names = ["alpha", "gamma"]
    site_cfg = fault_site.config
    from dataclasses import replace

    from fsdp_skill.sources.web.config import PageSpec

    fault_site.config = replace(
        site_cfg, pages=(PageSpec("alpha", "reference"), PageSpec("gamma", "reference"))
    )
    report = _scrape(fault_site, refs).report
    assert report.pages_added == ["gamma"] and report.pages_removed == ["beta"]
    assert report.pages_changed == ["alpha"]
    assert report.objects_added == ["torch.fake.gamma"]
    assert report.objects_removed == ["torch.fake.beta"]
    assert report.objects_changed == ["torch.fake.alpha"] or report.objects_changed == []


def test_page_objects_follow_markdown_structure():
    from fsdp_skill.sources.web.report import diff_trees, page_objects

    page = (
        "---\ntitle: t\n---\n"
        "# A\n<!-- objects: a.x, a.y -->\ntext\n```\n# a comment in a fence, not a heading\n```\n"
        "#hashtag is prose\n"
        "## B\n\n<!-- objects: b -->\nmore\n"
        "## C\nbody first\n<!-- objects: not.first -->\n"
    )
    got = page_objects(page)
    assert set(got) == {"a.x", "a.y", "b"}  # C's comment is not its first block
    assert got["a.x"] == got["a.y"] != got["b"]
    # A change inside the fence is a change to A's section, not a new section.
    edited = page.replace("in a fence", "in the fence")
    changed = page_objects(edited)
    assert changed["a.x"] != got["a.x"] and changed["b"] == got["b"]
    report = diff_trees({"p.md": page}, {"p.md": edited})
    assert report.pages_changed == ["p"] and report.objects_changed == ["a.x", "a.y"]
    # CRLF files read the same as LF ones.
    assert page_objects(page.replace("\n", "\r\n")) == got


# ---- the client on its own ---------------------------------------------------------------


def _client(site, tmp_path, hosts=None):
    return PoliteClient(
        site.config.client,
        hosts or {site.url.split("/")[2]},
        RawCache(tmp_path / "cache"),
        log=lambda m: None,
    )


def test_client_refuses_hosts_outside_allowlist(fault_site, tmp_path):
    client = _client(fault_site, tmp_path, hosts={"docs.pytorch.org"})
    with pytest.raises(FetchError, match="not in the allowlist"):
        client.fetch(fault_site.url + "docs/2.13/alpha.html")
    assert client.request_count == 0


def test_client_sends_user_agent_and_no_retry_on_4xx(fault_site, tmp_path):
    client = _client(fault_site, tmp_path)
    assert client.session.headers["User-Agent"] == "fsdp-skill-tests"
    with pytest.raises(FetchError, match="HTTP 404"):
        client.fetch(fault_site.url + "docs/2.13/missing.html")
    assert client.request_count == 1


def test_rate_limit_spaces_requests(fault_site, tmp_path):
    from dataclasses import replace

    waits = []
    client = PoliteClient(
        replace(fault_site.config.client, min_interval_s=5.0),
        {fault_site.url.split("/")[2]},
        None,
        sleep=waits.append,
        log=lambda m: None,
    )
    client.fetch(fault_site.url + "docs/2.13/alpha.html")
    client.fetch(fault_site.url + "docs/2.13/beta.html")
    assert len(waits) == 1 and 4.0 < waits[0] <= 5.0


def test_backoff_doubles(fault_site, tmp_path):
    from dataclasses import replace

    waits = []
    fault_site.plan["/docs/2.13/alpha.html"] = ["500", "500", "ok"]
    client = PoliteClient(
        replace(fault_site.config.client, backoff_s=1.0),
        {fault_site.url.split("/")[2]},
        None,
        sleep=waits.append,
        log=lambda m: None,
    )
    assert client.fetch(fault_site.url + "docs/2.13/alpha.html").status == 200
    assert waits == [1.0, 2.0]
