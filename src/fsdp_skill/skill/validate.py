"""`fsdp-skill validate [PATH]`: check a skill folder before anyone installs it.

Two layers, each in its own module:

* the Agent Skills rules as the reference validator (skills-ref, `agentskills validate`) applies
  them: SKILL.md found and split the way skills-ref splits it, strict YAML (`skillmd`), only the
  spec's fields, the `name` / `description` / `compatibility` limits, the name equal to the folder
  name (`spec`, which defers to skills-ref itself when it is installed);
* this project's rules: `metadata` maps strings to strings (`spec`), the body stays under 500
  lines and every relative path SKILL.md mentions exists (`body`), every script answers `--help`
  (`scripts_check`; only with `--run-scripts`: that runs the folder's code, so it is never done
  to a folder by default), and every `torch.*` name in inline code resolves in the installed
  torch (`torch_names`).

Problems print one a line as `PATH:LINE: message` (or `PATH: message`); exit 1 when there are any.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import sys
from pathlib import Path
from typing import Any

from fsdp_skill import paths
from fsdp_skill.argparsing import OneLineParser
from fsdp_skill.skill import body, scripts_check, spec, torch_names
from fsdp_skill.skill.body import MAX_BODY_LINES
from fsdp_skill.skill.problems import Problems
from fsdp_skill.skill.scripts_check import DEFAULT_SCRIPT_TIMEOUT
from fsdp_skill.skill.skillmd import MAX_SKILL_MD_BYTES, find_skill_md, parse_skill_md

# The limits are named here too: callers and tests know them as validate.MAX_*.
__all__ = [
    "DEFAULT_SCRIPT_TIMEOUT",
    "MAX_BODY_LINES",
    "MAX_SKILL_MD_BYTES",
    "Report",
    "check",
    "main",
    "validate",
]


@dataclasses.dataclass
class Report:
    """What one validation found; `problems` are ready-to-print lines."""

    problems: list[str] = dataclasses.field(default_factory=list)
    name: str | None = None
    body_lines: int = 0
    paths: int = 0
    scripts: int = 0
    torch_names: int = 0
    torch_version: str | None = None


def _near(path: Path) -> str:
    """An absolute path as short as it can be: relative to the cwd when inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if rel.startswith("..") else rel


def check(
    path: str | os.PathLike[str],
    *,
    run_scripts: bool = False,
    check_torch: bool = True,
    timeout: float = DEFAULT_SCRIPT_TIMEOUT,
    jobs: int | None = None,
    folder_name: str | None = None,
    display: str | None = None,
) -> Report:
    """Validate a skill folder.

    `folder_name` and `display` stand in for the folder's name and printed path: install checks a
    staging folder under the name and path it is about to get.
    """
    root = Path(path)
    p = Problems(display or str(root))
    report = Report(problems=p.items)
    if not root.exists():
        p.add("", None, "does not exist")
        return report
    if not root.is_dir():
        p.add("", None, "is not a folder")
        return report
    skill_md = find_skill_md(root)
    if skill_md is None:
        p.add("SKILL.md", None, "missing (every skill needs one)")
        return report
    rel = skill_md.name
    if rel != "SKILL.md":
        p.add(rel, None, "rename to SKILL.md: agents look for that exact name")

    md = parse_skill_md(skill_md, p)
    if md is None:
        return report
    if md.meta is not None:
        report.name = spec.check(md, folder_name or root.resolve().name, rel, p)

    report.body_lines = body.check_length(md, rel, p)
    found = body.scan(md)
    report.paths = body.check_paths(root, found.mentions, rel, p)
    with concurrent.futures.ThreadPoolExecutor(1) as background:
        # The scripts import torch in subprocesses while this process imports it for the names.
        scripts_p = Problems(p.root)
        scripts = (
            background.submit(scripts_check.check, root, scripts_p, timeout, jobs)
            if run_scripts
            else None
        )
        if check_torch:
            report.torch_names, report.torch_version = torch_names.check(found.code_spans, rel, p)
        if scripts is not None:
            report.scripts = scripts.result()
            p.items.extend(scripts_p.items)
    return report


def validate(path: str | os.PathLike[str], **options: Any) -> list[str]:
    """Problem lines for a skill folder; empty when it passes. See `check` for the options."""
    return check(path, **options).problems


def _summary(path: Path, r: Report, run_scripts: bool, check_torch: bool) -> str:
    parts = [f"name '{r.name}'", f"{r.body_lines} body lines", f"{r.paths} paths exist"]
    if run_scripts:
        parts.append(f"{r.scripts} scripts answer --help")
    if check_torch:
        torch = f" (torch {r.torch_version})" if r.torch_version else ""
        parts.append(f"{r.torch_names} torch names resolve{torch}")
    return f"OK {path}: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="fsdp-skill validate",
        description="Check a skill folder against the Agent Skills spec (as skills-ref does) "
        "and this project's own rules.",
    )
    parser.add_argument("path", nargs="?", help="skill folder (default: this skill)")
    scripts = parser.add_mutually_exclusive_group()
    scripts.add_argument(
        "--run-scripts",
        action="store_true",
        help="also run every scripts/*.py --help; this executes the folder's code, so use it "
        "only on a folder you trust",
    )
    scripts.add_argument(
        "--no-scripts",
        action="store_true",
        help="do not run the scripts (the default; kept for old command lines)",
    )
    parser.add_argument("--no-torch", action="store_true", help="do not resolve torch.* names")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_SCRIPT_TIMEOUT,
        help="seconds each script gets to answer --help (default: %(default)g)",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="scripts run at once (default: CPUs, max 8)"
    )
    args = parser.parse_args(argv)
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")

    root = Path(args.path).expanduser() if args.path else Path(paths.skill_root())
    # A checkout's folder is named by whoever cloned it; `install` names the copy agents see.
    folder_name = None if args.path else paths.SKILL_NAME
    if not root.exists():
        print(f"fsdp-skill validate: {root}: no such folder", file=sys.stderr)
        return 2
    if not root.is_dir():
        print(f"fsdp-skill validate: {root}: not a folder", file=sys.stderr)
        return 2

    report = check(
        root,
        run_scripts=args.run_scripts,
        check_torch=not args.no_torch,
        timeout=args.timeout,
        jobs=args.jobs,
        folder_name=folder_name,
        display=None if args.path else _near(root),
    )
    for line in report.problems:
        print(line)
    if report.problems:
        return 1
    shown = Path(args.path) if args.path else Path(_near(root))
    print(_summary(shown, report, args.run_scripts, not args.no_torch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
