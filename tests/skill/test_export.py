"""fsdp-skill export --llms-txt DIR: llms.txt (an index of the pages) and llms-full.txt."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(args, data_dir, cwd):
    env = dict(
        os.environ,
        FSDP_SKILL_ROOT=str(REPO),
        FSDP_SKILL_DATA_DIR=str(data_dir),
        OMP_NUM_THREADS="1",
    )
    return subprocess.run(
        [sys.executable, "-m", "fsdp_skill.cli", "export", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_llms_txt_lists_every_page_with_a_versioned_url(built_data, tmp_path):
    out = run(["--llms-txt", str(tmp_path / "out")], built_data, tmp_path)
    assert out.returncode == 0, out.stderr
    index = (tmp_path / "out" / "llms.txt").read_text(encoding="utf-8")
    full = (tmp_path / "out" / "llms-full.txt").read_text(encoding="utf-8")
    lines = index.splitlines()
    # The convention: an H1 title, a > summary, then H2 sections of "- [title](url): note" links.
    assert lines[0].startswith("# PyTorch FSDP and torch.distributed") and lines[2].startswith("> ")
    assert "## Guides" in lines and "## API reference" in lines
    links = [ln for ln in lines if ln.startswith("- [")]
    assert len(links) > 20 and all("](" in ln for ln in links)
    api = [ln for ln in links if "docs.pytorch.org" in ln]
    assert api and all("](https://docs.pytorch.org/docs/2." in ln for ln in api)
    assert any("(references/guides/fsdp2-quickstart.md)" in ln for ln in links)
    fully_shard = next(
        ln for ln in links if ln.startswith("- [torch.distributed.fsdp.fully_shard](")
    )
    assert "`torch.distributed.fsdp.fully_shard`" in fully_shard or "API entr" in fully_shard
    # The full file carries every page's text under its title and source.
    for ln in links:
        title, url = ln[3:].split("](", 1)[0], ln.split("](", 1)[1].split(")", 1)[0]
        assert f"\n# {title}\nSource: {url} (torch " in full, title
    assert "set_requires_gradient_sync" in full and "## " in full


def test_bad_arguments(built_data, tmp_path):
    out = run([], built_data, tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    (tmp_path / "afile").write_text("x")
    out = run(["--llms-txt", str(tmp_path / "afile" / "sub")], built_data, tmp_path)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsdp-skill export: "), out.stderr
