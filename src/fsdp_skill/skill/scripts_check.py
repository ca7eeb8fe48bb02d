"""Every script in the skill's scripts/ must answer `--help`: an agent's first call to a tool.

This runs the folder's code, so `fsdp-skill validate` does it only when asked (`--run-scripts`).
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fsdp_skill.skill.problems import Problems

DEFAULT_SCRIPT_TIMEOUT = 120.0


def scripts(root: Path) -> list[Path]:
    """The skill's entry points: scripts/*.py, less the `_`-prefixed modules they share."""
    folder = root / "scripts"
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.glob("*.py") if f.is_file() and not f.name.startswith("_"))


def run_help(script: Path, cwd: str, timeout: float) -> str | None:
    """None when `python SCRIPT --help` exits 0, else why not."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # keep __pycache__ out of the skill
    try:
        proc = subprocess.run(
            [sys.executable, str(script.resolve()), "--help"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"'--help' did not finish within {timeout:g} s"
    except OSError as e:
        return f"'--help' could not start: {e.strerror or e}"
    if proc.returncode == 0:
        return None
    last = next((ln.strip() for ln in reversed(proc.stderr.splitlines()) if ln.strip()), "")
    return f"'--help' exited {proc.returncode}" + (f": {last[:200]}" if last else "")


def check(root: Path, p: Problems, timeout: float, jobs: int | None) -> int:
    """Run every script's `--help` (at most `jobs` at once); return how many there are."""
    found = scripts(root)
    if not found:
        return 0
    workers = max(1, min(len(found), jobs or min(8, os.cpu_count() or 1)))
    # Run from a neutral folder: the scripts must not depend on the caller's working directory.
    with tempfile.TemporaryDirectory(prefix="fsdp-skill-validate-") as cwd:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda s: run_help(s, cwd, timeout), found))
    for script, why in zip(found, results):
        if why:
            p.add(f"scripts/{script.name}", None, why)
    return len(found)
