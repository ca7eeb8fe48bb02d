"""`fsdp-skill search` / `scripts/search.py`: the command an agent runs once per question.

Arguments are parsed by hand on the normal path: argparse imports `re` and gettext, which
would add about half of a bare interpreter's start-up to every query. `--help` and usage
errors go through argparse, where that cost does not matter.
"""

import sys

SOURCES = ("web", "docstring", "guide")
DEFAULTS = {"k": 5, "max_chars": 6000, "page": 1}


class UsageError(Exception):
    pass


def _argparser(prog):
    import argparse

    p = argparse.ArgumentParser(
        prog=prog,
        description="Search the PyTorch distributed/FSDP references; prints the best chunks with "
                    "their versioned docs.pytorch.org URLs. Builds the index on first use.")
    p.add_argument("query", nargs="+", help="the question or keywords")
    p.add_argument("--k", type=int, default=DEFAULTS["k"], help="results per page (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of markdown")
    p.add_argument("--max-chars", type=int, default=DEFAULTS["max_chars"],
                   help="cap on the markdown output's length (default 6000)")
    p.add_argument("--page", type=int, default=DEFAULTS["page"], help="result page, 1-based")
    p.add_argument("--source", choices=SOURCES,
                   help="search one source only (default: all, web pages replacing the docstring pages they mirror)")
    return p


def parse(argv):
    """Parse argv without argparse; raises UsageError on anything unexpected."""
    opts = dict(DEFAULTS, json=False, source=None)
    words = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            words.extend(argv[i + 1:])
            break
        if arg == "--json":
            opts["json"] = True
        elif arg.startswith("--") and arg != "--":
            name, eq, value = arg[2:].partition("=")
            key = name.replace("-", "_")
            if key not in ("k", "max_chars", "page", "source"):
                raise UsageError(f"unknown option {arg}")
            if not eq:
                i += 1
                if i >= len(argv):
                    raise UsageError(f"{arg} needs a value")
                value = argv[i]
            if key == "source":
                if value not in SOURCES:
                    raise UsageError(f"--source must be one of {', '.join(SOURCES)}, not {value!r}")
                opts["source"] = value
            else:
                try:
                    opts[key] = int(value)
                except ValueError:
                    raise UsageError(f"--{name} needs a whole number, not {value!r}") from None
        elif arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit():
            raise UsageError(f"unknown option {arg}")
        else:
            words.append(arg)
        i += 1
    for key, low in (("k", 1), ("page", 1), ("max_chars", 200)):
        if opts[key] < low:
            raise UsageError(f"--{key.replace('_', '-')} must be at least {low}")
    opts["query"] = " ".join(words)
    return opts


def _json_str(s):
    try:
        from _json import encode_basestring_ascii  # C accelerator: no `re` import
    except ImportError:  # pragma: no cover - other Python implementations
        import json

        return json.dumps(s)
    return encode_basestring_ascii(s)


def to_json(value):
    """Compact JSON for our result types (str, int, float, bool, None, list, dict)."""
    if isinstance(value, str):
        return _json_str(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json_str(str(k))}: {to_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot encode {type(value).__name__}")


def _block(r):
    crumbs = " > ".join(r["breadcrumbs"])
    head = f"## {r['rank']}. {crumbs}\nSource: {r['url']} (torch {r['torch_version']})"
    if r["objects"]:
        head += "\nAPI: " + ", ".join(f"`{o}`" for o in r["objects"])
    return head, r["text"].strip()


def _truncate(text, room):
    """Cut at a line end within `room` chars, closing an open code fence."""
    cut = text[:max(room, 0)].rsplit("\n", 1)[0] if len(text) > room else text
    if cut.count("```") % 2:
        cut += "\n```"
    return cut


def _cut_note(left, max_chars):
    return (f"({left} more result{'s' * (left > 1)} cut by --max-chars {max_chars}; "
            "raise it, or use --page/--k)\n")


def render_markdown(query, results, max_chars, page):
    """The hits as markdown, at most `max_chars` long; the first hit is always shown (cut to fit)."""
    if not results:
        return f"No results for {query!r}" + (f" on page {page}" if page > 1 else "") + ".\n"
    out, used = [], 0
    for n, r in enumerate(results):
        head, text = _block(r)
        block = f"{head}\n\n{text}\n\n"
        left = len(results) - n
        note = _cut_note(left, max_chars)
        if used + len(block) <= max_chars - (len(note) if n + 1 < len(results) else 0):
            out.append(block)
            used += len(block)
            continue
        marker = "\n\n[... truncated by --max-chars]\n"
        room = max_chars - used - len(head) - len(marker) - len(note) - 4
        if n == 0:
            room = max(room, 300)  # a heading without its text answers nothing
        if n == 0 or room > 200:
            out.append(f"{head}\n\n{_truncate(text, room)}{marker}")
            left -= 1
        if left:
            out.append(_cut_note(left, max_chars))
        break
    return "".join(out)


def run(argv, prog="search"):
    try:
        options = argv[:argv.index("--")] if "--" in argv else argv
        if any(a in ("-h", "--help") for a in options):
            _argparser(prog).print_help()
            return 0
        opts = parse(argv)
    except UsageError as exc:
        print(f"{prog}: error: {exc} (see --help)", file=sys.stderr)
        return 2
    from .search import MAX_QUERY_CHARS, SearchError, open_fresh, search

    # Undecodable bytes in argv arrive as lone surrogates, which cannot be encoded again.
    query = opts["query"].encode("utf-8", "replace").decode("utf-8").strip()
    if not query:
        print(f"{prog}: error: empty query; pass the question to search for", file=sys.stderr)
        return 2
    if len(query) > MAX_QUERY_CHARS:
        print(f"{prog}: note: query truncated from {len(query)} to {MAX_QUERY_CHARS} characters", file=sys.stderr)
        query = query[:MAX_QUERY_CHARS]

    try:
        index = open_fresh()
        try:
            results = search(index, query, k=opts["k"], page=opts["page"], source=opts["source"])
            version = index.header.get("torch_version", "")
        finally:
            index.close()
    except SearchError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{prog}: error: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}", file=sys.stderr)
        return 1
    if opts["json"]:
        payload = {"query": query, "torch_version": version, "results": [
            {"rank": r["rank"], "score": r["score"], **{f: r[f] for f in
             ("id", "title", "breadcrumbs", "url", "objects", "source", "path", "text")}}
            for r in results]}
        sys.stdout.write(to_json(payload) + "\n")
    else:
        sys.stdout.write(render_markdown(query, results, opts["max_chars"], opts["page"]))
    return 0


def main():
    return run(sys.argv[1:], prog="search.py")
