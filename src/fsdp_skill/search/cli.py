"""`fsdp-skill search` / `scripts/search.py`: the command an agent runs once per question.

The options are one table, OPTIONS: the parser, the defaults and `--help` all read it, so an
option or a default cannot change in one and not the others.
"""

import sys

from fsdp_skill.search.render import render_markdown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_skill.index.store import Index

SOURCES = ("web", "docstring", "guide")
NUMBER, FLAG, CHOICE = "number", "flag", "choice"
DESCRIPTION = (
    "Search the PyTorch distributed/FSDP references; prints the best chunks with their\n"
    "versioned docs.pytorch.org URLs. Builds the index on first use."
)
RESULT_FIELDS = ("id", "title", "breadcrumbs", "url", "objects", "source", "path", "text")


class UsageError(Exception):
    pass


class Option:
    """One `--name` option of the command.

    kind: NUMBER (a whole number of at least `minimum`), FLAG (no value; present means True)
    or CHOICE (one of `choices`). `default_text` says in `--help` what a None default means.
    """

    __slots__ = ("name", "key", "kind", "default", "help", "minimum", "choices", "default_text")

    def __init__(
        self,
        name: str,
        kind: str,
        default: int | bool | str | None,
        help: str,
        minimum: int | None = None,
        choices: tuple[str, ...] = (),
        default_text: str = "",
    ) -> None:
        self.name = name
        self.key = name.replace("-", "_")  # the key in parse()'s result, and DEFAULTS
        self.kind = kind
        self.default = default
        self.help = help
        self.minimum = minimum
        self.choices = choices
        self.default_text = default_text

    def spec(self) -> str:
        """The option as `--help` writes it: `--k N`, `--source {web,...}`, `--json`."""
        if self.kind == NUMBER:
            return f"--{self.name} N"
        if self.kind == CHOICE:
            return f"--{self.name} {{{','.join(self.choices)}}}"
        return f"--{self.name}"

    def shown_default(self) -> str:
        """The default as `--help` prints it."""
        if self.default_text:
            return self.default_text
        if self.kind == FLAG:
            return "on" if self.default else "off"
        return str(self.default)

    def help_line(self, width: int) -> str:
        floor = f", at least {self.minimum}" if self.minimum is not None else ""
        return f"  {self.spec():<{width}}{self.help}{floor} (default {self.shown_default()})"

    def convert(self, typed: str, value: str) -> int | str:
        """The option's value from its text; `typed` is the name as the user spelled it."""
        if self.kind == CHOICE:
            if value not in self.choices:
                raise UsageError(
                    f"--{self.name} must be one of {', '.join(self.choices)}, not {value!r}"
                )
            return value
        try:
            return int(value)
        except ValueError:
            raise UsageError(f"--{typed} needs a whole number, not {value!r}") from None


# The order here is the order of --help, and of the minimum checks after parsing.
OPTIONS = (
    Option("k", NUMBER, 5, "results per page", minimum=1),
    Option("page", NUMBER, 1, "result page", minimum=1),
    Option("max-chars", NUMBER, 6000, "cap on the markdown output's length", minimum=200),
    Option(
        "source",
        CHOICE,
        None,
        "search this source only",
        choices=SOURCES,
        default_text="all; a web page hides the docstring page it mirrors",
    ),
    Option("json", FLAG, False, "print one JSON object instead of markdown"),
)
_BY_KEY = {o.key: o for o in OPTIONS}
DEFAULTS = {o.key: o.default for o in OPTIONS}


def help_text(prog: str) -> str:
    """`--help`: the usage line and one line per option, all generated from OPTIONS."""
    width = max(len(o.spec()) for o in OPTIONS) + 2
    lines = [
        f"usage: {prog} [-h] {' '.join(f'[{o.spec()}]' for o in OPTIONS)} QUERY...",
        "",
        DESCRIPTION,
        "",
        f"  {'QUERY...':<{width}}the question, keywords or a pasted error (words after -- are never options)",
        f"  {'-h, --help':<{width}}show this help and exit",
        *(o.help_line(width) for o in OPTIONS),
        "",
        "An option's value may follow it (--k 3) or be joined with '=' (--k=3).",
    ]
    return "\n".join(lines) + "\n"


def parse(argv: list[str]) -> dict[str, object]:
    """Parse argv by the OPTIONS table; raises UsageError on anything unexpected.

    Hand-written rather than argparse: argparse imports `re` and gettext, which would add
    about half of a bare interpreter's start-up to every query.
    """
    opts: dict[str, object] = dict(DEFAULTS)
    words = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            words.extend(argv[i + 1 :])
            break
        if arg.startswith("--"):
            typed, eq, value = arg[2:].partition("=")
            opt = _BY_KEY.get(typed.replace("-", "_"))
            if opt is None or (opt.kind == FLAG and eq):
                raise UsageError(f"unknown option {arg}")
            if opt.kind == FLAG:
                opts[opt.key] = True
            else:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise UsageError(f"{arg} needs a value")
                    value = argv[i]
                opts[opt.key] = opt.convert(typed, value)
        elif arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit():
            raise UsageError(f"unknown option {arg}")
        else:
            words.append(arg)  # a negative number ("-1") is a query word
        i += 1
    for opt in OPTIONS:
        if opt.minimum is not None and opts[opt.key] < opt.minimum:
            raise UsageError(f"--{opt.name} must be at least {opt.minimum}")
    opts["query"] = " ".join(words)
    return opts


def _json_str(s: str) -> str:
    try:
        # The stdlib's own C encoder, private but stable: `import json` would import `re`.
        from _json import encode_basestring_ascii
    except ImportError:  # pragma: no cover - other Python implementations
        import json

        return json.dumps(s)
    return encode_basestring_ascii(s)


def to_json(value: object) -> str:
    """Compact JSON for our result types (str, int, float, bool, None, list, dict)."""
    if isinstance(value, str):
        return _json_str(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return "null"  # NaN and infinities are not JSON
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json_str(str(k))}: {to_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot encode {type(value).__name__}")


def payload(query: str, version: str, results: list[dict[str, object]]) -> dict[str, object]:
    """The `--json` object: the query as searched, the torch version, and the hits."""
    return {
        "query": query,
        "torch_version": version,
        "results": [
            {"rank": r["rank"], "score": r["score"], **{f: r[f] for f in RESULT_FIELDS}}
            for r in results
        ],
    }


def default_output(index: "Index", query: str, source: str | None = None) -> str:
    """Exactly what `search.py QUERY` prints with the default options (used by eval --answers)."""
    from fsdp_skill.search.engine import condense_query, search

    query = condense_query(query)
    results = search(index, query, k=DEFAULTS["k"], page=1, source=source)
    return render_markdown(query, results, DEFAULTS["max_chars"], 1)


def _query(raw: str, prog: str) -> str | None:
    """The query to search for, or None (after saying why) when there is none."""
    from fsdp_skill.search.engine import MAX_QUERY_CHARS, condense_query

    # Undecodable bytes in argv arrive as lone surrogates, which cannot be encoded again.
    query = raw.encode("utf-8", "replace").decode("utf-8").strip()
    if not query:
        print(f"{prog}: error: empty query; pass the question to search for", file=sys.stderr)
        return None
    # A pasted traceback shrinks to its error lines; anything else too long keeps its head.
    condensed = condense_query(query)
    if len(query) > MAX_QUERY_CHARS and query.startswith(condensed):
        print(
            f"{prog}: note: query truncated from {len(query)} to {MAX_QUERY_CHARS} characters",
            file=sys.stderr,
        )
    return condensed


def run(argv: list[str], prog: str = "search") -> int:
    try:
        options = argv[: argv.index("--")] if "--" in argv else argv
        if any(a in ("-h", "--help") for a in options):
            return emit(help_text(prog), prog)
        opts = parse(argv)
    except UsageError as exc:
        print(f"{prog}: error: {exc} (see --help)", file=sys.stderr)
        return 2
    query = _query(opts["query"], prog)
    if query is None:
        return 2
    from fsdp_skill.search.engine import SearchError, run_query

    try:
        results, version = run_query(query, k=opts["k"], page=opts["page"], source=opts["source"])
    except (SearchError, OSError) as exc:
        detail = (
            exc if isinstance(exc, SearchError) else f"{exc.strerror or exc}: {exc.filename or ''}"
        )
        print(f"{prog}: error: {detail}", file=sys.stderr)
        return 1
    if opts["json"]:
        return emit(to_json(payload(query, version, results)) + "\n", prog)
    return emit(render_markdown(query, results, opts["max_chars"], opts["page"]), prog)


def emit(text: str, prog: str) -> int:
    """Write the answer as well-behaved Unix tools do: a closed pipe (`| head`) ends quietly,
    a failing stdout gives one line, and a non-UTF-8 terminal gets replacement characters."""
    out = sys.stdout
    if out is None:
        print(f"{prog}: error: no standard output to write to", file=sys.stderr)
        return 1
    try:
        data = text.encode(out.encoding or "utf-8", "replace")
        buf = getattr(out, "buffer", None)
        if buf is not None:
            out.flush()
            buf.write(data)
            buf.flush()
        else:
            out.write(data.decode(out.encoding or "utf-8"))
            out.flush()
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return 0
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        print(f"{prog}: error: cannot write the results: {why}", file=sys.stderr)
        return 1
    return 0


def command(argv: list[str]) -> int:
    """`fsdp-skill search ARGS`."""
    return run(argv, prog="fsdp-skill search")


def main() -> int:
    try:
        return run(sys.argv[1:], prog="search.py")
    except KeyboardInterrupt:
        print("search.py: interrupted", file=sys.stderr)
        return 130
