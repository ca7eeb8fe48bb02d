"""validate faults from the fault campaign (group H): a hostile skill folder gets one problem
line, quickly, and none of its code runs unless asked."""

from __future__ import annotations

import os
import threading
import time

import pytest

from fsdp_skill.skill import validate as V


def make(tmp_path, skill_md: str | None = None, files: dict[str, str] | None = None):
    root = tmp_path / "pytorch-fsdp"
    root.mkdir()
    if skill_md is not None:
        (root / "SKILL.md").write_text(skill_md)
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def quick(root, limit_s=10.0):
    """validate() on a thread: a hang fails the test instead of holding the run."""
    out: dict = {}
    worker = threading.Thread(
        target=lambda: out.update(problems=V.validate(root, check_torch=False)), daemon=True
    )
    started = time.monotonic()
    worker.start()
    worker.join(limit_s)
    assert not worker.is_alive(), f"validate did not return within {limit_s:g} s"
    return out["problems"], time.monotonic() - started


def front(extra: str) -> str:
    return f"---\nname: pytorch-fsdp\ndescription: x\n{extra}---\nbody\n"


def one(problems, needle):
    assert len(problems) == 1 and needle in problems[0], problems


def test_deep_flow_yaml(tmp_path):
    problems, took = quick(make(tmp_path, front("x: " + "[" * 5000 + "]" * 5000 + "\n")))
    one(problems, "SKILL.md:4: frontmatter nests more than 32 levels deep")
    assert took < 5


def test_deep_block_yaml(tmp_path):
    lines = "x:\n" + "- " * 2000 + "y\n"  # compact nested block sequences: 2000 levels on one line
    problems, took = quick(make(tmp_path, front(lines)))
    one(problems, "frontmatter nests more than 32 levels deep")
    assert took < 5


def test_billion_laughs(tmp_path):
    lines = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10)
    )
    problems, took = quick(make(tmp_path, front(lines)))
    one(problems, "frontmatter uses more than 64 YAML aliases")
    assert took < 5


def test_aliases_under_the_limit_are_walked_once(tmp_path):
    # 7 levels of 9 aliases is under the cap; each aliased node is checked once, not 9**7 times.
    lines = "a0: &a0 {k: v}\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 8)
    )
    problems, took = quick(make(tmp_path, front(lines)))
    assert problems and all("anchor" in p or "alias" in p or "flow-style" in p for p in problems)
    assert took < 5


def test_huge_frontmatter(tmp_path):
    problems, _ = quick(make(tmp_path, front("x: '" + "y" * 70_000 + "'\n")))
    one(problems, "frontmatter is larger than 64 KiB")


def test_fifo_skill_md_does_not_hang(tmp_path):
    root = make(tmp_path)
    os.mkfifo(root / "SKILL.md")
    try:
        problems, _ = quick(root)
    finally:  # unblock a reader stuck in open() (the unfixed code) so the thread can end
        try:
            fd = os.open(root / "SKILL.md", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
    one(problems, "SKILL.md: cannot read: is a FIFO, not a regular file")


def test_dev_zero_skill_md_is_not_read(tmp_path):
    root = make(tmp_path)
    (root / "SKILL.md").symlink_to("/dev/zero")
    problems, took = quick(root)
    one(problems, "SKILL.md: cannot read: is a device, not a regular file")
    assert took < 5


def test_huge_skill_md_is_not_read(tmp_path):
    root = make(tmp_path)
    with open(root / "SKILL.md", "wb") as fh:
        fh.write(b"---\nname: pytorch-fsdp\n")
        fh.truncate(4 * 1024**3)  # sparse: 4 GiB that take no disk
    problems, took = quick(root)
    one(
        problems,
        f"SKILL.md: cannot read: is {4 * 1024**3} bytes; the limit is {V.MAX_SKILL_MD_BYTES}",
    )
    assert took < 5


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_timeout_must_be_a_finite_positive_number(value, capsys):
    with pytest.raises(SystemExit) as e:
        V.main([f"--timeout={value}"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeout must be a positive number of seconds" in err[0], err


MARKER_SCRIPT = (
    "open({marker!r}, 'w').write('ran')\nimport argparse\nargparse.ArgumentParser().parse_args()\n"
)


def test_scripts_run_only_when_asked(tmp_path, capsys):
    marker = tmp_path / "ran.txt"
    root = make(
        tmp_path, front(""), files={"scripts/tool.py": MARKER_SCRIPT.format(marker=str(marker))}
    )
    assert V.main([str(root), "--no-torch"]) == 0
    assert not marker.exists()  # validating a folder runs none of its code
    assert "scripts answer --help" not in capsys.readouterr().out
    assert V.main([str(root), "--no-torch", "--no-scripts"]) == 0 and not marker.exists()
    assert V.main([str(root), "--no-torch", "--run-scripts"]) == 0
    assert marker.read_text() == "ran"
    assert "1 scripts answer --help" in capsys.readouterr().out
