"""fsdp-skill bundle: a zip of the installed skill that works unzipped, with no packages at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fsdp_skill.index.store import Index
from fsdp_skill.skill import bundle as B

REPO = Path(__file__).resolve().parents[2]
QUERY = "fully_shard reshard_after_forward"


def fsdp_skill(*args, data_dir, cwd=None):
    env = dict(
        os.environ,
        FSDP_SKILL_ROOT=str(REPO),
        FSDP_SKILL_DATA_DIR=str(data_dir),
        OMP_NUM_THREADS="1",
    )
    return subprocess.run(
        [sys.executable, "-m", "fsdp_skill.cli", *args],
        env=env,
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def agentskills() -> str | None:
    found = shutil.which("agentskills")
    beside = Path(sys.executable).with_name("agentskills")
    return found or (str(beside) if beside.exists() else None)


@pytest.fixture(scope="module")
def made(built_data, tmp_path_factory):
    """(zip path, torch version of the index) for one bundle of this skill."""
    out = tmp_path_factory.mktemp("bundle")
    run = fsdp_skill("bundle", "--output", str(out), data_dir=built_data)
    assert run.returncode == 0, run.stderr
    zips = list(out.glob("*.zip"))
    assert len(zips) == 1 and run.stdout.strip().startswith(f"wrote {zips[0]} (")
    index = Index(str(built_data / "index" / "index.bin"))
    try:
        version = index.header["torch_version"]
    finally:
        index.close()
    return zips[0], version


def unzip(zip_path: Path, dest: Path, tool: str = "python") -> Path:
    dest.mkdir()
    if tool == "unzip":
        subprocess.run(["unzip", "-q", str(zip_path), "-d", str(dest)], check=True)
    else:
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(dest)
    assert [p.name for p in dest.iterdir()] == ["pytorch-fsdp"]
    return dest / "pytorch-fsdp"


def bare_env(tmp_path: Path) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    Path(env["HOME"]).mkdir(exist_ok=True)
    return env


def search(python, skill, env, *flags, args=(QUERY, "--json", "--k", "3")):
    return subprocess.run(
        [str(python), *flags, str(skill / "scripts" / "search.py"), *args],
        cwd=skill,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_name_and_metadata_carry_the_torch_version(made):
    zip_path, version = made
    assert zip_path.name == f"pytorch-fsdp-0.1.0-torch{version}.zip"
    with zipfile.ZipFile(zip_path) as zf:
        skill_md = zf.read("pytorch-fsdp/SKILL.md").decode()
        names = set(zf.namelist())
    yaml = pytest.importorskip("yaml")
    front = yaml.safe_load(skill_md.split("\n---\n", 1)[0][4:])
    assert front["metadata"]["torch-version"] == version
    assert front["name"] == "pytorch-fsdp"
    # The installed layout: SKILL.md, scripts, guides, generated pages and index, the package.
    for rel in (
        "SKILL.md",
        "scripts/search.py",
        "scripts/fsdp2_train.py",
        "references/guides/fsdp2-quickstart.md",
        "references/index/index.bin",
        "references/api/build-info.txt",
        "src/fsdp_skill/search/engine.py",
        "src/fsdp_skill/index/store.py",
        B.TIMES_FILE,
    ):
        assert f"pytorch-fsdp/{rel}" in names, rel
    assert not any("__pycache__" in n or "/tests/" in n or n.endswith(".lock") for n in names)


def test_unzipped_bundle_validates_and_searches_with_no_packages(made, tmp_path):
    zip_path, version = made
    skill = unzip(zip_path, tmp_path / "empty")
    cli = agentskills()
    if cli is None:
        pytest.skip("skills-ref (agentskills) is not installed")
    check = subprocess.run([cli, "validate", str(skill)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    index_bytes = (skill / "references" / "index" / "index.bin").read_bytes()
    env = bare_env(tmp_path)
    # -S -I: no site-packages at all, no environment variables, the standard library only.
    out = search(sys.executable, skill, env, "-S", "-I")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["torch_version"] == version and len(data["results"]) == 3
    assert all(
        r["url"].startswith(("https://docs.pytorch.org/docs/2.", "references/guides/"))
        for r in data["results"]
    )
    assert "building" not in out.stderr  # served as shipped, nothing rebuilt
    assert (skill / "references" / "index" / "index.bin").read_bytes() == index_bytes
    assert not (skill / B.TIMES_FILE).exists()  # the times were restored once
    assert not (tmp_path / "cache").exists()

    again = search(sys.executable, skill, env, "-S", "-I", args=("DistributedSampler set_epoch",))
    assert again.returncode == 0 and again.stdout.startswith("## 1. "), again.stderr


def test_unzip_tool_and_a_bare_venv_work_too(made, tmp_path):
    if shutil.which("unzip") is None:
        pytest.skip("no unzip on this machine")
    skill = unzip(made[0], tmp_path / "empty", tool="unzip")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True
    )
    out = search(tmp_path / "bare" / "bin" / "python", skill, bare_env(tmp_path))
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["results"]) == 3 and "building" not in out.stderr


def test_a_page_edited_after_unzipping_still_makes_the_index_stale(made, tmp_path):
    skill = unzip(made[0], tmp_path / "empty")
    guide = skill / "references" / "guides" / "launching.md"
    guide.write_text(guide.read_text() + "\nAn edit.\n")
    out = search(sys.executable, skill, bare_env(tmp_path), "-S", "-I")
    # Not served stale: the rebuild it needs cannot run with no packages, and it says what to install.
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "search.py: error: building the search index needs "
    )
    assert "-m pip install" in lines[0]


def test_with_torch_metadata_adds_or_replaces_one_entry():
    md = '---\nname: x\nmetadata:\n    version: "1"\n---\nbody\n'
    out = B.with_torch_metadata(md, "2.13.0")
    assert (
        out == '---\nname: x\nmetadata:\n    torch-version: "2.13.0"\n    version: "1"\n---\nbody\n'
    )
    assert B.with_torch_metadata(out, "2.14.0").count("torch-version") == 1
    assert (
        B.with_torch_metadata("---\nname: x\n---\nb\n", "2.13.0")
        == '---\nname: x\nmetadata:\n  torch-version: "2.13.0"\n---\nb\n'
    )
    with pytest.raises(ValueError):
        B.with_torch_metadata("no frontmatter", "1")


@pytest.mark.parametrize(
    "args,code,start",
    [
        (
            ["--output", "/nonexistent-dir/x.zip"],
            1,
            "fsdp-skill bundle: /nonexistent-dir: no such folder",
        ),
        (["--output", "missing-dir/"], 1, "fsdp-skill bundle: missing-dir: no such folder"),
        (["--bogus"], 2, "fsdp-skill bundle: error: unrecognized arguments: --bogus"),
        (["--output", " "], 2, "fsdp-skill bundle: error: --output must name a file"),
    ],
)
def test_bad_arguments_are_one_line(args, code, start, built_data, tmp_path):
    run = fsdp_skill("bundle", *args, data_dir=built_data, cwd=tmp_path)
    assert run.returncode == code
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), run.stderr
    assert not list(tmp_path.iterdir())  # nothing written, not even a temp file
