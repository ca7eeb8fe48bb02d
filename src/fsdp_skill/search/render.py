"""Search hits -> the markdown `scripts/search.py` prints, within a hard character budget.

Each hit gets a share of the budget by its score; a hit longer than its share shows its first
block and the blocks that match the query best, so an agent reads the answer, not a page.
"""

from fsdp_skill.index.tokenization import tokenize

MAX_API_NAMES = 4
FIRST_HIT_CHARS = 2400  # the best hit may take this much text even when others must shrink
MIN_HIT_CHARS = 800  # below this a hit's text rarely holds a whole answer; it is left out instead
GAP = "\n\n[...]\n\n"
SLACK_ROUNDS = 3  # passes that hand the characters excerpts left unused to the cut hits


def _block(r: dict[str, object]) -> tuple[str, str]:
    """(heading lines, text) of one hit."""
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


def truncate(text: str, room: int) -> str:
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


def _paragraphs(text: str) -> list[str]:
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


def excerpt(text: str, terms: set[str], room: int, counts: dict[str, int] | None = None) -> str:
    """At most `room` chars of `text`: its first block, then the blocks that share the most
    query terms, in their original order, with `[...]` where blocks were left out.

    `counts` caches each block's number of query terms across calls for the same `terms`: the
    budget passes excerpt the same hits again, and tokenizing blocks is most of the render time.
    """
    if len(text) <= room:
        return text
    paras = _paragraphs(text)
    keep = {0}
    used = len(paras[0])
    if used > room:
        return truncate(paras[0], room - 20) + "\n[...]"
    if counts is None:
        counts = {}
    for p in paras[1:]:
        if p not in counts:
            counts[p] = len(terms.intersection(tokenize(p)))
    scored = sorted(range(1, len(paras)), key=lambda i: (-counts[paras[i]], i))
    for i in scored:
        cost = len(paras[i]) + len(GAP)
        if used + cost <= room:
            keep.add(i)
            used += cost
        elif room - used > 300 and not paras[i].lstrip().startswith("```"):
            # A table or list too long to fit whole: its first rows still help. Code is never
            # cut, since half a snippet is worse than none.
            paras[i] = truncate(paras[i], room - used - len(GAP) - 8) + "\n[...]"
            keep.add(i)
            used += len(paras[i]) + len(GAP)
    return _join_kept(paras, keep)


def _join_kept(paras: list[str], keep: set[int]) -> str:
    """The kept blocks in their original order, `[...]` marking each run left out."""
    parts, prev = [], -1
    for i in sorted(keep):
        if parts:
            parts.append(GAP if i != prev + 1 else "\n\n")
        parts.append(paras[i])
        prev = i
    if prev != len(paras) - 1:
        parts.append("\n\n[...]")
    return "".join(parts)


def _text_caps(lengths: list[int], budget: int, weights: list[float] | None = None) -> list[int]:
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


def _cut_note(left: int, max_chars: int) -> str:
    return (
        f"({left} more result{'s' * (left > 1)} cut by --max-chars {max_chars}; "
        "raise it, or use --page/--k)\n"
    )


def _fit(
    blocks: list[tuple[str, str]], weights: list[float], max_chars: int
) -> tuple[int, int, list[int]]:
    """(hits shown, text budget, per-hit caps): drop the weakest hits until every hit shown
    gets at least MIN_HIT_CHARS of text (or all of its text, when shorter)."""
    shown = len(blocks)
    while True:
        note = len(_cut_note(len(blocks) - shown, max_chars)) if shown < len(blocks) else 0
        heads = sum(len(h) + 4 for h, _ in blocks[:shown])
        budget = max_chars - heads - note - 1
        caps = _text_caps([len(t) for _, t in blocks[:shown]], budget, weights[:shown])
        if shown == 1 or min(caps[1:], default=MIN_HIT_CHARS) >= min(
            MIN_HIT_CHARS, *(len(t) for _, t in blocks[1:shown])
        ):
            return shown, budget, caps
        shown -= 1


def _excerpts(
    blocks: list[tuple[str, str]], caps: list[int], budget: int, terms: set[str]
) -> list[str]:
    """Each shown hit's text cut to its cap, then re-cut with the characters left over."""
    counts: dict[str, int] = {}  # per render: the same blocks come back in every pass
    texts = [excerpt(t, terms, max(c, 0), counts) for (_, t), c in zip(blocks, caps)]
    for _ in range(SLACK_ROUNDS):
        # Excerpts keep whole blocks, so they often come in under their allowance: give the
        # slack to the hits that were cut.
        slack = budget - sum(len(t) for t in texts)
        cut = [i for i, ((_, t), x) in enumerate(zip(blocks, texts)) if len(x) < len(t)]
        if slack < 100 or not cut:
            break
        for i in cut:
            caps[i] += slack // len(cut)
            texts[i] = excerpt(blocks[i][1], terms, caps[i], counts)
        while sum(len(t) for t in texts) > budget:
            i = max(cut, key=lambda j: len(texts[j]))
            caps[i] -= 100
            texts[i] = excerpt(blocks[i][1], terms, caps[i], counts)
    return texts


def render_markdown(query: str, results: list[dict[str, object]], max_chars: int, page: int) -> str:
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
    terms = set(tokenize(query))
    blocks = [_block(r) for r in results]
    top = max(float(results[0].get("score") or 0.0), 1e-9)
    weights = [max(float(r.get("score") or 0.0), 0.0) / top or 1.0 for r in results]
    shown, budget, caps = _fit(blocks, weights, max_chars)
    texts = _excerpts(blocks[:shown], caps, budget, terms)
    body = "".join(f"{head}\n\n{text}\n\n" for (head, _), text in zip(blocks, texts))
    tail = _cut_note(len(blocks) - shown, max_chars) if shown < len(blocks) else ""
    if len(body) + len(tail) > max_chars:
        # Only a tiny --max-chars gets here: cut the one hit, keep the note saying so.
        marker = "\n[... truncated by --max-chars]\n"
        body = truncate(body, max_chars - len(tail) - len(marker)) + marker
    return _bounded(body + tail, max_chars)


def _bounded(text: str, max_chars: int) -> str:
    """--max-chars is a hard bound on what is printed."""
    if len(text) <= max_chars:
        return text
    return truncate(text, max_chars - 5).rstrip("\n")[: max_chars - 1] + "\n"
