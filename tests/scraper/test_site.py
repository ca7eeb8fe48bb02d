"""End to end against the offline copy of docs.pytorch.org (skipped when it is absent)."""

from __future__ import annotations

import pytest

from fsdp_skill.build import refresh_web
from fsdp_skill.chunking import chunk_page
from fsdp_skill.sources.web.inventory import parse_inventory

FURNITURE = [
    "[source]",
    "\u00b6",
    "Rate this",
    "\u2605",
    "Send Feedback",
    "PyData Sphinx Theme",
    "@context",
    "articleBody",
    "Link to this",
    "previous</",
    "Created On",
    "Last Updated",
    "resourcesDropdown",
    "On this page",
]


@pytest.fixture(scope="module")
def scraped(site_config, tmp_path_factory):
    refs = tmp_path_factory.mktemp("refs")
    result = refresh_web(site_config, refs, log=lambda m: None)
    return refs, result


def _h1_lines(md: str) -> list[str]:
    out, fence = [], False
    for line in md.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.startswith("# "):
            out.append(line)
    return out


def page(scraped, name: str) -> str:
    return (scraped[0] / "web" / f"{name}.md").read_text(encoding="utf-8")


def test_every_configured_page_is_written(scraped, site_config):
    refs, result = scraped
    assert result.pages == len(site_config.pages)
    for spec in site_config.pages:
        md = page(scraped, spec.page)
        assert md.startswith("---\ntitle: ")
        assert f"url: {site_config.public_url(spec)}\n" in md
        assert f"page: {spec.page}\n" in md and "source: web\n" in md
        assert "torch_version: '2.13'" in md
    assert (refs / "index").is_dir() == (result.index_built)


def test_no_furniture_leaks(scraped, site_config):
    for spec in site_config.pages:
        md = page(scraped, spec.page)
        leaks = [f for f in FURNITURE + [site_config.base_url] if f in md]
        assert not leaks, f"{spec.page}: {leaks}"
        assert len(_h1_lines(md)) == 1, spec.page


def test_api_entry_join(scraped):
    md = page(scraped, "distributed.algorithms.join")
    assert "title: Generic Join Context Manager\n" in md
    assert (
        "## torch.distributed.algorithms.Join\n"
        "<!-- objects: torch.distributed.algorithms.Join, torch.distributed.algorithms.join.Join -->\n"
        "<!-- anchor: torch.distributed.algorithms.Join -->\n\n```python\n"
        "class torch.distributed.algorithms.Join(joinables, enable=True, "
        "throw_on_early_termination=False, **kwargs)\n```"
    ) in md
    assert "### torch.distributed.algorithms.Join.notify_join_context\n" in md
    assert "```python\nstatic notify_join_context(joinable)\n```" in md
    assert "- **joinables** (`List[Joinable]`) \u2013 a list of the participating" in md
    assert "- **enable** (`bool`) \u2013 a flag enabling uneven input detection" in md
    assert "**Return type:** `JoinHook`" in md
    assert "> **Warning**\n>\n> The context manager requires each participating `Joinable`" in md
    assert "```python\n>>> import os\n>>> import torch\n" in md


def test_fully_shard_and_ddp_pages(scraped):
    md = page(scraped, "distributed.fsdp.fully_shard")
    assert (
        "<!-- anchor: torch.distributed.fsdp.fully_shard -->\n\n```python\n"
        "torch.distributed.fsdp.fully_shard(module, *, mesh=None" in md
    )
    assert "- **reshard_after_forward** (`" in md
    ddp = page(scraped, "generated/torch.nn.parallel.DistributedDataParallel")
    assert (
        "# torch.nn.parallel.DistributedDataParallel\n" in ddp
        or "## torch.nn.parallel.DistributedDataParallel\n" in ddp
    )
    assert (
        "```python\nclass torch.nn.parallel.DistributedDataParallel(module, device_ids=None" in ddp
    )


def test_prose_pages_and_tables(scraped):
    dist = page(scraped, "distributed")
    assert "<!-- anchor: which-backend-to-use -->" in dist
    assert "| Backend |" in dist and "|---|" in dist
    notes = page(scraped, "notes/fsdp")
    assert notes.count("<!-- anchor: ") >= 3
    tut = page(scraped, "tutorials/intermediate/FSDP_tutorial")
    assert "url: https://docs.pytorch.org/tutorials/intermediate/FSDP_tutorial.html" in tut
    assert "## How FSDP2 works\n<!-- anchor: how-fsdp2-works -->" in tut
    assert "```python\n" in tut and "fully_shard(" in tut
    assert "> **Note**" in tut
    ddp_tut = page(scraped, "tutorials/intermediate/ddp_tutorial")
    assert "```bash\n" in ddp_tut


def test_every_inventory_object_is_carried_by_a_chunk(scraped, site_config, fixture_site):
    refs, result = scraped
    assert result.uncovered == {}
    inv = parse_inventory(
        (fixture_site / "docs/2.13/objects.inv").read_bytes(), "https://docs.pytorch.org/docs/2.13/"
    ).by_page()
    checked = 0
    for spec in site_config.pages:
        chunks = chunk_page(refs / "web" / f"{spec.page}.md")
        carried = {o for c in chunks for o in c.objects}
        missing = {o.name for o in inv.get(spec.page, [])} - carried
        assert not missing, f"{spec.page}: {sorted(missing)[:5]}"
        checked += len(inv.get(spec.page, []))
        for c in chunks:
            assert c.url.startswith("https://docs.pytorch.org/")
    assert checked > 500


def test_refresh_without_changes_is_all_304_and_rewrites_nothing(scraped, site_config):
    refs, _ = scraped
    stamps = {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in refs.rglob("*") if p.is_file()}
    result = refresh_web(site_config, refs, log=lambda m: None)
    assert not result.changed
    assert result.not_modified == result.pages
    assert result.requests == result.pages + 2  # + both objects.inv
    after = {
        p: (p.stat().st_mtime_ns, p.stat().st_ino)
        for p in refs.rglob("*")
        if p.is_file()
        if not p.name.endswith(".lock")
    }
    assert after == {p: s for p, s in stamps.items() if not p.name.endswith(".lock")}
