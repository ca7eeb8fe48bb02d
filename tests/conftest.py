"""Shared fixtures (a search index built once per session from the installed torch), and the
order in which xdist hands test files to its workers."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DOCS = REPO.parent / "shared" / "fixtures" / "pytorch-docs"

# Rough seconds the longest files take on a 2-core box (pytest --durations). xdist's loadfile
# hands out files with the most tests first, which leaves long files of few tests (torchrun
# jobs) for the end, where one worker runs them while the other has nothing left. Handing out
# the longest first lets both end on short files together. Only the order depends on these
# numbers; an unlisted file counts as short.
LONG_FILES = {
    "tests/examples/test_new_examples.py": 140,
    "tests/test_skill_commands.py": 115,
    "tests/guides/test_code_blocks.py": 85,
    "tests/errors/test_catalog.py": 85,
    "tests/examples/test_fsdp2.py": 65,
    "tests/examples/test_2d.py": 65,
    "tests/examples/test_elastic.py": 55,
    "tests/skill/test_skill_real.py": 50,
    "tests/examples/test_dcp.py": 50,
    "tests/gpu/test_run_gpu.py": 30,
    "tests/examples/test_ddp.py": 27,
    "tests/examples/test_fsdp1.py": 26,
    "tests/core/test_search_cli.py": 26,
    "tests/examples/test_dist_common.py": 25,
    "tests/scraper/test_site.py": 22,
    "tests/examples/test_join.py": 20,
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    if not hasattr(LoadFileScheduling, "_assign_work_unit"):
        return None  # an xdist whose scheduler works differently keeps its own order

    class LongFilesFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            if self.workqueue:
                longest = max(self.workqueue, key=lambda scope: LONG_FILES.get(scope, 0))
                self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return LongFilesFirst(config, log)


@pytest.fixture(scope="session", autouse=True)
def _private_tmpdir(tmp_path_factory):
    """Point TMPDIR at this run's own temp tree, which pytest prunes after a few runs.

    torchrun leaves a torchelastic_* log directory behind on every launch, and the repros and
    guide setups make checkpoint directories that a killed rank cannot remove; inherited by
    every subprocess, this keeps all of them out of the system temp directory."""
    import tempfile

    tmp = tmp_path_factory.mktemp("tmpdir")
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None  # recomputed from TMPDIR on next use
    yield tmp
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    tempfile.tempdir = None


def _build_data(data: Path) -> Path:
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(data))
    subprocess.run(
        [sys.executable, "-m", "fsdp_skill.cli", "build"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return data


@pytest.fixture(scope="session")
def built_data(tmp_path_factory):
    """A data dir (api pages + index) for the repo's skill, built once; treat as read-only.

    Once per run, not once per xdist worker: a build imports torch and reads every docstring
    (about 10 CPU-seconds). The first worker to ask builds it in the run's shared temp folder
    while the others wait on the lock."""
    from filelock import FileLock

    if "PYTEST_XDIST_WORKER" not in os.environ:
        return _build_data(tmp_path_factory.mktemp("data"))
    shared = tmp_path_factory.getbasetemp().parent  # this run's, above every worker's own
    data, done = shared / "built_data", shared / "built_data.done"
    with FileLock(str(shared / "built_data.lock")):
        if not done.exists():
            _build_data(data)
            done.touch()
    return data


@pytest.fixture
def data_copy(built_data, tmp_path):
    """A private copy of the built data dir that a test may damage."""
    dst = tmp_path / "data"
    shutil.copytree(built_data, dst, copy_function=shutil.copy2)
    return dst


def _run_search(args, data_dir, python=None, cwd=None, extra_env=None, script=None):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(data_dir))
    env.update(extra_env or {})
    return subprocess.run(
        [python or sys.executable, str(script or REPO / "scripts" / "search.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=300,
    )


@pytest.fixture
def run_search():
    """run_search(args, data_dir, ...) -> CompletedProcess of scripts/search.py."""
    return _run_search
