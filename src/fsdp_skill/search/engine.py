"""Query path: tokens -> BM25 scores from the index file -> ranked, de-duplicated chunks.

Runs once per agent question in a fresh process, so it imports nothing heavy: no torch, numpy,
sqlite, json or re (each costs milliseconds against a ~10 ms interpreter start).
"""

import os

from fsdp_skill import paths
from fsdp_skill.index.store import Index, IndexFileError
from fsdp_skill.index.tokenization import tokenize
from fsdp_skill.search.expand import expand

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_QUERY_CHARS = 2000
PER_PAGE_CAP = 2  # at most this many hits from one page in a result page: more pages, more answers


class SearchError(Exception):
    """A search that cannot be answered; the message is for the user."""


def open_fresh(root: str | None = None) -> Index:
    """Open the skill's index, (re)building it first when it is missing or stale.

    A read-only skill whose shipped index is stale (torch was upgraded) is rebuilt in the user
    cache instead, as the README promises.
    """
    from fsdp_skill.freshness import open_if_fresh

    index_file = paths.index_path(root)
    index, _ = open_if_fresh(index_file, paths.page_dirs(root), paths.installed_torch_version())
    if index is not None:
        return index
    if os.path.exists(index_file) and paths.use_cache_for(root):
        # An earlier search may already have built the cache's copy.
        index, _ = open_if_fresh(
            paths.index_path(root), paths.page_dirs(root), paths.installed_torch_version()
        )
        if index is not None:
            return index
    try:
        # Imported here: the build's dependencies may be missing where an index is only served.
        from fsdp_skill.build import BuildError, ensure_index

        index_file = ensure_index(root)
    except ImportError as exc:  # listed first: BuildError is unbound when the import failed
        # A plain copy of the skill (git clone, npx skills add) in a Python without the build
        # requirements: one line with the exact command that installs them.
        from fsdp_skill.skill.install import BUILD_MODULES, first_use_hint, missing_build_modules

        need = BUILD_MODULES.get((exc.name or "").partition(".")[0])
        if need is None:
            raise SearchError(
                f"building the index failed to import {exc.name}; the skill's copy is "
                "incomplete: install it again"
            ) from None
        raise SearchError(
            first_use_hint(", ".join(missing_build_modules(with_torch=False)) or need)
        ) from None
    except BuildError as exc:
        raise SearchError(str(exc)) from None
    except OSError as exc:
        raise SearchError(
            f"cannot build the index: {exc.strerror or exc}: {exc.filename or ''} "
            "(set FSDP_SKILL_DATA_DIR to a writable folder)"
        ) from None
    try:
        return Index(index_file)
    except IndexFileError as exc:
        raise SearchError(str(exc)) from None


def run_query(
    query: str, root: str | None = None, **options: object
) -> tuple[list[dict[str, object]], str]:
    """(results, torch version) for one query: open, search, close.

    A corruption found only while reading (a section's checksum fails) rebuilds the index once
    and asks again; the second failure is reported, never a wrong answer.
    """
    for attempt in (0, 1):
        index = open_fresh(root)
        try:
            return search(index, query, **options), index.header.get("torch_version", "")
        except IndexFileError as exc:
            if attempt:
                raise SearchError(f"{exc}; rebuild it with: fsdp-skill build --force") from None
            discard(index.path, root)
        finally:
            index.close()
    raise AssertionError("unreachable")


def discard(index_file: str, root: str | None) -> None:
    """Remove a corrupt index so the next open rebuilds it (in the user cache if read-only)."""
    try:
        os.unlink(index_file)
    except OSError:
        paths.use_cache_for(root)


def condense_query(query: str, limit: int = MAX_QUERY_CHARS) -> str:
    """A pasted traceback or log reduced to what identifies the error, at most `limit` chars.

    The prefixes torchrun and the C++/Python loggers put before each line (`[rank1]:`,
    `[W712 17:30:52.15 ProcessGroupNCCL.cpp:4715]`, `E1202 02:07:24.65 20738 torch/...py:1002]`)
    are dropped, and so are lines every rank printed alike. In a traceback, stack frames
    (`File "...", line N, in f` and the source line under each), caret lines and the
    "Traceback" banner name the user's files, not the error; they go too, as does torchrun's
    own report (its `ChildFailedError` traceback and summary table) when a worker's exception
    is in the paste: that exception is the question. The error lines themselves stay, the last
    one (the exception raised) twice, since it matters most. A long query that is not a
    traceback keeps its head.
    """
    lines, seen = [], set()
    for ln in query.splitlines():
        bare = _strip_log_prefix(ln)
        if bare != ln:
            # Every rank prints the same traceback: once is enough.
            if bare in seen and bare.strip():
                continue
            seen.add(bare)
        lines.append(bare)
    is_trace = len(lines) > 2 and any(
        ln.lstrip().startswith(('File "', "Traceback (most recent call last)")) for ln in lines
    )
    if not is_trace:
        text = "\n".join(lines) if seen else query
        return text[:limit]
    kept, skip_source = [], False
    for ln in lines:
        s = ln.strip()
        if skip_source:
            skip_source = False
            if ln[:1] in " \t" and not s.startswith('File "'):
                continue
        if s.startswith('File "'):
            skip_source = True
            continue
        if not s or s.startswith("Traceback (most recent call last)") or not s.strip("^~=-* "):
            continue
        if s.startswith(_LAUNCHER_NOISE):
            continue
        kept.append(s)
    errors = [k for k in kept if _is_exception_line(k)]
    worker = [k for k in errors if not _is_launcher_line(k)]
    if worker:
        # torchrun's report repeats, in its words, that a worker failed: its table goes, and
        # its exception's bare name stays as a hint (the catalog explains it).
        cut = next((i for i, k in enumerate(kept) if _is_launcher_line(k)), len(kept))
        kept = kept[:cut] + (["ChildFailedError"] if cut < len(kept) else [])
        kept = [k for k in kept if not k.startswith(_AGENT_FAILED)]
    last = (worker or errors or kept or [""])[-1]
    text = "\n".join(kept + [last])
    # The exception comes last: when too long, keep the tail, not the head.
    return text[-limit:] if len(text) > limit else text


# torchrun's start-up banner and the lines of its failure table that are the same for every
# failure (the exit code and signal lines, which differ, stay).
_LAUNCHER_NOISE = (
    "Setting OMP_NUM_THREADS environment variable for each process",
    "time      :",
    "host      :",
    "error_file:",
    "traceback : To enable traceback see",
    "<NO_OTHER_FAILURES>",
)
_AGENT_FAILED = "failed (exitcode:"
_LOG_LEVELS = "IWEF"
_LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _is_exception_line(line: str) -> bool:
    head = line.split(":", 1)[0].rsplit(".", 1)[-1]
    return ":" in line and head.endswith(("Error", "Exception", "Warning", "Interrupt"))


def _is_launcher_line(line: str) -> bool:
    return "ChildFailedError" in line.split(":", 1)[0]


def _strip_log_prefix(line: str) -> str:
    """`line` without torchrun's `[rankN]:` and the loggers' level-time-file prefixes."""
    s = line
    while True:
        if s.startswith("[") and "]:" in s[:40]:
            # `[rank1]:` from init_process_group's excepthook (distributed_c10d.py), or
            # `[default1]:` from torchrun's --tee (role name and local rank, tail_log.py).
            tag, _, rest = s[1:].partition("]:")
            name = tag.rstrip("0123456789")
            if name != tag and name.replace("_", "").isalpha():
                s = rest[1:] if rest.startswith(" ") else rest
                continue
        # glog: `W1202 02:07:16.364000 20738 torch/distributed/run.py:874] message` (Python)
        # or `[W712 17:30:52.153232081 ProcessGroupNCCL.cpp:4715] message` (C++).
        head = s[1:] if s.startswith("[") else s
        if head[:1] in _LOG_LEVELS and head[1:4].isdigit():
            end = head.find("]", 0, 200)
            if end > 0 and ":" in head[:end]:
                s = head[end + 1 :].lstrip(" ")
                continue
        # Python's default logging format: `ERROR:torch.distributed.elastic...api:message`.
        level, _, rest = s.partition(":")
        if level in _LOGGING_LEVELS:
            name, _, message = rest.partition(":")
            if name and " " not in name:
                s = message.lstrip(" ")
                continue
        break
    return s


def query_terms(
    query: str, use_expansion: bool = True, tokenizer: "Callable[[str], list[str]]" = tokenize
) -> list[tuple[str, float]]:
    """[(term, weight)] for a query: its own tokens, plus curated expansions at lower weight."""
    terms = [(t, 1.0) for t in tokenizer(query)]
    if use_expansion:
        terms += expand(query, terms)
    return terms


QUOTED_TITLE_BOOST = 1.5  # a section whose title the query quotes (a pasted error line)
QUOTED_TITLE_MIN = 24  # shorter titles ("DDP", "Join") occur in queries by chance
QUOTED_CANDIDATES = 30


def _plain(text: str) -> str:
    return " ".join(text.lower().replace("`", " ").replace('"', " ").replace("'", " ").split())


def bare_api_name(query: str) -> str:
    """The query, lower-cased, when it is one API name (`init_process_group`,
    `FSDPModule.unshard`, `DistributedDataParallel`): a lookup of that API's own reference
    entry. Else '' (a plain word such as `barrier` may mean anything)."""
    q = query.strip().strip("`").removesuffix("()")
    parts = q.split(".")
    if not q or not all(p and not p[0].isdigit() and p.replace("_", "").isalnum() for p in parts):
        return ""
    looks_like_code = "_" in q or "." in q or any(c.isupper() for c in q[1:])
    return q.lower() if looks_like_code else ""


def _names_api(title: str, name: str) -> bool:
    """Whether a reference entry titled `title` documents `name`, also under a shorter public
    path (`torch.distributed.checkpoint.save` for `...checkpoint.state_dict_saver.save`)."""
    if title == name or title.endswith("." + name):
        return True
    package, _, last = name.rpartition(".")
    return bool(package) and title.startswith(package + ".") and title.endswith("." + last)


def _quoted_titles_first(
    index: Index,
    query: str,
    ranked: list[tuple[int, float]],
    docs: dict[int, dict[str, object]],
    name: str = "",
) -> list[tuple[int, float]]:
    """Boost the top candidates whose section title appears word for word in the query.

    An error-catalog heading is the message's first sentence, so a user who pastes the error
    quotes it exactly; BM25 alone lets a long section that shares many of the words win.
    `name` (bare_api_name of the query) boosts the reference entries documenting that API.
    """
    plain_query = _plain(query)
    head = []
    for doc_no, score in ranked[:QUOTED_CANDIDATES]:
        doc = docs[doc_no] = index.doc(doc_no)
        title = _plain(doc["title"])
        if len(title) >= QUOTED_TITLE_MIN and title in plain_query:
            score *= QUOTED_TITLE_BOOST
        elif name and doc["source"] != "guide" and _names_api(title, name):
            score *= QUOTED_TITLE_BOOST
        head.append((doc_no, score))
    head.sort(key=lambda kv: (-kv[1], kv[0]))
    return head + ranked[QUOTED_CANDIDATES:]


# A guide hit moves ahead of a reference hit on its API if it scores at least this share.
GUIDE_PULL = 0.5


def _guides_first(hits: list[dict[str, object]]) -> None:
    """Put a guide section ahead of a raw reference entry on the same API when both rank.

    The guide states the fix; the docstring states the signature. Only a guide hit whose score
    is at least GUIDE_PULL of the reference hit's moves, so a weak match never jumps the queue.
    """
    i = 0
    while i < len(hits):
        ref = hits[i]
        if ref["source"] != "guide" and ref["objects"]:
            objs = set(ref["objects"])
            for j in range(i + 1, len(hits)):
                g = hits[j]
                if (
                    g["source"] == "guide"
                    and objs & set(g["objects"])
                    and g["score"] >= GUIDE_PULL * ref["score"]
                ):
                    hits.insert(i, hits.pop(j))
                    break
        i += 1


def _signature_key(doc: dict[str, object]) -> str:
    """Near-duplicate key: the same text published under two names collapses to one hit (the
    text after a leading signature fence; the whole text when the fence is all there is)."""
    text = doc["text"]
    if text.startswith("```"):
        rest = text[text.find("\n```", 3) :]
        if rest.strip("`\n "):
            return rest[:400]
    return text[:400]


# A hit's whole-section text; long API entries keep the parts nearest the hit.
MAX_SECTION_CHARS = 6000


def section_key(doc: dict[str, object]) -> tuple[object, ...]:
    """What the chunks of one section share: source, page, breadcrumbs and the id before the
    part number (chunking.chunk_markdown numbers a section's parts `:0`, `:1`, ...; a repeated
    heading gets `.1`, `.2` after the number)."""
    return (doc["source"], doc["page"], tuple(doc["breadcrumbs"]), doc["id"].rpartition(":")[0])


def join_section(texts: list[str]) -> str:
    """A section's chunk texts in order, as one text: the head chunking repeats atop each
    continuation (a signature, a quoted error message) is kept once."""
    first = texts[0]
    head = ""
    if first.startswith("```"):
        end = first.find("\n```", 3)
        if end >= 0:
            head = first[: end + 4]
    out = [first]
    for text in texts[1:]:
        if head and text.startswith(head + "\n\n"):
            text = text[len(head) + 2 :]
        out.append(text)
    return "\n\n".join(t.strip("\n") for t in out)


def _part_no(doc: dict[str, object]) -> str:
    """A chunk's part number within its section ('0' for the first)."""
    return doc["id"].rpartition(":")[2].partition(".")[0]


def _whole_section(
    index: Index, doc_no: int, doc: dict[str, object], docs: dict[int, dict[str, object]]
) -> None:
    """Give `doc` the text of its section's other chunks (consecutive doc numbers), nearest
    first, up to MAX_SECTION_CHARS.

    A long section is stored in parts (an error entry's cause in one, its fix in the next);
    diversity keeps one hit per section, so without this the part that scored best hides the
    part that holds the fix.
    """
    key = section_key(doc)
    parts = {doc_no: doc}

    def part(n: int) -> dict[str, object] | None:
        if not 0 <= n < index.n_docs:
            return None
        if n < doc_no and _part_no(parts[n + 1]) == "0":
            return None  # part 0 opens the section: nothing before it belongs to it
        other = docs.get(n) or index.doc(n)
        docs[n] = other
        if n > doc_no and _part_no(other) == "0":
            return None  # the next section's first part
        return other if section_key(other) == key else None

    size = len(doc["text"])
    lo, hi, grow = doc_no, doc_no, True
    while grow:
        grow = False
        for n in (hi + 1, lo - 1):
            other = part(n)
            if other is None or size + len(other["text"]) > MAX_SECTION_CHARS:
                continue
            parts[n] = other
            size += len(other["text"])
            lo, hi, grow = min(lo, n), max(hi, n), True
    if len(parts) > 1:
        doc["text"] = join_section([parts[n]["text"] for n in sorted(parts)])


def search(
    index: Index,
    query: str,
    k: int = 5,
    page: int = 1,
    source: str | None = None,
    use_expansion: bool = True,
    diversity: bool = True,
    tokenizer: "Callable[[str], list[str]]" = tokenize,
    per_page_cap: int = PER_PAGE_CAP,
    quoted_titles: bool = True,
    whole_sections: bool = True,
) -> list[dict[str, object]]:
    """Ranked result dicts for `query` (1-based `page` of `k` results).

    source: None for the default view (web pages replace the docstring pages they mirror),
    or one of 'docstring', 'web', 'guide' to search only that source.
    diversity: show each API entry once (its best chunk), collapse the same text published
    under two names, and take at most PER_PAGE_CAP hits from one page, so the first results
    offer different answers rather than five slices of one.
    quoted_titles: boost sections whose title the query quotes word for word.
    whole_sections: a hit from a section stored in several chunks carries the text of the
    others too (up to MAX_SECTION_CHARS), so the renderer can show the part that answers (see
    _whole_section). Only with diversity, which keeps one hit per section.
    """
    query = condense_query(query)
    name = bare_api_name(query)
    terms = query_terms(query, use_expansion, tokenizer)
    constant, extra = index.scores(terms)
    prior = index.prior
    ranked = sorted(
        ((d, (constant + s) * prior(d)) for d, s in extra.items()), key=lambda kv: (-kv[1], kv[0])
    )
    docs = {}
    if quoted_titles:
        ranked = _quoted_titles_first(index, query, ranked, docs, name)
    wanted = k * page
    out, per_page, seen, numbers = [], {}, set(), {}
    for doc_no, score in ranked:
        doc = docs.get(doc_no) or index.doc(doc_no)
        if source is None:
            if doc["flags"] in ("shadowed", "stale"):
                continue
        elif doc["source"] != source:
            continue
        if diversity:
            keys = (_signature_key(doc), (doc["source"], doc["page"], doc["title"]))
            if any(key in seen for key in keys) or per_page.get(doc["page"], 0) >= per_page_cap:
                continue
            seen.update(keys)
            per_page[doc["page"]] = per_page.get(doc["page"], 0) + 1
        doc["score"] = round(score, 4)
        numbers[id(doc)] = doc_no
        out.append(doc)
        if len(out) >= wanted:
            break
    if diversity and not name:
        # A bare API name asks for that API's reference entry, which the boost above put first.
        _guides_first(out)
    results = out[k * (page - 1) : wanted]
    if whole_sections and diversity:
        for doc in results:
            _whole_section(index, numbers[id(doc)], doc, docs)
    for rank, doc in enumerate(results, start=k * (page - 1) + 1):
        doc["rank"] = rank
    return results
