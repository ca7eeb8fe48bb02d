"""Scraper faults from the fault campaign (group F): each fails cleanly, in bounded time, and
the previous references keep serving."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from fault_helpers import CLIENT, fake_builder, inventory, site, tree, watch_renames  # noqa: F401 (site: fixture)

from fsdp_skill.build import refresh_web
from fsdp_skill.scrape_cli import main as scrape_main
from fsdp_skill.sources.web import html_to_md
from fsdp_skill.sources.web.inventory import InventoryError, parse_inventory
from fsdp_skill.sources.web.scrape import ScrapeError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def run_scrape(site, refs, **kw):
    kw.setdefault("index_builder", fake_builder)
    return refresh_web(site.config, refs, log=lambda m: None, **kw)


@pytest.fixture
def refs(site, tmp_path):
    """references/ after one good scrape; the site then changes, so a refresh rewrites files."""
    root = tmp_path / "references"
    run_scrape(site, root)
    site.prose = "Second version."
    return root


def expect_failure(site, refs, match, **kw):
    before = tree(refs)
    with pytest.raises(ScrapeError, match=match):
        run_scrape(site, refs, **kw)
    assert tree(refs) == before
    assert not [p for p in refs.iterdir() if p.name.startswith(".scrape-")]


def with_client(site, **changes):
    site.config = replace(site.config, client=replace(CLIENT, **changes))


# ---- deadlines -----------------------------------------------------------------------------


def test_dripping_body_is_cut_at_the_page_deadline(site, refs):
    # One byte every 50 ms never trips the 0.5 s read timeout; the page would take minutes.
    site.action["/docs/2.13/beta.html"] = "drip"
    with_client(site, page_deadline_s=1.0)
    started = time.monotonic()
    expect_failure(
        site, refs, r"page beta: .*beta.html: no complete answer within the 1 s page deadline"
    )
    assert time.monotonic() - started < 6


def test_dripping_headers_are_cut_at_the_page_deadline(site, refs):
    site.action["/docs/2.13/alpha.html"] = "drip-headers"
    with_client(site, page_deadline_s=1.0)
    started = time.monotonic()
    expect_failure(site, refs, r"page alpha: .*page deadline")
    assert time.monotonic() - started < 6


def test_slow_pages_are_cut_at_the_run_deadline(site, refs):
    # Each page alone is within its deadline; together they pass the run's.
    for name in ("alpha", "beta"):
        site.action[f"/docs/2.13/{name}.html"] = "drip"
    site.drip_s = 0.001
    with_client(site, page_deadline_s=30.0, run_deadline_s=1.0)
    started = time.monotonic()
    expect_failure(site, refs, r"ran past its 1 s deadline \(client run_deadline_s\)")
    assert time.monotonic() - started < 6


# ---- objects.inv ---------------------------------------------------------------------------


def test_truncated_inventory_fails_and_keeps_the_references(site, refs):
    full = inventory(site.names)
    site.override["/docs/2.13/objects.inv"] = full[: len(full) - 8]
    expect_failure(site, refs, r"objects.inv is truncated")


def test_inventory_with_unparsable_lines_fails(site, refs):
    site.override["/docs/2.13/objects.inv"] = inventory(site.names, b"garbage without fields\n")
    expect_failure(site, refs, r"objects.inv is inconsistent: 1 of 3 object lines do not parse")


def test_inventory_inflation_is_capped():
    header = (
        b"# Sphinx inventory version 2\n# Project: P\n# Version: 1\n"
        b"# The remainder of this file is compressed using zlib.\n"
    )
    line = b"torch.fake.x py:function 1 x.html#$ -\n"
    bomb = header + zlib.compress(line * (33 * 1024 * 1024 // len(line) + 1), 9)
    assert len(bomb) < 300 * 1024  # a small download ...
    started = time.monotonic()
    with pytest.raises(InventoryError, match="inflates to more than 32 MiB"):
        parse_inventory(bomb, "https://docs.pytorch.org/docs/2.13/")
    assert time.monotonic() - started < 10  # ... that is refused before it is parsed
    many = header + zlib.compress(b"a py:function 1 a.html -\n" * 300_001)
    with pytest.raises(InventoryError, match="more than 300000 objects"):
        parse_inventory(many, "https://docs.pytorch.org/docs/2.13/")


# ---- HTML ----------------------------------------------------------------------------------


@pytest.mark.parametrize("nest", ["<div>" * 600, "<ul><li>" * 300])
def test_deeply_nested_html_is_a_one_line_error(site, refs, nest):
    site.extra = nest + "deep"
    expect_failure(site, refs, r"page alpha .*HTML nests more than 150 elements deep")


def test_nested_field_lists_convert_in_linear_time(monkeypatch):
    # Each level rendered its nested blocks twice, so time doubled per level.
    calls = {"n": 0}
    real = html_to_md._Converter.field_item

    def counting(self, container):
        calls["n"] += 1
        return real(self, container)

    monkeypatch.setattr(html_to_md._Converter, "field_item", counting)
    levels = 12
    html = (
        "<html><head><title>T</title></head><body><article class='bd-article'><section id='s'>"
        "<h1>T</h1>"
        + "<dl class='field-list'><dt>P</dt><dd><ul><li>" * levels
        + "x"
        + "</section></article></body></html>"
    )
    md = html_to_md.convert_page(html, page="p", url="u", torch_version="2.13").markdown
    assert calls["n"] == levels and md.count("**P:**") == levels


def test_control_characters_are_stripped(site, tmp_path):
    site.prose = "red \x1b[31mALERT\x1b[0m, RLO \u202eevil, CSI \x9b1m, bell\x07, &#27;[2J done"
    run_scrape(site, tmp_path / "references")
    md = (tmp_path / "references" / "web" / "alpha.md").read_text(encoding="utf-8")
    assert "ALERT" in md and "evil" in md and "done" in md
    bad = [
        c
        for c in md
        if (ord(c) < 32 and c not in "\n\t")
        or 0x7F <= ord(c) <= 0x9F
        or c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    ]
    assert bad == []


def test_control_characters_in_inventory_names_are_stripped():
    data = inventory(
        ["alpha"], "torch.fake.\x1b[2Jevil\u202e py:function 1 evil.html#$ -\n".encode()
    )
    names = sorted(
        o.name for o in parse_inventory(data, "https://docs.pytorch.org/docs/2.13/").objects
    )
    assert names == ["torch.fake.[2Jevil", "torch.fake.alpha"]


# ---- configuration and options -------------------------------------------------------------

BASE_CONFIG = """\
version: '2.13'
site_root: https://docs.pytorch.org/
docs_base: docs/{version}/
tutorials_base: tutorials/
pages:
  - {page: fsdp, category: reference}
"""


@pytest.mark.parametrize(
    "argv, client, needle",
    [
        (["--version", "bogus"], "", "version 'bogus' is not"),
        (
            ["--base-url", "ftp://127.0.0.1/"],
            "",
            "--base-url 'ftp://127.0.0.1/' is not an http(s) URL",
        ),
        (["--base-url", "not a url"], "", "--base-url 'not a url' is not an http(s) URL"),
        (
            [],
            "client: {read_timeout_s: 0}\n",
            "read_timeout_s must be a positive number of seconds, got 0",
        ),
        ([], "client: {connect_timeout_s: .nan}\n", "connect_timeout_s must be a positive number"),
        ([], "client: {page_deadline_s: -1}\n", "page_deadline_s must be a positive number"),
        ([], "client: {retries: 1.0e+400}\n", "bad client setting"),
    ],
)
def test_bad_values_are_usage_errors(argv, client, needle, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE_CONFIG + client)
    # Port 9 on 127.0.0.1 refuses connections: should a bad value ever be accepted, nothing
    # leaves the machine (a later --base-url in argv wins).
    rc = scrape_main(
        [
            "--config",
            str(cfg),
            "--references",
            str(tmp_path / "refs"),
            "--base-url",
            "http://127.0.0.1:9/",
        ]
        + argv
    )
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_fifo_config_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)
    assert scrape_main(["--config", str(fifo), "--references", str(tmp_path / "refs")]) == 2
    assert "not a regular file" in capsys.readouterr().err


# ---- swapping the references in ------------------------------------------------------------


def test_web_is_never_missing_during_a_refresh(site, refs, monkeypatch):
    web = refs / "web"
    holes = []

    def check(where):
        if not (web / "alpha.md").is_file() or not (web / "beta.md").is_file():
            holes.append(where)

    calls = watch_renames(monkeypatch, check)
    assert run_scrape(site, refs).changed
    assert calls["n"] > 0 and holes == []
    assert "Second version." in (web / "alpha.md").read_text()


KILLED_SCRAPE = textwrap.dedent("""
    import os, sys
    from dataclasses import replace
    sys.path[:0] = [{here!r}]
    from fault_helpers import CLIENT, fake_builder
    from fsdp_skill import files
    from fsdp_skill.build import refresh_web
    from fsdp_skill.sources.web.config import parse_config
    web = os.path.join({refs!r}, "web")
    real = files.exchange
    def exchange(a, b):
        done = real(a, b)
        if web in (str(a), str(b)):
            os._exit(137)  # SIGKILL right after web/ was swapped
        return done
    files.exchange = exchange
    cfg = parse_config({{"version": "2.13", "site_root": "https://docs.pytorch.org/",
                        "docs_base": "docs/{{version}}/", "tutorials_base": "tutorials/",
                        "pages": [{{"page": n, "category": "reference"}} for n in ("alpha", "beta")]}})
    cfg = replace(cfg.with_overrides(base_url={url!r}), client=CLIENT)
    refresh_web(cfg, {refs!r}, index_builder=fake_builder, log=lambda m: None)
    sys.exit(3)  # not reached: the kill comes first
""")


def test_a_killed_swap_keeps_web_and_the_next_run_cleans_up(site, refs):
    from fsdp_skill import files

    if not files.supported(refs):
        pytest.skip(
            "no atomic folder swap here; the two-rename fallback is recovered on the next run"
        )
    code = KILLED_SCRAPE.format(here=str(HERE), refs=str(refs), url=site.url)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 137, proc.stderr
    assert (refs / "web" / "alpha.md").is_file()  # old or new, never missing
    assert [
        p.name for p in refs.iterdir() if p.name.startswith(".scrape-")
    ]  # the kill left its stage
    run_scrape(site, refs)
    assert not [p.name for p in refs.iterdir() if p.name.startswith(".scrape-")]
    assert "Second version." in (refs / "web" / "alpha.md").read_text()


def test_stage_folders_of_a_killed_run_are_removed(site, refs):
    # What a SIGKILL during an earlier version's two-rename swap left: web/ gone, the old tree
    # in the stage folder. The next run puts it back before anything else, then cleans up.
    stage = refs / ".scrape-dead0001"
    stage.mkdir()
    os.rename(refs / "web", stage / "old-0")
    (refs / ".scrape-dead0002" / "web").mkdir(parents=True)
    (refs / ".scrape-notours.txt").write_text("a user's file with a similar name")
    site.action["/docs/2.13/alpha.html"] = "drip"  # this run then fails ...
    with_client(site, page_deadline_s=0.5)
    with pytest.raises(ScrapeError):
        run_scrape(site, refs)
    assert (refs / "web" / "alpha.md").read_text().count("First version.") == 1  # ... web is back
    left = {p.name for p in refs.iterdir() if p.name.startswith(".scrape")}
    assert left == {".scrape-notours.txt"}


def test_index_dir_keeps_files_it_did_not_write(site, refs, tmp_path):
    index_dir = tmp_path / "my-index"
    index_dir.mkdir()
    (index_dir / "precious.txt").write_text("data")
    (index_dir / "index.bin").write_text("old index")
    result = run_scrape(site, refs, index_dir=index_dir)
    assert result.changed and result.index_built
    assert (index_dir / "precious.txt").read_text() == "data"
    assert (index_dir / "index.bin").read_text() == "alpha.md\nbeta.md"
    assert sorted(p.name for p in index_dir.iterdir()) == [
        "index.bin",
        "manifest.json",
        "precious.txt",
    ]


def test_failed_index_swap_restores_web_and_index(site, refs, tmp_path, monkeypatch):
    from fsdp_skill import build as build_mod

    index_dir = tmp_path / "my-index"
    index_dir.mkdir()
    (index_dir / "precious.txt").write_text("data")
    run_scrape(site, refs, index_dir=index_dir)
    site.prose = "Third version."
    before_web, before_index = tree(refs / "web"), tree(index_dir)
    real = build_mod.os.replace
    seen = {"n": 0}

    def flaky(src, dst):
        if Path(dst).parent == index_dir and not Path(dst).name.startswith("."):
            seen["n"] += 1
            if seen["n"] == 2:  # the second index file: the first one is already in place
                raise OSError(28, "No space left on device", str(dst))
        return real(src, dst)

    monkeypatch.setattr(build_mod.os, "replace", flaky)
    with pytest.raises(ScrapeError, match="could not swap in the new index: .*No space left"):
        run_scrape(site, refs, index_dir=index_dir)
    assert tree(refs / "web") == before_web and tree(index_dir) == before_index


def test_a_scrape_takes_the_build_lock(site, refs, monkeypatch):
    # One lock for the pages and the index of a data folder: a scrape waits for a build that
    # holds it (here one that never ends, so the wait is cut at the limit) and changes nothing.
    from filelock import FileLock

    from fsdp_skill.build import BuildError

    monkeypatch.setenv("FSDP_SKILL_LOCK_TIMEOUT_S", "0.5")
    before = tree(refs)
    with FileLock(str(refs / ".build.lock")):
        with pytest.raises(BuildError, match=r"another process has held .*\.build\.lock"):
            run_scrape(site, refs)
    assert tree(refs) == before
    assert [p.name for p in refs.iterdir() if p.name.endswith(".lock")] == [".build.lock"]
