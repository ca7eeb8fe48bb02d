"""Every command SKILL.md tells an agent to run is run, exactly as written: the searches here,
the torchrun commands in the example tests of their scripts (see run_skill_launch)."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_TESTS = REPO / "tests" / "examples"
sys.path.insert(0, str(EXAMPLE_TESTS))

from example_helpers import skill_commands, skill_launch_script  # noqa: E402

SEARCHES = skill_commands("python scripts/search.py")
LAUNCHES = skill_commands("torchrun ")


def test_skill_md_has_commands():
    assert len(SEARCHES) >= 3 and len(LAUNCHES) >= 8


@pytest.mark.parametrize("cmd", SEARCHES)
def test_search_commands(cmd, built_data):
    argv = shlex.split(cmd)
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(built_data))
    out = subprocess.run(
        [sys.executable, *argv[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    if "--json" in argv:
        assert json.loads(out.stdout)["results"]
    else:
        assert re.match(r"## \d+\. ", out.stdout), out.stdout[:200]


def launches_run_by_example_tests(sources: dict[str, str]) -> dict[str, list[str]]:
    """{script: [test files that run its SKILL.md command]} over {file name: source}."""
    found: dict[str, list[str]] = {}
    for name, text in sources.items():
        for script in re.findall(r"""run_skill_launch\(\s*["']([\w.]+)["']""", text):
            found.setdefault(script, []).append(name)
    return found


def uncovered(launches: list[str], sources: dict[str, str]) -> list[str]:
    run = launches_run_by_example_tests(sources)
    return [cmd for cmd in launches if skill_launch_script(cmd) not in run]


@pytest.mark.parametrize("cmd", LAUNCHES)
def test_torchrun_command_is_run_by_its_example_test(cmd):
    """The example tests run each command as written and check its numbers too; one launch
    for both, where this file used to launch every command a second time."""
    script = skill_launch_script(cmd)
    assert (REPO / "scripts" / script).is_file(), cmd
    # One command per script: run_skill_launch finds the command by its script.
    assert [skill_launch_script(c) for c in LAUNCHES].count(script) == 1, cmd
    sources = {p.name: p.read_text() for p in EXAMPLE_TESTS.glob("test_*.py")}
    assert not uncovered([cmd], sources), f"no test in tests/examples runs {cmd!r}"


def test_a_command_no_example_test_runs_is_reported():
    # The check above must be able to fail: a new command with no test calling it.
    sources = {"test_x.py": 'res = run_skill_launch("ddp_train.py", tmp_path)\n'}
    cmds = ["torchrun --nproc-per-node 2 scripts/ddp_train.py", "torchrun scripts/new.py --x 1"]
    assert uncovered(cmds, sources) == ["torchrun scripts/new.py --x 1"]
