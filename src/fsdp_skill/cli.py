"""`fsdp-skill` command: one subcommand per pipeline stage.

Subcommands import their modules lazily so `fsdp-skill search` stays as light as
scripts/search.py.
"""

from __future__ import annotations

import sys

# name -> (what it does, module, entry function taking argv); modules load only when chosen.
COMMANDS = {
    "search": (
        "search the references (builds the index on first use)",
        "fsdp_skill.search.cli",
        "command",
    ),
    "build": (
        "(re)build the API reference pages from the installed torch and the index",
        "fsdp_skill.cli",
        "build_command",
    ),
    "scrape": (
        "refresh the references from docs.pytorch.org pages and tutorials",
        "fsdp_skill.scrape_cli",
        "main",
    ),
    "eval": ("measure search quality on a question file", "fsdp_skill.eval", "main"),
    "validate": (
        "check a skill folder against the Agent Skills spec and our own rules",
        "fsdp_skill.skill.validate",
        "main",
    ),
    "install": (
        "copy the skill, with its references and index, into an agent's skills folder",
        "fsdp_skill.skill.install",
        "main",
    ),
    "bundle": (
        "write a self-contained zip of the installed skill (references and index included)",
        "fsdp_skill.skill.bundle",
        "main",
    ),
    "mcp": (
        "serve search, references and examples to an agent over MCP (stdio)",
        "fsdp_skill.mcp_server",
        "main",
    ),
    "export": (
        "write llms.txt and llms-full.txt of the references (--llms-txt DIR)",
        "fsdp_skill.skill.bundle",
        "export_main",
    ),
}


def _usage() -> str:
    lines = ["usage: fsdp-skill COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, (text, _, _) in COMMANDS.items()]
    lines += ["", "Run 'fsdp-skill COMMAND --help' for a command's options."]
    return "\n".join(lines)


def build_command(argv: list[str]) -> int:
    from fsdp_skill.argparsing import OneLineParser

    p = OneLineParser(prog="fsdp-skill build", description=COMMANDS["build"][0])
    p.add_argument("--force", action="store_true", help="rebuild even when the index is fresh")
    args = p.parse_args(argv)
    from fsdp_skill.build import BuildError, ensure_index

    try:
        path = ensure_index(force=args.force)
    except BuildError as exc:
        print(f"fsdp-skill build: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"fsdp-skill build: error: {exc.strerror or exc}: {exc.filename or ''} "
            "(set FSDP_SKILL_DATA_DIR to a writable folder)",
            file=sys.stderr,
        )
        return 1
    print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print("fsdp-skill: interrupted", file=sys.stderr)
        return 130


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd in COMMANDS:
        import importlib

        _, module, function = COMMANDS[cmd]
        return getattr(importlib.import_module(module), function)(rest)
    print(f"fsdp-skill: error: unknown command {cmd!r}\n{_usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
