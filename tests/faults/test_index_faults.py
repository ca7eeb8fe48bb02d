"""Faults of the query path: a damaged index, a failing stdout, a stuck build, a killed build.

Each test reproduces a case of the fault campaign that once failed (a traceback, a hang, or a
corrupt answer served) and checks the promise: one line and a non-zero exit, or a rebuild and
the same answer as before.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBES = [
    "how do I accumulate gradients with fully_shard",
    "ZeroRedundancyOptimizer",
    "uneven inputs join",
    "dcp.save async",
]


def _answers(run_search, data):
    out = []
    for q in PROBES:
        r = run_search([q, "--json", "--k", "10"], data)
        assert r.returncode == 0, r.stderr
        out.append([(h["id"], h["score"], h["text"]) for h in json.loads(r.stdout)["results"]])
    return out


def _flip(path, pos, xor):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ xor]))


@pytest.mark.slow
def test_random_byte_flips_are_never_served(data_copy, run_search):
    """Any flipped byte is detected: the index is rebuilt and the answers equal the originals."""
    baseline = _answers(run_search, data_copy)
    index = data_copy / "index" / "index.bin"
    pristine = index.read_bytes()
    rng = random.Random(42)
    for trial in range(8):
        index.write_bytes(pristine)
        pos = rng.randrange(len(pristine))
        _flip(index, pos, rng.randrange(1, 256))
        got = _answers(run_search, data_copy)
        assert got == baseline, f"flip at byte {pos} (trial {trial}) changed the answers"


def _sections(index):
    from fsdp_skill.index.store import SECTIONS, Index

    idx = Index(str(index))
    try:
        return {name: idx._sec[name] for name in SECTIONS}
    finally:
        idx.close()


@pytest.mark.parametrize(
    "section", ["vocab", "postings", "docs", "docoffs", "priors", "doccrc", "stamp"]
)
def test_a_flip_in_each_section_is_detected(data_copy, section):
    # Queries check what they read; verify() reads everything, so every flip must surface.
    from fsdp_skill.index.store import Index, IndexFileError

    index = data_copy / "index" / "index.bin"
    off, size = _sections(index)[section]
    _flip(index, off + size // 2, 0x5A)
    idx = Index(str(index))
    try:
        with pytest.raises(IndexFileError):
            idx.verify()
    finally:
        idx.close()


@pytest.mark.parametrize(
    "edit",
    [
        (b"n_docs=", b"n_docs=9"),  # a wrong document count
        (b"vocab_len=", b"vocab_len=-"),  # a negative length
        (b"docs_off=", b"docs_off=9"),  # an offset past the end
    ],
)
def test_corrupt_headers_rebuild_quietly(data_copy, run_search, edit):
    index = data_copy / "index" / "index.bin"
    index.write_bytes(index.read_bytes().replace(*edit, 1))
    r = run_search(["fully_shard", "--json"], data_copy)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["results"]


def test_nan_scores_never_reach_json():
    from fsdp_skill.search.cli import to_json

    assert to_json({"score": float("nan"), "x": [float("inf")]}) == '{"score": null, "x": [null]}'


def test_a_fifo_in_place_of_the_index_does_not_hang(data_copy, run_search):
    index = data_copy / "index" / "index.bin"
    index.unlink()
    os.mkfifo(index)
    r = run_search(["fully_shard"], data_copy)  # the helper's own timeout fails a hang
    assert "Traceback" not in r.stderr
    # Never opened: rebuilt in its place.
    assert r.returncode == 0 and "not a regular file" in r.stderr and index.is_file(), r.stderr


def _search_cmd(data, *args):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(data))
    return [sys.executable, str(REPO / "scripts" / "search.py"), "fully_shard", *args], env


def test_closed_pipe_is_quiet(built_data):
    cmd, env = _search_cmd(built_data)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader went away, as `| head -0` does
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0 and "Traceback" not in err and "Broken pipe" not in err, err


def test_full_disk_and_closed_stdout_give_one_line(built_data):
    cmd, env = _search_cmd(built_data)
    with open("/dev/full", "w") as full:
        r = subprocess.run(cmd, env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "No space left" in r.stderr, r.stderr
    r = subprocess.run(
        " ".join(f"'{c}'" for c in cmd) + " >&-",
        shell=True,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_ascii_terminal_gets_replacement_characters(built_data):
    cmd, env = _search_cmd(built_data)
    cmd[2] = "🔥 fully_shard ÿ"
    r = subprocess.run(
        cmd, env=dict(env, PYTHONIOENCODING="ascii"), capture_output=True, timeout=60
    )
    assert r.returncode == 0 and b"Traceback" not in r.stderr and r.stdout.startswith(b"## 1.")
    r.stdout.decode("ascii")


@pytest.mark.parametrize("max_chars", [200, 500, 1500])
def test_max_chars_is_a_bound(built_data, run_search, max_chars):
    for q in ("fully_shard", "FullyShardedDataParallel constructor", "save checkpoint"):
        r = run_search([q, "--max-chars", str(max_chars)], built_data)
        assert r.returncode == 0 and len(r.stdout) <= max_chars, (q, len(r.stdout))


def test_lock_wait_has_a_limit_and_says_why(data_copy, run_search):
    from filelock import FileLock

    (data_copy / "index" / "index.bin").unlink()  # the search must build, so it needs the lock
    with FileLock(str(data_copy / ".build.lock")):
        r = run_search(["fully_shard"], data_copy, extra_env={"FSDP_SKILL_LOCK_TIMEOUT_S": "1"})
    assert (
        r.returncode == 1 and "waiting for another build" in r.stderr and "over 1 s" in r.stderr
    ), r.stderr
    assert "Traceback" not in r.stderr


def test_leftovers_of_a_killed_build_are_removed(data_copy, run_search):
    (data_copy / ".api-new-deadbeef").mkdir()
    (data_copy / ".api-old-123").mkdir()
    (data_copy / "index" / ".index.bin.tmp-999").write_bytes(b"half")
    (data_copy / "index" / "index.bin").unlink()
    r = run_search(["fully_shard"], data_copy)
    assert r.returncode == 0, r.stderr
    left = [p.name for p in data_copy.iterdir()] + [p.name for p in (data_copy / "index").iterdir()]
    assert not [n for n in left if n.startswith((".api-new-", ".api-old-", ".index.bin.tmp-"))], (
        left
    )


def test_read_only_skill_with_a_stale_index_uses_the_cache(tmp_path, monkeypatch, built_data):
    """A shared read-only install after a torch upgrade rebuilds in the user cache."""
    import shutil

    from fsdp_skill import paths
    from fsdp_skill.search.engine import run_query

    skill = tmp_path / "pytorch-fsdp"
    shutil.copytree(REPO / "references" / "guides", skill / "references" / "guides")
    (skill / "SKILL.md").write_text("---\nname: pytorch-fsdp\n---\n")
    shutil.copytree(built_data / "index", skill / "references" / "index")
    shutil.copytree(built_data / "api", skill / "references" / "api")
    index = skill / "references" / "index" / "index.bin"
    index.write_bytes(index.read_bytes().replace(b"torch_version=", b"torch_version=0.0", 1))
    refs = str(skill / "references")
    real = paths._writable
    monkeypatch.setattr(paths, "_writable", lambda p: False if str(p).startswith(refs) else real(p))
    monkeypatch.delenv("FSDP_SKILL_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    before = index.read_bytes()
    results, _ = run_query("fully_shard", root=str(skill), k=3)
    assert results and index.read_bytes() == before
    assert list((tmp_path / "cache").rglob("index.bin")), "no index was built in the user cache"


def test_a_rebuild_puts_back_pages_a_killed_scrape_moved_aside(data_copy, run_search):
    # Without an atomic folder swap, a scrape killed between its two renames leaves web/
    # missing and the previous tree in its stage folder. Scrapes and builds share one lock,
    # so the next rebuild, here a search's, puts the tree back before it indexes.
    old = data_copy / ".scrape-dead0001" / "old-web"
    old.mkdir(parents=True)
    (old / "zorblax.md").write_text(
        "---\ntitle: Z\nurl: https://docs.pytorch.org/docs/2.13/zorblax.html\nsource: web\n"
        "torch_version: '2.13'\npage: zorblax\n---\n# Z\n\n## Zorblax section\n\nzorblax words.\n"
    )
    (data_copy / "index" / "index.bin").unlink()
    r = run_search(["zorblax", "--json", "--source", "web"], data_copy)
    assert r.returncode == 0, r.stderr
    assert (data_copy / "web" / "zorblax.md").is_file()
    assert not (data_copy / ".scrape-dead0001").exists()
    assert json.loads(r.stdout)["results"]
