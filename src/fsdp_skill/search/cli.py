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
        "their versioned docs.pytorch.org URLs. Builds the index on first use.",
    )
    p.add_argument("query", nargs="+", help="the question or keywords")
    p.add_argument("--k", type=int, default=DEFAULTS["k"], help="results per page (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of markdown")
    p.add_argument(
        "--max-chars",
        type=int,
        default=DEFAULTS["max_chars"],
        help="cap on the markdown output's length (default 6000)",
    )
    p.add_argument("--page", type=int, default=DEFAULTS["page"], help="result page, 1-based")
    p.add_argument(
        "--source",
        choices=SOURCES,
        help="search one source only (default: all, web pages replacing the docstring pages they mirror)",
    )
    return p


def parse(argv):
    """Parse argv without argparse; raises UsageError on anything unexpected."""
    opts = dict(DEFAULTS, json=False, source=None)
    words = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            words.extend(argv[i + 1 :])
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
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return "null"  # NaN and infinities are not JSON
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json_str(str(k))}: {to_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot encode {type(value).__name__}")


MAX_API_NAMES = 4
FIRST_HIT_CHARS = 2400  # the best hit may take this much text even when others must shrink
MIN_HIT_CHARS = 500  # below this a hit's text answers nothing; it is left out instead
GAP = "\n\n[...]\n\n"


def _block(r):
    # The page title is in the Source line; an API crumb repeated in its method's name is noise.
    trail = r["breadcrumbs"][1:] or r["breadcrumbs"]
    crumbs = " > ".join(c for c, nxt in zip(trail, trail[1:] + [""]) if not nxt.startswith(c + "."))
    head = f"## {r['rank']}. {crumbs}\nSource: {r['url']} (torch {r['torch_version']})"
    objects = r["objects"]
    if objects:
        more = len(objects) - MAX_API_NAMES
        head += "\nAPI: " + ", ".join(f"`{o}`" for o in objects[:MAX_API_NAMES])
        head += f" (+{more} more)" if more > 0 else ""
    return head, r["text"].strip()


def _truncate(text, room):
    """Cut at a line end within `room` chars, closing an open code fence.

    When that would keep under half the room (one long line, such as a signature), the line
    itself is cut after its last comma that fits, so a long signature still shows its start.
    """
    if len(text) <= room:
        return text
    room = max(room, 0)
    cut = text[:room].rsplit("\n", 1)[0]
    if len(cut) < room // 2:
        line_cut = text[: room - 8]
        comma = line_cut.rfind(", ")
        cut = (line_cut[: comma + 1] if comma > room // 2 else line_cut) + " ..."
    if cut.count("```") % 2:
        cut += "\n```"
    return cut


def _paragraphs(text):
    """Blank-line separated blocks; a fenced code block is never split."""
    out, cur, fenced = [], [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if cur:
                out.append("\n".join(cur))
                cur = []
            continue
        cur.append(line)
    if cur:
        out.append("\n".join(cur))
    return out


def excerpt(text, terms, room):
    """At most `room` chars of `text`: its first block, then the blocks that share the most
    query terms, in their original order, with `[...]` where blocks were left out."""
    if len(text) <= room:
        return text
    from fsdp_skill.index.tokenization import tokenize

    paras = _paragraphs(text)
    keep = {0}
    used = len(paras[0])
    if used > room:
        return _truncate(paras[0], room - 20) + "\n[...]"
    scored = sorted(
        range(1, len(paras)), key=lambda i: (-len(terms.intersection(tokenize(paras[i]))), i)
    )
    for i in scored:
        cost = len(paras[i]) + len(GAP)
        if used + cost <= room:
            keep.add(i)
            used += cost
        elif room - used > 300 and not paras[i].lstrip().startswith("```"):
            # A table or list too long to fit whole: its first rows still help. Code is never
            # cut, since half a snippet is worse than none.
            paras[i] = _truncate(paras[i], room - used - len(GAP) - 8) + "\n[...]"
            keep.add(i)
            used += len(paras[i]) + len(GAP)
    parts, prev = [], -1
    for i in sorted(keep):
        if parts:
            parts.append(GAP if i != prev + 1 else "\n\n")
        parts.append(paras[i])
        prev = i
    if prev != len(paras) - 1:
        parts.append("\n\n[...]")
    return "".join(parts)


def _text_caps(lengths, budget, weights=None):
    """Per-hit text allowance: water-filling over `budget` in proportion to `weights` (the
    hits' scores), the first hit guaranteed more, so characters go to the strongest hits."""
    caps = [0] * len(lengths)
    if not lengths:
        return caps
    weights = weights or [1.0] * len(lengths)
    caps[0] = min(lengths[0], max(FIRST_HIT_CHARS, budget // len(lengths)))
    rest = sorted(range(1, len(lengths)), key=lambda i: lengths[i] / max(weights[i], 1e-9))
    left = budget - caps[0]
    for n, i in enumerate(rest):
        total = sum(weights[j] for j in rest[n:]) or 1.0
        caps[i] = min(lengths[i], int(left * weights[i] / total))
        left -= caps[i]
    return caps


def _cut_note(left, max_chars):
    return (
        f"({left} more result{'s' * (left > 1)} cut by --max-chars {max_chars}; "
        "raise it, or use --page/--k)\n"
    )


def render_markdown(query, results, max_chars, page):
    """The hits as markdown, at most `max_chars` long (`query` as search.condense_query left it).

    Every hit gets a share of the budget: a hit longer than its share shows its first block and
    the blocks that match the query best. The first hit is always shown (cut to fit); hits that
    would get too little text to answer anything are dropped with a note.
    """
    if not results:
        return _bounded(
            f"No results for {query!r}" + (f" on page {page}" if page > 1 else "") + ".\n",
            max_chars,
        )
    from fsdp_skill.index.tokenization import tokenize

    terms = set(tokenize(query))
    blocks = [_block(r) for r in results]
    top = max(float(results[0].get("score") or 0.0), 1e-9)
    weights = [max(float(r.get("score") or 0.0), 0.0) / top or 1.0 for r in results]
    shown = len(blocks)
    while True:
        note = len(_cut_note(len(blocks) - shown, max_chars)) if shown < len(blocks) else 0
        heads = sum(len(h) + 4 for h, _ in blocks[:shown])
        budget = max_chars - heads - note - 1
        caps = _text_caps([len(t) for _, t in blocks[:shown]], budget, weights[:shown])
        if shown == 1 or min(caps[1:], default=MIN_HIT_CHARS) >= min(
            MIN_HIT_CHARS, *(len(t) for _, t in blocks[1:shown])
        ):
            break
        shown -= 1
    texts = [excerpt(t, terms, max(c, 0)) for (_, t), c in zip(blocks[:shown], caps)]
    for _ in range(3):
        # Excerpts keep whole blocks, so they often come in under their allowance: give the
        # slack to the hits that were cut.
        slack = budget - sum(len(t) for t in texts)
        cut = [i for i, ((_, t), x) in enumerate(zip(blocks[:shown], texts)) if len(x) < len(t)]
        if slack < 100 or not cut:
            break
        for i in cut:
            caps[i] += slack // len(cut)
            texts[i] = excerpt(blocks[i][1], terms, caps[i])
        while sum(len(t) for t in texts) > budget:
            i = max(cut, key=lambda j: len(texts[j]))
            caps[i] -= 100
            texts[i] = excerpt(blocks[i][1], terms, caps[i])
    out = []
    for (head, _), text in zip(blocks[:shown], texts):
        out.append(f"{head}\n\n{text}\n\n")
    tail = _cut_note(len(blocks) - shown, max_chars) if shown < len(blocks) else ""
    body = "".join(out)
    if len(body) + len(tail) > max_chars:
        # Only a tiny --max-chars gets here: cut the one hit, keep the note saying so.
        marker = "\n[... truncated by --max-chars]\n"
        body = _truncate(body, max_chars - len(tail) - len(marker)) + marker
    return _bounded(body + tail, max_chars)


def _bounded(text, max_chars):
    """--max-chars is a hard bound on what is printed."""
    if len(text) <= max_chars:
        return text
    return _truncate(text, max_chars - 5).rstrip("\n")[: max_chars - 1] + "\n"


def default_output(index, query, source=None):
    """Exactly what `search.py QUERY` prints with the default options (used by eval --answers)."""
    from fsdp_skill.search.engine import condense_query, search

    query = condense_query(query)
    results = search(index, query, k=DEFAULTS["k"], page=1, source=source)
    return render_markdown(query, results, DEFAULTS["max_chars"], 1)


def run(argv, prog="search"):
    try:
        options = argv[: argv.index("--")] if "--" in argv else argv
        if any(a in ("-h", "--help") for a in options):
            _argparser(prog).print_help()
            return 0
        opts = parse(argv)
    except UsageError as exc:
        print(f"{prog}: error: {exc} (see --help)", file=sys.stderr)
        return 2
    from fsdp_skill.search.engine import MAX_QUERY_CHARS, SearchError, condense_query, run_query

    # Undecodable bytes in argv arrive as lone surrogates, which cannot be encoded again.
    query = opts["query"].encode("utf-8", "replace").decode("utf-8").strip()
    if not query:
        print(f"{prog}: error: empty query; pass the question to search for", file=sys.stderr)
        return 2
    # A pasted traceback shrinks to its error lines; anything else too long keeps its head.
    condensed = condense_query(query)
    if len(query) > MAX_QUERY_CHARS and query.startswith(condensed):
        print(
            f"{prog}: note: query truncated from {len(query)} to {MAX_QUERY_CHARS} characters",
            file=sys.stderr,
        )
    query = condensed

    try:
        results, version = run_query(query, k=opts["k"], page=opts["page"], source=opts["source"])
    except SearchError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"{prog}: error: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}",
            file=sys.stderr,
        )
        return 1
    if opts["json"]:
        payload = {
            "query": query,
            "torch_version": version,
            "results": [
                {
                    "rank": r["rank"],
                    "score": r["score"],
                    **{
                        f: r[f]
                        for f in (
                            "id",
                            "title",
                            "breadcrumbs",
                            "url",
                            "objects",
                            "source",
                            "path",
                            "text",
                        )
                    },
                }
                for r in results
            ],
        }
        return emit(to_json(payload) + "\n", prog)
    return emit(render_markdown(query, results, opts["max_chars"], opts["page"]), prog)


def emit(text, prog):
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


def main():
    try:
        return run(sys.argv[1:], prog="search.py")
    except KeyboardInterrupt:
        print("search.py: interrupted", file=sys.stderr)
        return 130
