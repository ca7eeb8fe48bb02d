"""First use after a plain copy (git clone / `npx skills add` into a skills folder): no generated
pages, no index. The first `python scripts/search.py ...` works, or prints ONE line with the
exact command that makes it work; tried with a Python that has torch but none of our
dependencies, and with one that has nothing. Nothing here touches the network: an environment
"with torch only" is a venv whose path reaches the installed torch (and what torch requires)
through symlinks."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from fsdp_skill.skill import install as I

REPO = Path(__file__).resolve().parents[2]
QUERY = "fully_shard mixed precision"


def plain_copy(dest: Path) -> Path:
    """What `git clone` gives: the files git tracks (and new ones it would), nothing it ignores."""
    out = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    skill = dest / "pytorch-fsdp"
    for rel in filter(None, out):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (skill / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, skill / rel)
    assert (
        not (skill / "references" / "index").exists()
        and not (skill / "references" / "api").exists()
    )
    return skill


def _name(req: str) -> str:
    for sep in " ;<>=!~[(":
        req = req.split(sep, 1)[0]
    return req.strip()


def dist_closure(*names: str) -> list[metadata.Distribution]:
    """These installed distributions and every one they require (extras left out)."""
    seen, out, todo = set(), [], list(names)
    while todo:
        name = _name(todo.pop()).lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        out.append(dist)
        todo += [
            r
            for r in dist.requires or []
            if "extra ==" not in r.replace("'", '"').replace(" ", " ")
        ]
    return out


def link_packages(dists, folder: Path) -> Path:
    """A folder of symlinks to these distributions' top-level modules and metadata."""
    folder.mkdir(parents=True, exist_ok=True)
    for dist in dists:
        base = Path(dist.locate_file(""))
        tops = set()
        for f in dist.files or []:
            first = Path(f).parts[0]
            if first not in ("..", "__pycache__") and not first.endswith(".pth"):
                tops.add(first)
        for top in tops:
            src, dst = base / top, folder / top
            if src.exists() and not dst.exists():
                dst.symlink_to(src, target_is_directory=src.is_dir())
    return folder


def venv(path: Path, *site_dirs: Path) -> Path:
    """A venv with no packages (made without pip), seeing only `site_dirs` through a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if site_dirs:
        (Path(site) / "links.pth").write_text("".join(f"{d}\n" for d in site_dirs))
    return python


def clean_env(tmp_path: Path) -> dict[str, str]:
    """No FSDP_SKILL_* and a fresh HOME and cache: the copy is all the search has."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
        "LANG": "C.UTF-8",
    }
    Path(env["HOME"]).mkdir(exist_ok=True)
    return env


def search(python, skill: Path, env, *flags, args=(QUERY,)):
    return subprocess.run(
        [str(python), *flags, str(skill / "scripts" / "search.py"), *args],
        cwd=skill,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def the_one_line(out) -> str:
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and out.stdout == "", out.stderr
    assert "Traceback" not in lines[0]
    return lines[0]


def command_in(line: str) -> list[str]:
    assert "; run: " in line, line
    cmd = line.split("; run: ", 1)[1]
    return shlex.split(cmd.rsplit(", then search again", 1)[0])


@pytest.fixture(scope="module")
def torch_site(tmp_path_factory):
    pytest.importorskip("torch")
    return link_packages(dist_closure("torch"), tmp_path_factory.mktemp("torch-only"))


def test_build_requirements_match_pyproject():
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    by_name = {_name(d).lower(): d.replace(" ", "") for d in deps}
    for req in I.BUILD_REQUIREMENTS + (I.TORCH_REQUIREMENT,):
        assert by_name[_name(req).lower()] == req.replace(" ", ""), req
    assert set(I.BUILD_MODULES.values()) == set(I.BUILD_REQUIREMENTS) | {I.TORCH_REQUIREMENT}


def test_python_with_torch_only_gets_the_pip_command_then_it_works(tmp_path, torch_site):
    skill = plain_copy(tmp_path / "skills")
    python = venv(tmp_path / "venv", torch_site)
    env = clean_env(tmp_path)
    line = the_one_line(search(python, skill, env))
    assert line.startswith("search.py: error: building the search index needs ")
    cmd = command_in(line)
    # This venv has no pip, so the command bootstraps it first; then installs exactly the build
    # requirements (torch is there already, so it is not reinstalled).
    assert cmd[:4] == [str(python), "-m", "ensurepip", "&&"]
    assert cmd[4:8] == [str(python), "-m", "pip", "install"] and cmd[8:] == list(
        I.BUILD_REQUIREMENTS
    )
    assert I.TORCH_REQUIREMENT not in cmd

    # What that pip command installs (offline here: the same distributions, linked in), and the
    # same first search now builds the references and the index and answers.
    deps = link_packages(
        dist_closure(*(_name(r) for r in I.BUILD_REQUIREMENTS)), tmp_path / "build-deps"
    )
    python = venv(tmp_path / "venv2", torch_site, deps)
    out = search(python, skill, env, args=(QUERY, "--k", "2"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("## 1. ") and "Source: " in out.stdout
    assert "building the search index" in out.stderr
    assert (skill / "references" / "index" / "index.bin").is_file()


def test_python_with_nothing_gets_one_command_with_torch_too(tmp_path):
    skill = plain_copy(tmp_path / "skills")
    env = clean_env(tmp_path)
    # -S -I: no site-packages, no environment variables, no user site: the standard library only.
    line = the_one_line(search(sys.executable, skill, env, "-S", "-I"))
    cmd = command_in(line)
    pip_at = cmd.index("pip")
    assert cmd[pip_at - 2 : pip_at + 2] == [sys.executable, "-m", "pip", "install"]
    assert cmd[pip_at + 2 :] == [I.TORCH_REQUIREMENT, *I.BUILD_REQUIREMENTS]
    # And a bare venv (no packages, no pip): the same, with pip bootstrapped first.
    bare = venv(tmp_path / "bare")
    cmd = command_in(the_one_line(search(bare, skill, env)))
    assert cmd == [
        str(bare),
        "-m",
        "ensurepip",
        "&&",
        str(bare),
        "-m",
        "pip",
        "install",
        I.TORCH_REQUIREMENT,
        *I.BUILD_REQUIREMENTS,
    ]


def test_stale_index_without_build_requirements_is_the_same_one_line(
    tmp_path, torch_site, built_data
):
    """The search's own rebuild path (open_fresh) reports a missing requirement the same way."""
    skill = plain_copy(tmp_path / "skills")
    for sub in ("api", "index"):
        shutil.copytree(built_data / sub, skill / "references" / sub)
    guide = skill / "references" / "guides" / "launching.md"
    guide.write_text(guide.read_text() + "\nOne more line.\n")  # the index is now stale
    python = venv(tmp_path / "venv", torch_site)
    out = search(python, skill, clean_env(tmp_path))
    assert out.returncode == 1 and out.stdout == "" and "Traceback" not in out.stderr
    # The build says why it starts (a progress line), then the one error line.
    progress, line = out.stderr.strip().splitlines()
    assert (
        progress
        == "fsdp-skill: building the search index (reference pages changed since the index was built)"
    )
    assert line.startswith("search.py: error: building the search index needs ")
    assert "markdown-it-py>=3.0" in line.split("; run: ")[0]
    assert command_in(line)[-len(I.BUILD_REQUIREMENTS) :] == list(I.BUILD_REQUIREMENTS)


def test_externally_managed_python_gets_a_venv_command(monkeypatch, tmp_path):
    monkeypatch.setattr(I, "_externally_managed", lambda: True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cmd = I.build_requirements_command(
        with_torch=True, python="/usr/bin/python3", rerun=["/s/scripts/search.py", "a query"]
    )
    venv_py = str(tmp_path / "cache" / "pytorch-fsdp-skill" / "venv" / "bin" / "python")
    assert shlex.split(cmd) == [
        "/usr/bin/python3",
        "-m",
        "venv",
        str(tmp_path / "cache" / "pytorch-fsdp-skill" / "venv"),
        "&&",
        venv_py,
        "-m",
        "pip",
        "install",
        I.TORCH_REQUIREMENT,
        *I.BUILD_REQUIREMENTS,
        "&&",
        venv_py,
        "/s/scripts/search.py",
        "a query",
    ]
