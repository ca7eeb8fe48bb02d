"""`fsdp-skill` command: one subcommand per pipeline stage.

Subcommands import their modules lazily so `fsdp-skill search` stays as light as
scripts/search.py.
"""

import sys

COMMANDS = {
    "search": "search the references (builds the index on first use)",
    "build": "(re)build the API reference pages from the installed torch and the index",
    "scrape": "refresh the references from docs.pytorch.org pages and tutorials",
    "eval": "measure search quality on a question file",
    "validate": "check a skill folder against the Agent Skills spec and our own rules",
    "install": "copy the skill, with its references and index, into an agent's skills folder",
    "bundle": "write a self-contained zip of the installed skill (references and index included)",
    "mcp": "serve search, references and examples to an agent over MCP (stdio)",
    "export": "write llms.txt and llms-full.txt of the references (--llms-txt DIR)",
}


def _usage():
    lines = ["usage: fsdp-skill COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, text in COMMANDS.items()]
    lines += ["", "Run 'fsdp-skill COMMAND --help' for a command's options."]
    return "\n".join(lines)


def _build(argv):
    from fsdp_skill.argparsing import OneLineParser

    p = OneLineParser(prog="fsdp-skill build", description=COMMANDS["build"])
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


def main(argv=None):
    try:
        return _dispatch(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print("fsdp-skill: interrupted", file=sys.stderr)
        return 130


def _dispatch(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "search":
        from fsdp_skill.search.cli import run

        return run(rest, prog="fsdp-skill search")
    if cmd == "build":
        return _build(rest)
    if cmd == "scrape":
        from fsdp_skill.sources.web.cli import main as scrape_main

        return scrape_main(rest)
    if cmd == "eval":
        from fsdp_skill.eval import main as eval_main

        return eval_main(rest)
    if cmd == "validate":
        from fsdp_skill.skill.validate import main as validate_main

        return validate_main(rest)
    if cmd == "install":
        from fsdp_skill.skill.install import main as install_main

        return install_main(rest)
    if cmd == "bundle":
        from fsdp_skill.skill.bundle import main as bundle_main

        return bundle_main(rest)
    if cmd == "export":
        from fsdp_skill.skill.bundle import export_main

        return export_main(rest)
    if cmd == "mcp":
        from fsdp_skill.mcp_server import main as mcp_main

        return mcp_main(rest)
    print(f"fsdp-skill: error: unknown command {cmd!r}\n{_usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
