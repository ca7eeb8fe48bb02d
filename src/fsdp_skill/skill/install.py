"""`fsdp-skill install`: copy the skill, with references and index built for the local torch, into
an agent's skills folder.

The copy is self-contained: `src/fsdp_skill/` travels with it so `scripts/search.py` imports the
package from `../src` without a pip install, and the index sits in `references/index/`.

Installs are atomic: everything is copied into a hidden staging folder next to the destination,
checked, and swapped in with one atomic exchange of the two folders (see fsdp_skill.files), so
the installed folder is never missing; a failed or interrupted install leaves the previous copy
in place, and the next install removes the hidden copies a killed one left.

Where each agent reads skills is in AGENTS below, with the page that documents it. `--agent all`
installs for every agent whose home folder exists on this machine, once per distinct folder
(Codex, goose and the shared `.agents/skills` location are one folder).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fsdp_skill import files, paths
from fsdp_skill.argparsing import OneLineParser
from fsdp_skill.paths import SKILL_NAME

if TYPE_CHECKING:
    from types import FrameType

    SignalHandler = Callable[[int, FrameType | None], object] | int | None


@dataclasses.dataclass(frozen=True)
class Agent:
    """Where one agent reads skills.

    home: (environment variable that moves the agent's home, its default under ~, or under
    $XDG_CONFIG_HOME when `xdg`); `--agent all` installs for the agent when that folder exists.
    user: the user-scope skills folder, relative to the home (`@home/...`) or to ~ (`~/...`).
    project: the project-scope skills folder, relative to the project (the current folder);
    None where the agent reads no project folder.
    """

    home_env: str | None
    home: str
    user: str
    project: str | None
    docs: str
    xdg: bool = False


# Checked against each agent's documentation in December 2026; the URL is the page that says so.
AGENTS = {
    # Personal ~/.claude/skills/<name>/SKILL.md, project .claude/skills/<name>/SKILL.md;
    # $CLAUDE_CONFIG_DIR moves ~/.claude.
    "claude": Agent(
        "CLAUDE_CONFIG_DIR",
        ".claude",
        "@home/skills",
        ".claude/skills",
        "https://code.claude.com/docs/en/skills",
    ),
    # USER scope $HOME/.agents/skills, REPO scope .agents/skills from $CWD up to the repo root
    # (older releases read $CODEX_HOME/skills, i.e. ~/.codex/skills).
    "codex": Agent(
        "CODEX_HOME",
        ".codex",
        "~/.agents/skills",
        ".agents/skills",
        "https://developers.openai.com/codex/skills",
    ),
    # The shared location of the Agent Skills ecosystem, read by Codex, Gemini CLI (alias of
    # ~/.gemini/skills), Cursor, OpenCode, goose and Copilot; see each agent's page here.
    "agents": Agent(
        None,
        ".agents",
        "@home/skills",
        ".agents/skills",
        "https://geminicli.com/docs/cli/using-agent-skills/",
    ),
    # User ~/.gemini/skills/ (or the ~/.agents/skills/ alias), workspace .gemini/skills/.
    "gemini": Agent(
        None,
        ".gemini",
        "@home/skills",
        ".gemini/skills",
        "https://geminicli.com/docs/cli/using-agent-skills/",
    ),
    # Project .cursor/skills/ (and .agents/skills/), user ~/.cursor/skills/ (and ~/.agents/skills/).
    "cursor": Agent(
        None, ".cursor", "@home/skills", ".cursor/skills", "https://cursor.com/docs/skills"
    ),
    # Global ~/.config/opencode/skills/<name>/SKILL.md, project .opencode/skills/<name>/SKILL.md.
    "opencode": Agent(
        None,
        "opencode",
        "@home/skills",
        ".opencode/skills",
        "https://opencode.ai/docs/skills/",
        xdg=True,
    ),
    # Global ~/.agents/skills/, project .agents/skills/ (the recommended locations; goose also
    # reads .goose/skills/ and the Claude folders for backward compatibility).
    "goose": Agent(
        None,
        "goose",
        "~/.agents/skills",
        ".agents/skills",
        "https://block.github.io/goose/docs/guides/context-engineering/using-skills",
        xdg=True,
    ),
    # Personal ~/.copilot/skills (or ~/.claude/skills, ~/.agents/skills), project .github/skills
    # (or .claude/skills, .agents/skills); Copilot CLI, cloud agent and VS Code agent mode.
    "copilot": Agent(
        None,
        ".copilot",
        "@home/skills",
        ".github/skills",
        "https://docs.github.com/en/copilot/how-tos/copilot-cli/customize-copilot/create-skills",
    ),
    # All skills live in ~/.hermes/skills/ ($HERMES_HOME moves ~/.hermes); other folders only
    # through `skills.external_dirs` in its config.yaml, so it has no project scope.
    "hermes": Agent(
        "HERMES_HOME",
        ".hermes",
        "@home/skills",
        None,
        "https://hermes-agent.nousresearch.com/docs/user-guide/features/skills",
    ),
}
SCOPES = ("user", "project")
# Top-level folders copied whole (minus caches and temp files).
TREES = ("scripts", "references", "assets")
PACKAGE = Path("src") / "fsdp_skill"
# Generated page folders and the index; they may live outside references/ (see paths.data_dir).
GENERATED = ("api", "web", "index")
LOCK_TIMEOUT_S = 120.0

# What building the references and index needs: pyproject.toml's build-time dependencies (the
# scraper's are not needed; the query path needs none). A copy made by `git clone` or
# `npx skills add` has no pyproject install behind it, so the first search names these.
BUILD_REQUIREMENTS = (
    "markdown-it-py>=3.0",
    "rank-bm25>=0.2.2",
    "PyYAML>=6.0",
    "filelock>=3.12",
    "packaging>=23",
)
TORCH_REQUIREMENT = "torch>=2.6"
# import name -> the requirement that provides it
BUILD_MODULES = {
    "markdown_it": "markdown-it-py>=3.0",
    "rank_bm25": "rank-bm25>=0.2.2",
    "yaml": "PyYAML>=6.0",
    "filelock": "filelock>=3.12",
    "packaging": "packaging>=23",
    "torch": TORCH_REQUIREMENT,
}


class InstallError(Exception):
    """Bad input or a failed install; the message is one line for the user."""


@dataclasses.dataclass
class Plan:
    dest: Path
    files: list[tuple[str, Path, int]]  # (path relative to dest, source, size)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, _, size in self.files)


def _agent(agent: str) -> Agent:
    try:
        return AGENTS[agent]
    except KeyError:
        raise InstallError(
            f"unknown agent '{agent}'; choose one of {', '.join(AGENTS)}, or all"
        ) from None


def agent_home(agent: str) -> Path:
    """The agent's own folder (~/.claude, ~/.config/opencode, ...): it exists when the agent is set up."""
    a = _agent(agent)
    moved = os.environ.get(a.home_env) if a.home_env else None
    if moved:
        return Path(moved).expanduser()
    if a.xdg:
        return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / a.home
    return Path.home() / a.home


def agent_skills_dir(
    agent: str, scope: str = "user", project: str | os.PathLike[str] | None = None
) -> Path:
    """The folder an agent reads skills from: user scope, or project scope under `project` (cwd)."""
    a = _agent(agent)
    if scope not in SCOPES:
        raise InstallError(f"unknown scope '{scope}'; choose user or project")
    if scope == "project":
        if a.project is None:
            raise InstallError(
                f"{agent} reads no project skills folder (only {_shown_user_dir(a)}); use --scope user"
            )
        return Path(project if project is not None else os.getcwd()) / a.project
    if a.user.startswith("@home/"):
        return agent_home(agent) / a.user[len("@home/") :]
    return Path.home() / a.user[len("~/") :]


def _shown_user_dir(a: Agent) -> str:
    home = f"~/.config/{a.home}" if a.xdg else f"~/{a.home}"
    return a.user.replace("@home", home)


def agents_present() -> list[str]:
    """The agents whose home folder exists, in AGENTS order."""
    return [name for name in AGENTS if agent_home(name).is_dir()]


def targets_for(
    agent: str,
    scope: str = "user",
    project: str | os.PathLike[str] | None = None,
    note: Callable[[str], None] | None = None,
) -> list[tuple[str, Path]]:
    """[(agents, skills folder)] to install into: one agent, or `all` (each distinct folder once)."""
    if agent != "all":
        return [(agent, agent_skills_dir(agent, scope, project))]
    found = agents_present()
    if not found:
        homes = ", ".join(str(agent_home(a)) for a in AGENTS)
        raise InstallError(f"no agent found (none of {homes} exists); name one with --agent")
    out: dict[str, tuple[list[str], Path]] = {}
    for name in found:
        if scope == "project" and AGENTS[name].project is None:
            if note:
                note(f"note: skipping {name}: it reads no project skills folder")
            continue
        folder = agent_skills_dir(name, scope, project)
        key = os.path.normcase(os.path.abspath(folder))
        out.setdefault(key, ([], folder))[0].append(name)
    return [(", ".join(names), folder) for names, folder in out.values()]


def _skipped(name: str) -> bool:
    """Caches, temp and lock files that must never ship: hidden names cover references/.cache
    and the `.x.tmp-*` staging folders this project writes."""
    return (
        name.startswith(".")
        or name == "__pycache__"
        or name.endswith((".pyc", ".pyo", ".tmp", ".lock", ".egg-info"))
        or ".tmp-" in name
    )


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _externally_managed() -> bool:
    """A distribution's Python that refuses `pip install` outside a venv (PEP 668)."""
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
        return False  # a virtual environment: pip installs there
    import sysconfig

    stdlib = sysconfig.get_path("stdlib")
    return bool(stdlib) and os.path.isfile(os.path.join(stdlib, "EXTERNALLY-MANAGED"))


def build_requirements_command(
    with_torch: bool = False, python: str | None = None, rerun: list[str] | None = None
) -> str:
    """The one shell command that gives this Python what building the index needs.

    `python -m pip install ...` with the build requirements (torch first when it is missing
    too); `ensurepip` first in a venv made without pip; and, for a distribution's Python that
    refuses pip (PEP 668), a venv in the user cache with the search re-run by its Python.
    """
    python = python or sys.executable or "python3"
    reqs = ([TORCH_REQUIREMENT] if with_torch else []) + list(BUILD_REQUIREMENTS)
    pip_args = " ".join(_quote(r) for r in reqs)
    if _externally_managed():
        venv = os.path.join(paths.user_cache_dir(), "venv")
        vpy = os.path.join(venv, "bin", "python")
        cmd = f"{_quote(python)} -m venv {_quote(venv)} && {_quote(vpy)} -m pip install {pip_args}"
        if rerun:
            cmd += " && " + " ".join(_quote(a) for a in [vpy, *rerun])
        return cmd
    import importlib.util

    prefix = "" if importlib.util.find_spec("pip") else f"{_quote(python)} -m ensurepip && "
    return f"{prefix}{_quote(python)} -m pip install {pip_args}"


def missing_build_modules(with_torch: bool = True) -> list[str]:
    """The requirements of BUILD_MODULES this Python cannot import (found without importing)."""
    import importlib.util

    out = []
    for module, req in BUILD_MODULES.items():
        if module == "torch" and not with_torch:
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken third-party install counts as missing
            found = False
        if not found:
            out.append(req)
    return out


def first_use_hint(missing: str, with_torch: bool = False, rerun: list[str] | None = None) -> str:
    """One line for a search that cannot build its index: what is missing, the exact fix."""
    cmd = build_requirements_command(with_torch=with_torch, rerun=rerun)
    then = "" if _externally_managed() and rerun else ", then search again"
    return (
        f"building the search index needs {missing}, which this Python ({sys.executable}) lacks; "
        f"run: {cmd}{then}"
    )


def _walk(src: Path, prefix: str) -> list[tuple[str, Path, int]]:
    out: list[tuple[str, Path, int]] = []
    if not src.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(src):
        # Symlinked folders are not followed: they may point anywhere, even back up the tree.
        dirnames[:] = sorted(
            d for d in dirnames if not _skipped(d) and not os.path.islink(os.path.join(dirpath, d))
        )
        base = Path(dirpath)
        for name in sorted(filenames):
            if _skipped(name):
                continue
            path = base / name
            try:
                st = path.stat()
            except OSError:  # dangling symlink
                continue
            if not path.is_file():
                continue
            rel = (Path(prefix) / path.relative_to(src)).as_posix()
            out.append((rel, path, st.st_size))
    return out


def _data_dir(root: Path) -> Path:
    return Path(paths.data_dir(str(root)))


def plan(root: Path, dest: Path) -> Plan:
    """Every file the install writes, relative to `dest`, in a stable order."""
    if not (root / "SKILL.md").is_file():
        raise InstallError(
            f"{root}: no SKILL.md, so this is not a skill folder (set FSDP_SKILL_ROOT?)"
        )
    if not (root / PACKAGE).is_dir():
        raise InstallError(f"{root}: no {PACKAGE.as_posix()}/, which the installed scripts import")
    chosen: dict[str, tuple[Path, int]] = {
        "SKILL.md": (root / "SKILL.md", (root / "SKILL.md").stat().st_size)
    }
    for extra in sorted(root.glob("LICENSE*")):
        if extra.is_file():
            chosen[extra.name] = (extra, extra.stat().st_size)
    for tree in TREES:
        for rel, src, size in _walk(root / tree, tree):
            chosen[rel] = (src, size)
    data = _data_dir(root)
    if data.resolve() != (root / "references").resolve():
        # Generated pages and the index were written outside the skill: ship them inside it.
        for sub in GENERATED:
            for rel, src, size in _walk(data / sub, f"references/{sub}"):
                chosen[rel] = (src, size)
    for rel, src, size in _walk(root / PACKAGE, PACKAGE.as_posix()):
        chosen[rel] = (src, size)
    return Plan(dest=dest, files=[(rel, src, size) for rel, (src, size) in sorted(chosen.items())])


def human_size(n: int) -> str:
    """A byte count as people read it: 812 B, 3.4 KiB, 17.0 MiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _check_overlap(root: Path, dest: Path) -> None:
    """Refuse a destination that is, or sits inside, what the install copies from."""
    dest_r = dest.resolve()
    root_r = root.resolve()
    if dest_r == root_r or dest_r in root_r.parents:
        raise InstallError(f"{dest}: that is the skill being installed (or a folder above it)")
    for src in [root_r / t for t in TREES] + [root_r / PACKAGE]:
        if dest_r == src or src in dest_r.parents:
            raise InstallError(
                f"{dest}: inside {src.relative_to(root_r)}, which the install copies"
            )


def _remove_leftovers(parent: Path, dest: Path) -> None:
    """Staging and old copies a killed install left behind; safe under the install lock.

    Where the OS has no atomic folder swap, a kill between the two renames leaves `dest`
    missing and the previous copy under an `.old-` name: that copy is put back first.
    """
    olds = sorted(
        parent.glob(f".{SKILL_NAME}.old-*"), key=lambda p: p.lstat().st_mtime, reverse=True
    )
    if not os.path.lexists(dest):
        for old in olds:
            if old.is_dir() and not old.is_symlink() and (old / "SKILL.md").is_file():
                os.rename(old, dest)
                break
    for prefix in (f".{SKILL_NAME}.tmp-", f".{SKILL_NAME}.old-"):
        for stale in parent.glob(prefix + "*"):
            files.rmtree(stale)


def _verify(staging: Path, display: str) -> list[str]:
    """The cheap validate checks on the staged copy, under the name it will have."""
    from fsdp_skill.skill.validate import check

    return check(
        staging, run_scripts=False, check_torch=False, folder_name=SKILL_NAME, display=display
    ).problems


def install(
    target: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    build: bool = True,
    verify: bool = True,
    ensure_index: Callable[[Path], Path] | None = None,
    log: Callable[[str], None] = print,
) -> Plan:
    """Install the skill as TARGET/pytorch-fsdp; returns what was (or, dry run, would be) written.

    `ensure_index(root) -> index path` builds references and index for the local torch first
    (`fsdp_skill.build.ensure_index` by default). The steps: check the destination, build, plan
    the copy, then under the install lock stage it, validate the staged copy and swap it in.
    """
    root_p = Path(root) if root is not None else Path(paths.skill_root())
    parent, dest = _destination(target, root_p)
    if dry_run:
        p = plan(root_p, dest)
        _report_dry_run(p, root_p, log)
        return p
    if build:
        _check_index_inside(build_index(root_p, ensure_index), root_p)
    p = plan(root_p, dest)
    with _install_lock(parent):
        _stage_check_swap(p, parent, verify)
    log(f"installed {SKILL_NAME} into {dest} ({len(p.files)} files, {human_size(p.total_bytes)})")
    return p


def _destination(target: str | os.PathLike[str], root: Path) -> tuple[Path, Path]:
    """(skills folder, TARGET/pytorch-fsdp), refused when they cannot hold a plain copy."""
    if not str(target).strip():
        raise InstallError("the target folder must not be empty")
    parent = Path(target).expanduser()
    dest = parent / SKILL_NAME
    try:
        if parent.exists() and not parent.is_dir():
            raise InstallError(f"{parent}: not a folder")
        if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
            raise InstallError(
                f"{dest}: exists and is not a plain folder; remove it or choose another --target"
            )
        _check_overlap(root, dest)
    except OSError as e:  # e.g. EACCES from stat() inside a folder this user cannot enter
        raise InstallError(f"{e.filename or parent}: {e.strerror or e}") from None
    return parent, dest


def _report_dry_run(p: Plan, root: Path, log: Callable[[str], None]) -> None:
    for rel, _, size in p.files:
        log(f"{SKILL_NAME}/{rel}  {human_size(size)}")
    index = _data_dir(root) / "index"
    if not index.is_dir() or not any(index.iterdir()):
        log("note: the index is not built yet; a real install builds it first (not counted above)")
    log(f"would write {len(p.files)} files ({human_size(p.total_bytes)}) to {p.dest}")


def build_index(root: Path, ensure_index: Callable[[Path], Path] | None = None) -> Path:
    """Build the references and index for the local torch (what `install` and `bundle` ship).

    Returns the index path `ensure_index` gives; its failure becomes one InstallError line.
    """
    if ensure_index is None:
        # Imported here, not at the top: a search that only serves an index imports this module
        # for its first-use hint, where the build's dependencies may be missing.
        from fsdp_skill import build

        ensure_index = build.ensure_index
    try:
        return Path(ensure_index(root))
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001 - one line for the user, not a traceback
        raise InstallError(f"building the index failed: {type(e).__name__}: {e}") from None


def _check_index_inside(index: Path, root: Path) -> None:
    """The copy takes the index from the data folder: one built elsewhere would be left out."""
    data = _data_dir(root).resolve()
    if data not in index.resolve().parents:
        raise InstallError(f"index was built in {index}, outside {data}; the copy would lack it")


def _os_error(e: OSError, where: Path) -> InstallError:
    return InstallError(f"{getattr(e, 'filename', None) or where}: {e.strerror or e}")


@contextlib.contextmanager
def _install_lock(parent: Path) -> Iterator[None]:
    """One install at a time into `parent` (created if missing); held for stage, check and swap."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InstallError(f"{parent}: cannot create: {e.strerror or e}") from None

    from filelock import FileLock, Timeout

    lock = FileLock(str(parent / f".{SKILL_NAME}.lock"))
    try:
        lock.acquire(timeout=LOCK_TIMEOUT_S)
    except Timeout:
        raise InstallError(
            f"{parent}: another install has held the lock for {LOCK_TIMEOUT_S:g} s"
        ) from None
    except OSError as e:
        raise InstallError(f"{parent}: cannot lock: {e.strerror or e}") from None
    try:
        yield
    finally:
        lock.release()


def _stage_check_swap(p: Plan, parent: Path, verify: bool) -> None:
    """Copy into a hidden staging folder beside `p.dest`, validate it, swap it in (under the lock)."""
    try:
        _remove_leftovers(parent, p.dest)
    except OSError as e:
        raise _os_error(e, parent) from None
    staging = files.temp_name(p.dest)
    try:
        _stage(p, staging)
        if verify:
            _validate_staged(staging, p.dest)
        _swap(staging, p.dest)
    except OSError as e:
        raise _os_error(e, parent) from None
    finally:
        # After a swap this holds the previous copy; after a failure, the partial new one.
        files.rmtree(staging)


def _stage(p: Plan, staging: Path) -> None:
    staging.mkdir()
    for rel, src, _ in p.files:
        out = staging / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)


def _validate_staged(staging: Path, dest: Path) -> None:
    problems = _verify(staging, str(dest))
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        raise InstallError(
            f"the copy fails validation ({len(problems)} problems above); {dest} is unchanged"
        )


def _swap(staging: Path, dest: Path) -> None:
    """Readers see the old copy or the new one, never a half-written or missing folder.

    One atomic exchange puts the new copy at `dest` and the old one at `staging`, which the
    caller removes. Without an atomic swap (see fsdp_skill.files) it takes two renames through a
    fresh `.old-` name, and a kill between them is repaired by the next install.
    """
    spare = dest.with_name(f".{SKILL_NAME}.old-{secrets.token_hex(4)}")
    previous = files.swap_in(staging, dest, spare)
    if previous is not None and previous != staging:
        files.rmtree(previous)


def _parser() -> OneLineParser:
    parser = OneLineParser(
        prog="fsdp-skill install",
        description=f"Build the references and index for the local torch, then copy the skill into "
        f"DIR/{SKILL_NAME} (atomically; re-running updates it).",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", metavar="DIR", help="skills folder to install into")
    where.add_argument(
        "--agent",
        choices=[*AGENTS, "all"],
        metavar="NAME",
        help="install where that agent reads skills (user scope: "
        + ", ".join(f"{n} {_shown_user_dir(a)}" for n, a in AGENTS.items())
        + "); all: every agent whose home folder exists",
    )
    parser.add_argument(
        "--scope",
        choices=SCOPES,
        default=None,
        help="with --agent: user (default; the agent's folder in your home) or project (the agent's "
        "folder in the current directory, e.g. .claude/skills, .agents/skills)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be written; write nothing"
    )
    parser.add_argument(
        "--no-build",
        action="store_true",
        help="copy references as they are; do not build the index",
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="skip validating the copy before swapping it in"
    )
    return parser


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    """The arguments and the scope, with the combinations argparse cannot express refused."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.target is not None and not args.target.strip():
        parser.error("--target must name a folder, not an empty string")
    if args.scope is not None and args.agent is None:
        parser.error("--scope goes with --agent (--target names the folder itself)")
    scope = args.scope or "user"
    if (
        args.agent not in (None, "all")
        and scope == "project"
        and AGENTS[args.agent].project is None
    ):
        parser.error(f"{args.agent} reads no project skills folder; use --scope user")
    return args, scope


def _install_each(args: argparse.Namespace, scope: str) -> None:
    if args.target is not None:
        targets = [("", Path(args.target))]
    else:
        targets = targets_for(
            args.agent, scope, note=lambda m: print(f"fsdp-skill install: {m}", file=sys.stderr)
        )
    for n, (_, target) in enumerate(targets):
        # One build is enough: later copies take the references and index the first one built.
        install(
            target,
            dry_run=args.dry_run,
            build=not args.no_build and n == 0,
            verify=not args.no_verify,
        )


def main(argv: list[str] | None = None) -> int:
    args, scope = _parse(argv)
    previous_handler = _terminate_as_exception()
    try:
        _install_each(args, scope)
    except _Terminated:
        print("fsdp-skill install: terminated; the previous copy is left in place", file=sys.stderr)
        return 143
    except InstallError as e:
        print(f"fsdp-skill install: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # anything the checks above did not name: still one line
        print(
            f"fsdp-skill install: {getattr(e, 'filename', None) or 'error'}: {e.strerror or e}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            "fsdp-skill install: interrupted; the previous copy is left in place", file=sys.stderr
        )
        return 130
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    return 0


class _Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so the staging copy is removed on the way out."""


def _terminate_as_exception() -> SignalHandler | None:
    """Make SIGTERM raise _Terminated (main thread only); returns the handler it replaced.

    By default SIGTERM ends the process on the spot and leaves the hidden staging copy behind
    until the next install; raising instead runs the cleanup in `install`'s finally blocks.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Terminated()

    return signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
