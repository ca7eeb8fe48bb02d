"""scripts/search.py and `fsdp-skill search` as a user and an agent run them."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULT_KEYS = [
    "rank",
    "score",
    "id",
    "title",
    "breadcrumbs",
    "url",
    "objects",
    "source",
    "path",
    "text",
]


def test_powersgd_query_finds_the_hook_with_versioned_urls(built_data, run_search):
    out = run_search(["compress DDP gradients with PowerSGD", "--json", "--k", "3"], built_data)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    objs = [o for r in data["results"] for o in r["objects"]]
    assert {
        "torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook",
        "torch.nn.parallel.DistributedDataParallel.register_comm_hook",
    } & set(objs), objs
    for r in data["results"]:
        assert r["url"].startswith("https://docs.pytorch.org/docs/2.") or r["url"].startswith(
            "references/guides/"
        )


def test_json_schema_is_exact(built_data, run_search):
    out = run_search(["fully_shard mixed precision", "--json"], built_data)
    data = json.loads(out.stdout)
    assert list(data) == ["query", "torch_version", "results"]
    assert data["query"] == "fully_shard mixed precision"
    assert data["torch_version"].startswith("2.")
    assert len(data["results"]) == 5
    for n, r in enumerate(data["results"], start=1):
        assert list(r) == RESULT_KEYS
        assert r["rank"] == n and isinstance(r["score"], float)
        assert isinstance(r["breadcrumbs"], list) and isinstance(r["objects"], list)


def test_markdown_output_paging_and_cap(built_data, run_search):
    out = run_search(["DistributedSampler set_epoch"], built_data)
    assert out.returncode == 0
    assert out.stdout.startswith("## 1. ")
    sources = re.findall(r"^Source: (\S+) \(torch (2\.\S+)\)$", out.stdout, re.M)
    assert sources and len(sources) == out.stdout.count("\nSource: ")
    # Each hit names where it comes from: a guide of the skill, or the versioned docs page.
    assert all(
        u.startswith(("references/", "https://docs.pytorch.org/docs/2.")) for u, _ in sources
    )
    ref = run_search(["DistributedSampler set_epoch", "--source", "docstring"], built_data)
    assert "Source: https://docs.pytorch.org/docs/2." in ref.stdout and "(torch 2." in ref.stdout
    page2 = run_search(
        ["DistributedSampler set_epoch", "--page", "2", "--json", "--k", "2"], built_data
    )
    assert [r["rank"] for r in json.loads(page2.stdout)["results"]] == [3, 4]
    capped = run_search(["fully_shard", "--max-chars", "1000"], built_data)
    assert len(capped.stdout) < 1400 and "--max-chars" in capped.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        ([""], "empty query"),
        (["   "], "empty query"),
        (["q", "--k", "zero"], "--k needs a whole number"),
        (["q", "--k", "0"], "--k must be at least 1"),
        (["q", "--bogus"], "unknown option --bogus"),
        (["q", "--source", "blog"], "--source must be one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(built_data, run_search, args, message):
    out = run_search(args, built_data)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_long_query_is_truncated_with_a_note(built_data, run_search):
    out = run_search(["fully_shard " * 400, "--json"], built_data)
    assert out.returncode == 0
    assert "truncated" in out.stderr
    assert len(json.loads(out.stdout)["query"]) == 2000


def test_help(run_search, built_data):
    out = run_search(["--help"], built_data)
    assert out.returncode == 0 and "--max-chars" in out.stdout


def test_missing_index_is_built_on_first_use(tmp_path, run_search):
    out = run_search(["Join uneven inputs"], tmp_path / "fresh")
    assert out.returncode == 0, out.stderr
    assert "building the search index (missing)" in out.stderr
    assert (tmp_path / "fresh" / "index" / "index.bin").exists()
    again = run_search(["Join uneven inputs"], tmp_path / "fresh")
    assert again.stderr == "" and again.stdout == out.stdout


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_index_is_rebuilt(data_copy, run_search, damage):
    index = data_copy / "index" / "index.bin"
    raw = index.read_bytes()
    index.write_bytes(raw[: len(raw) // 3] if damage == "truncate" else os.urandom(len(raw)))
    out = run_search(["barrier timeout"], data_copy)
    assert out.returncode == 0, out.stderr
    assert "building the search index" in out.stderr and "Traceback" not in out.stderr
    assert out.stdout.startswith("## 1. ")


def test_index_of_another_torch_version_is_rebuilt_not_served(data_copy, run_search):
    import torch

    index = data_copy / "index" / "index.bin"
    raw = index.read_bytes()
    real = f"torch_version={torch.__version__}\n".encode()
    assert real in raw
    fake = "1." + "9" * (len(str(torch.__version__)) - 2)  # same length keeps the offsets valid
    index.write_bytes(raw.replace(real, f"torch_version={fake}\n".encode(), 1))
    out = run_search(["barrier timeout"], data_copy)
    assert out.returncode == 0
    assert f"built for torch {fake}" in out.stderr


def test_edited_page_triggers_reindex(data_copy, run_search):
    page = data_copy / "api" / "data.md"
    page.write_text(page.read_text() + "\nA zanzibarquux sentence.\n")
    out = run_search(["zanzibarquux", "--json"], data_copy)
    assert "reference pages changed" in out.stderr
    assert json.loads(out.stdout)["results"][0]["path"] == "references/api/data.md"


def test_two_searches_at_once_build_once(tmp_path):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(tmp_path / "d"))
    cmd = [sys.executable, str(REPO / "scripts" / "search.py"), "init_process_group", "--json"]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sum(err.count("building the search index") for _, err in outs) == 1
    assert json.loads(outs[0][0]) == json.loads(outs[1][0])
    assert not [p for p in (tmp_path / "d").rglob("*") if ".tmp" in p.name or "-new-" in p.name]


def test_search_works_without_torch_on_an_existing_index(built_data, run_search):
    # Hide site-packages: the interpreter then has neither torch nor any other dependency.
    code = (
        "import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p]; "
        "sys.argv = ['search.py', 'fully_shard', '--json']; import runpy; "
        f"runpy.run_path({str(REPO / 'scripts' / 'search.py')!r}, run_name='__main__')"
    )
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(built_data))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["results"]


def test_build_without_torch_says_torch_is_needed(tmp_path):
    code = (
        "import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p]; "
        f"sys.path.insert(0, {str(REPO / 'src')!r}); sys.argv = ['search.py', 'fully_shard']; "
        "from fsdp_skill.search.cli import main; sys.exit(main())"
    )
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(tmp_path / "none"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 1
    assert "torch" in out.stderr and "Traceback" not in out.stderr


def test_works_from_another_directory(built_data, run_search, tmp_path):
    out = run_search(["DeviceMesh"], built_data, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("## 1.")


def test_query_path_imports_nothing_heavy(built_data, run_search):
    out = run_search(
        ["fully_shard", "--json"],
        built_data,
        python=sys.executable,
        extra_env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert out.returncode == 0
    imported = {
        line.split("|")[-1].strip()
        for line in out.stderr.splitlines()
        if line.startswith("import time:")
    }
    for heavy in (
        "torch",
        "numpy",
        "sqlite3",
        "re",
        "json",
        "argparse",
        "yaml",
        "markdown_it",
        "rank_bm25",
    ):
        assert heavy not in imported, heavy


def test_unwritable_skill_folder_falls_back_to_user_cache(tmp_path, monkeypatch):
    from fsdp_skill import paths

    monkeypatch.delenv("FSDP_SKILL_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(paths, "_writable", lambda p: False)
    skill = tmp_path / "skill"
    (skill / "references" / "guides").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: pytorch-fsdp\n---\n")
    data = paths.data_dir(str(skill))
    assert data.startswith(str(tmp_path / "cache" / "pytorch-fsdp-skill"))
    # A read-only copy that ships its index serves that index instead.
    (skill / "references" / "index").mkdir()
    (skill / "references" / "index" / paths.INDEX_FILE).write_bytes(b"")
    assert paths.data_dir(str(skill)) == str(skill / "references")


def test_console_script_matches_script(built_data):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(built_data))
    a = subprocess.run(
        [sys.executable, "-m", "fsdp_skill.cli", "search", "no_sync", "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    b = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "search.py"), "no_sync", "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert a.returncode == 0 and a.stdout == b.stdout


@pytest.mark.parametrize(
    "content",
    [
        b"no front matter here\n",
        b"---\ntitle: [unclosed\n---\n# x\n",
        b"---\ntitle: t\nurl: u\nsource: web\ntorch_version: '2.13'\npage: p\n---\n\xff\xfe\n",
    ],
)
def test_a_bad_page_gives_one_line_naming_it(data_copy, run_search, content):
    (data_copy / "web").mkdir(exist_ok=True)
    (data_copy / "web" / "bad.md").write_bytes(content)
    out = run_search(["fully_shard"], data_copy)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "bad.md" in out.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("value", ["--5", "²", "1.5"])
def test_odd_numbers_are_usage_errors(built_data, run_search, value):
    out = run_search(["q", "--k", value], built_data)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_undecodable_query_bytes(built_data):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(built_data))
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "search.py"), b"fsdp \xff\xfe", "--json"],
        env=env,
        capture_output=True,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["results"]


def test_small_max_chars_still_shows_the_first_hit(built_data, run_search):
    out = run_search(
        ["fully_shard reshard_after_forward", "--k", "3", "--max-chars", "300"], built_data
    )
    assert out.stdout.startswith("## 1. ") and "Source: " in out.stdout
    assert "truncated by --max-chars" in out.stdout and "2 more results cut" in out.stdout
    assert len(out.stdout) <= 300


def test_scraped_pages_of_another_release_do_not_replace_the_api_pages(data_copy, run_search):
    web = data_copy / "web"
    web.mkdir(exist_ok=True)
    (web / "distributed.md").write_text(
        "---\ntitle: Old\nurl: https://docs.pytorch.org/docs/1.9/distributed.html\nsource: web\n"
        "torch_version: '1.9'\npage: distributed\n---\n# Old\n\n## Zorblax section\n\nzorblax words.\n"
    )
    out = run_search(["init_process_group", "--json", "--k", "10"], data_copy)
    assert "scraped pages describe torch 1.9" in out.stderr
    assert any(
        r["source"] == "docstring" and r["path"] == "references/api/distributed.md"
        for r in json.loads(out.stdout)["results"]
    )
    assert json.loads(run_search(["zorblax", "--json"], data_copy).stdout)["results"] == []
    assert json.loads(run_search(["zorblax", "--json", "--source", "web"], data_copy).stdout)[
        "results"
    ]
