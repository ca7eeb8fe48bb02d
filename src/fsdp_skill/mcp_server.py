"""`fsdp-skill mcp`: the skill's search, references and examples as an MCP server over stdio.

For agents that reach tools through the Model Context Protocol rather than by running
`scripts/search.py`. Built on the official MCP Python SDK (`pip install "pytorch-fsdp-skill[mcp]"`).

Tools:

* `search_docs(query, k, source, page)`: the ranked hits `fsdp-skill search` returns, as the
  markdown it prints, plus structured content (`--json`'s object: versioned URLs, `objects`,
  torch version).
* `read_reference(path_or_id)`: a whole reference or guide section (or page), by the chunk id or
  `path#anchor` a search hit carries, a versioned docs URL, or a qualified API name.
* `list_examples()` / `get_example(name)`: the runnable scripts in `scripts/`, with the
  torchrun commands their docstrings give.

The index is opened once per process (on a background thread at start, so the first call does
not wait for it) and kept open; a corrupt index is rebuilt once, as the CLI does. A bad argument
or a failed call is an MCP error result (`isError`), never a crash of the server. Only protocol
messages reach stdout: the SDK points file descriptor 1 at stderr while it serves, so build
progress and anything a library prints go to stderr.
"""

# No `from __future__ import annotations`: the SDK builds each tool's input schema from its
# function's annotations, which name `Field` from pydantic, imported only where the tools are
# registered; string annotations would be resolved in this module's globals and fail. So names
# imported for type checking only are quoted below.
import ast
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult

    from fsdp_skill.index.store import Index

# A section of the table `Docs.section_table` builds, and the table itself (see there).
Section = dict[str, Any]
Table = dict[str, Any]
# What a tool body returns: the markdown an agent reads and the structured content beside it.
Answer = dict[str, Any]
T = TypeVar("T")

SERVER_NAME = "pytorch-fsdp"
SOURCES = ("web", "docstring", "guide")
MAX_K = 20
MAX_READ_CHARS = 60000
# Scripts in scripts/ that are not examples: the search entry point and shared helpers (_*.py).
NOT_EXAMPLES = ("search.py",)

INSTRUCTIONS = """\
Offline, version-exact PyTorch distributed documentation (FSDP2 fully_shard, FSDP1, DDP, ZeRO,
DTensor, DeviceMesh, HSDP, tensor parallel, distributed checkpoints, torchrun, NCCL/gloo errors)
built from the installed torch, plus hand-written guides and runnable torchrun examples.

Use search_docs first for any torch.distributed question or pasted error; every hit has a
docs.pytorch.org URL for the exact torch version. When a hit is cut short or you need the whole
section, call read_reference with the hit's `id` (or `path#anchor`). Before writing a training
script from scratch, call list_examples and then get_example for the closest verified script and
its torchrun command."""

SEARCH_DESCRIPTION = """\
Search the PyTorch distributed / FSDP references (API docstrings of the installed torch,
docs.pytorch.org pages when scraped, and task guides) with BM25 tuned for API names.

Call this first for any question about FSDP2 (fully_shard), FSDP1, DDP, ZeRO, DTensor,
DeviceMesh, tensor parallel, distributed checkpointing, torchrun or process groups, and paste
error messages or tracebacks as the query: they are reduced to their error lines. Returns the
best hits as markdown (breadcrumbs, versioned Source URL, API names, text), and structured
content with each hit's id, url, objects, source, path and full text. Pass a hit's `id` to
read_reference for the whole section. `source` limits the search to one kind of page: 'guide'
(how-to guides), 'docstring' (API reference from torch) or 'web' (scraped docs pages)."""

READ_DESCRIPTION = """\
Read one whole section of a reference page or guide (search_docs shows only excerpts).

`path_or_id` is what a search_docs hit gives: its `id` (e.g.
'guide:fsdp2-quickstart#gradient-accumulation:0'), or its `path` plus '#anchor' (e.g.
'references/guides/checkpointing.md#resharding'), or its versioned `url`. A fully qualified API
name such as 'torch.distributed.fsdp.fully_shard' reads that API's reference entry. A path
without '#anchor' reads the whole page, up to `max_chars`."""

LIST_EXAMPLES_DESCRIPTION = """\
List the runnable example scripts that ship with this skill (DDP, Join for uneven inputs,
FSDP2, FSDP1, distributed checkpointing, HSDP, TP+FSDP, elastic resume, torch.compile, ...),
each verified by tests, with a one-line summary and its torchrun command. Call before writing a
distributed training script, then get_example for the closest one."""

GET_EXAMPLE_DESCRIPTION = """\
Get one example script from list_examples: its full source, the torchrun commands that launch
it, and the helper files it imports (copy those next to it). `name` is the script name with or
without '.py' (e.g. 'fsdp2_train')."""


class ToolFailure(Exception):
    """A bad argument or a failed call: becomes an MCP error result with this one-line message."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _compact_error(text: str) -> str:
    """An error result's text on one line; pydantic's argument errors as `name: problem`.

    The SDK validates arguments against the tool's schema before our code runs and reports
    pydantic's multi-line message (with a docs link per error); an agent needs one line.
    """
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    if len(lines) < 2 or " validation error" not in lines[0]:
        return _one_line(text)
    head = lines[0].split(":", 1)[0] if lines[0].startswith("Error executing tool") else ""
    problems, loc = [], None
    for ln in lines[1:]:
        s = ln.strip()
        if s.startswith("For further information"):
            continue
        if not ln.startswith(" "):
            loc = s
            continue
        problems.append(f"{loc}: {s.split(' [type=', 1)[0]}" if loc else s.split(" [type=", 1)[0])
    body = "bad argument " + "; ".join(problems) if problems else _one_line(text)
    return f"{head}: {body}" if head else body


async def _one_line_errors(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """Server middleware: every tool error result reaches the agent as one line of text."""
    result = await call_next(ctx)
    if getattr(ctx, "method", None) != "tools/call":
        return result
    try:
        # The chain hands back the wire form (a dict); a model is handled too.
        is_error = (
            result.get("isError")
            if isinstance(result, dict)
            else getattr(result, "is_error", False)
        )
        if is_error:
            blocks = result.get("content", []) if isinstance(result, dict) else result.content
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "text":
                    block["text"] = _compact_error(block["text"])
                elif getattr(block, "type", None) == "text":
                    block.text = _compact_error(block.text)
    except (AttributeError, TypeError, ValueError):
        pass  # an SDK whose result shapes differ: the text stays as it was
    return result


class Docs:
    """The skill's references and examples, with the search index opened once and kept open."""

    def __init__(self, root: str | None = None) -> None:
        from fsdp_skill import paths

        self.root = root or paths.skill_root()
        from fsdp_skill.skill.bundle import TIMES_FILE, restore_times

        if os.path.exists(os.path.join(self.root, *TIMES_FILE.split("/"))):
            restore_times(self.root)  # an unzipped bundle: see skill/bundle.py
        self._lock = threading.Lock()
        self._index: Index | None = None  # an attribute annotation: never evaluated
        self._sections: Table | None = None  # built on the first read_reference

    # -- index --------------------------------------------------------------------------

    def _open(self) -> "Index":
        """The open index, opening (and building, when missing or stale) it on first use."""
        from fsdp_skill.search.engine import SearchError, open_fresh

        if self._index is None:
            try:
                self._index = open_fresh(self.root)
            except SearchError as exc:
                raise ToolFailure(str(exc)) from None
            except OSError as exc:
                raise ToolFailure(f"cannot open the index: {exc.strerror or exc}") from None
            self._sections = None
        return self._index

    def warm(self) -> None:
        """Open the index ahead of the first call; a failure is reported by that call."""
        try:
            with self._lock:
                self._open()
        except Exception as exc:  # noqa: BLE001 - the first tool call reports it
            print(f"fsdp-skill mcp: note: {_one_line(exc)}", file=sys.stderr, flush=True)

    def with_index(self, fn: Callable[["Index"], T]) -> T:
        """fn(index) under the lock; a corrupt index is discarded, rebuilt and asked again once."""
        from fsdp_skill.index.store import IndexFileError
        from fsdp_skill.search.engine import discard

        with self._lock:
            for attempt in (0, 1):
                index = self._open()
                try:
                    return fn(index)
                except IndexFileError as exc:
                    index.close()
                    self._index = None
                    if attempt:
                        raise ToolFailure(
                            f"{exc}; rebuild it with: fsdp-skill build --force"
                        ) from None
                    discard(index.path, self.root)
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None

    # -- search -------------------------------------------------------------------------

    def search(
        self, query: str, k: int = 5, source: str | None = None, page: int = 1
    ) -> dict[str, Any]:
        """What `fsdp-skill search QUERY --k K --source S --page P` prints, and its --json object."""
        from fsdp_skill.search.cli import DEFAULTS, payload
        from fsdp_skill.search.engine import MAX_QUERY_CHARS, condense_query, search
        from fsdp_skill.search.render import render_markdown

        if not isinstance(query, str) or not query.strip():
            raise ToolFailure(
                "query is empty; pass the question, API name or error message to search for"
            )
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
            raise ToolFailure(f"k must be a whole number from 1 to {MAX_K}, not {k!r}")
        if not isinstance(page, int) or isinstance(page, bool) or page < 1:
            raise ToolFailure(f"page must be a whole number of at least 1, not {page!r}")
        if source is not None and source not in SOURCES:
            raise ToolFailure(
                f"source must be one of {', '.join(SOURCES)} (or omitted), not {source!r}"
            )
        # As the CLI: undecodable text replaced, a pasted traceback reduced to its error lines.
        query = condense_query(
            query.encode("utf-8", "replace").decode("utf-8").strip(), MAX_QUERY_CHARS
        )

        def run(index: "Index") -> tuple[list[dict[str, Any]], str]:
            return search(index, query, k=k, page=page, source=source), index.header.get(
                "torch_version", ""
            )

        results, version = self.with_index(run)
        markdown = render_markdown(query, results, DEFAULTS["max_chars"], page)
        data = payload(query, version, results)
        return {"markdown": markdown, "structured": data}

    # -- read_reference -----------------------------------------------------------------

    def section_table(self, index: "Index") -> Table:
        """Every section of every page: consecutive chunks that share page and breadcrumbs."""
        if self._sections is not None:
            return self._sections
        from fsdp_skill.search.engine import section_key

        sections, by_chunk = [], {}
        current, key = None, None
        for n in range(index.n_docs):
            doc = index.doc(n)
            prefix = doc["id"].rpartition(":")[0]
            this = section_key(doc)
            if current is None or this != key:
                current = {
                    "id": doc["id"],
                    "prefix": prefix,
                    "anchor": prefix.partition("#")[2],
                    "docs": [],
                    "source": doc["source"],
                    "page": doc["page"],
                    "path": doc["path"],
                    "url": doc["url"],
                    "title": doc["title"],
                    "breadcrumbs": doc["breadcrumbs"],
                    "objects": doc["objects"],
                    "torch_version": doc["torch_version"],
                    "flags": doc["flags"],
                }
                sections.append(current)
                key = this
            current["docs"].append(n)
            by_chunk[doc["id"]] = current
        table = {
            "sections": sections,
            "by_chunk": by_chunk,
            "by_prefix": {},
            "by_path_anchor": {},
            "by_url": {},
            "by_api": {},
            "pages": {},
        }
        for sec in sections:
            table["by_prefix"].setdefault(sec["prefix"], sec)
            table["by_path_anchor"].setdefault((sec["path"], sec["anchor"]), sec)
            table["by_url"].setdefault(sec["url"], sec)
            table["pages"].setdefault(sec["path"], []).append(sec)
            for name in ([sec["anchor"]] if sec["anchor"].startswith("torch.") else []) + sec[
                "objects"
            ][:1]:
                # The API's own reference entry wins over a guide section about it, and the
                # page search serves (a scraped page) over the docstring page it shadows.
                rank = (sec["source"] == "guide", sec["flags"] == "shadowed")
                best = table["by_api"].get(name)
                if best is None or rank < best[0]:
                    table["by_api"][name] = (rank, sec)
        table["by_api"] = {name: sec for name, (_, sec) in table["by_api"].items()}
        self._sections = table
        return table

    @staticmethod
    def section_text(index: "Index", sec: Section) -> str:
        """The section's text: its chunks joined, the head repeated atop each continuation dropped."""
        from fsdp_skill.search.engine import join_section

        return join_section([index.doc(n)["text"] for n in sec["docs"]])

    def _lookup(self, table: Table, ref: str) -> tuple[str, Section | list[Section]] | None:
        """(kind, section or page sections) for a reference string, or None."""
        ref = ref.strip()
        for key in ("by_chunk", "by_prefix"):
            if ref in table[key]:
                return "section", table[key][ref]
        path, sep, anchor = ref.partition("#")
        path = path.strip()
        path = path[2:] if path.startswith("./") else path
        root = self.root.rstrip("/") + "/"
        path = path[len(root) :] if path.startswith(root) else path
        if not sep and path in table["pages"]:
            return "page", table["pages"][path]
        if sep and (path, anchor) in table["by_path_anchor"]:
            return "section", table["by_path_anchor"][(path, anchor)]
        if ref in table["by_url"]:
            return "section", table["by_url"][ref]
        if ref in table["by_api"]:
            return "section", table["by_api"][ref]
        return None

    def read(self, path_or_id: str, max_chars: int = 20000) -> Answer:
        if not isinstance(path_or_id, str) or not path_or_id.strip():
            raise ToolFailure(
                "path_or_id is empty; pass a search_docs hit's id, or its path#anchor"
            )
        if (
            not isinstance(max_chars, int)
            or isinstance(max_chars, bool)
            or not 500 <= max_chars <= MAX_READ_CHARS
        ):
            raise ToolFailure(
                f"max_chars must be a whole number from 500 to {MAX_READ_CHARS}, not {max_chars!r}"
            )
        ref = path_or_id.strip()
        kind, sections, parts, version = self.with_index(lambda index: self._texts(index, ref))
        return _read_answer(kind, sections, "\n\n".join(parts), version, max_chars)

    def _texts(self, index: "Index", ref: str) -> tuple[str, list[Section], list[str], str]:
        """(section or page, its sections, their texts, index torch version) for `ref`."""
        table = self.section_table(index)
        found = self._lookup(table, ref)
        if found is None:
            raise ToolFailure(self._not_found(table, ref))
        kind, hit = found
        if kind == "page":
            sections, parts = hit, self.page_parts(index, hit)
        else:
            sections, parts = [hit], [self.section_text(index, hit)]
        return kind, sections, parts, index.header.get("torch_version", "")

    def page_parts(self, index: "Index", sections: list[Section]) -> list[str]:
        """A page's sections as text, each below a heading of its depth but the page's own."""
        parts = []
        for sec in sections:
            text = self.section_text(index, sec)
            if len(sec["breadcrumbs"]) > 1:
                depth = min(len(sec["breadcrumbs"]) + 1, 6)
                text = f"{'#' * depth} {sec['title']}\n\n{text}"
            parts.append(text)
        return parts

    @staticmethod
    def _not_found(table: Table, ref: str) -> str:
        import difflib

        keys = list(table["by_chunk"]) + [
            f"{p}#{a}" if a else p for p, a in table["by_path_anchor"]
        ]
        close = difflib.get_close_matches(ref, keys, n=3, cutoff=0.6)
        hint = (
            f"; did you mean {', '.join(repr(c) for c in close)}?"
            if close
            else "; pass a search_docs hit's id (e.g. 'guide:fsdp2-quickstart#...:0') or path#anchor"
        )
        return f"no reference section {ref[:200]!r}{hint}"

    # -- examples -----------------------------------------------------------------------

    def _scripts_dir(self) -> Path:
        return Path(self.root) / "scripts"

    def examples(self) -> list[dict[str, Any]]:
        out = []
        folder = self._scripts_dir()
        try:
            names = sorted(p.name for p in folder.iterdir())
        except OSError as exc:
            raise ToolFailure(f"cannot list {folder}: {exc.strerror or exc}") from None
        for name in names:
            if not name.endswith(".py") or name.startswith(("_", ".")) or name in NOT_EXAMPLES:
                continue
            path = folder / name
            if not path.is_file():
                continue
            out.append(_describe_script(path, self.root))
        return out

    def example(self, name: str) -> dict[str, Any]:
        if not isinstance(name, str) or not name.strip():
            raise ToolFailure(
                "name is empty; pass a script name from list_examples, e.g. 'fsdp2_train'"
            )
        wanted = name.strip()
        wanted = wanted[len("scripts/") :] if wanted.startswith("scripts/") else wanted
        wanted = wanted[:-3] if wanted.endswith(".py") else wanted
        examples = {e["name"]: e for e in self.examples()}
        info = examples.get(wanted)
        if info is None:
            raise ToolFailure(
                f"no example {name[:100]!r}; choose one of {', '.join(sorted(examples))}"
            )
        path = Path(self.root) / info["path"]
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolFailure(
                f"cannot read {info['path']}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        return dict(info, text=text)


def _read_answer(
    kind: str, sections: list[Section], body: str, version: str, max_chars: int
) -> Answer:
    """read_reference's result: a head (breadcrumbs, versioned Source, API names, Path), then
    the text, cut at `max_chars` with a note saying how to read the rest."""
    first = sections[0]
    crumbs = " > ".join(
        _crumbs(first["breadcrumbs"][:1] if kind == "page" else first["breadcrumbs"])
    )
    head = (
        f"# {crumbs}\nSource: {first['url'].partition('#')[0] if kind == 'page' else first['url']} "
        f"(torch {first['torch_version']})"
    )
    if kind == "section" and first["objects"]:
        head += "\nAPI: " + ", ".join(f"`{o}`" for o in first["objects"][:8])
    head += f"\nPath: {first['path']}" + (
        f"#{first['anchor']}" if kind == "section" and first["anchor"] else ""
    )
    truncated = len(body) > max_chars
    if truncated:
        from fsdp_skill.search.render import truncate

        body = truncate(body, max_chars) + (
            f"\n\n[... cut at max_chars={max_chars}; read one section with path#anchor, or raise max_chars]"
        )
    markdown = f"{head}\n\n{body}\n"
    structured = {
        "kind": kind,
        "id": first["id"],
        "title": first["title"],
        "breadcrumbs": first["breadcrumbs"],
        "url": first["url"],
        "objects": first["objects"] if kind == "section" else [],
        "source": first["source"],
        "path": first["path"],
        "anchor": first["anchor"] if kind == "section" else "",
        "torch_version": first["torch_version"],
        "index_torch_version": version,
        "truncated": truncated,
        "text": body,
        "sections": [
            {"id": s["id"], "title": s["title"], "anchor": s["anchor"], "url": s["url"]}
            for s in sections
        ]
        if kind == "page"
        else [],
    }
    return {"markdown": markdown, "structured": structured}


def _crumbs(trail: list[str]) -> list[str]:
    """Breadcrumbs without repeats: an API entry under a page of the same name, or a method
    under its class (`DDP` > `DDP.no_sync`), shows the longer name only."""
    return [
        c
        for c, nxt in zip(trail, list(trail[1:]) + [""])
        if c != nxt and not nxt.startswith(c + ".")
    ]


def _describe_script(path: Path, root: str) -> dict[str, Any]:
    """name, summary, torchrun commands (from the docstring) and local helper imports of a script."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        doc = ast.get_docstring(tree) or ""
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        source, tree, doc = "", None, ""
    commands, pending = [], ""
    for line in doc.splitlines():
        s = line.strip()
        if pending:
            pending += " " + s.rstrip("\\").strip()
            if not s.endswith("\\"):
                commands.append(pending)
                pending = ""
            continue
        if s.startswith("torchrun ") or s.startswith("python "):
            if s.endswith("\\"):
                pending = s.rstrip("\\").strip()
            else:
                commands.append(s)
    if pending:
        commands.append(pending)
    helpers = set()
    if tree is not None:
        local = {p.stem for p in path.parent.glob("_*.py")}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                helpers.update(
                    a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in local
                )
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if node.module.split(".")[0] in local:
                    helpers.add(node.module.split(".")[0])
    rel = (
        path.relative_to(root).as_posix()
        if str(path).startswith(str(root))
        else f"scripts/{path.name}"
    )
    return {
        "name": path.stem,
        "path": rel,
        "summary": doc.strip().splitlines()[0] if doc.strip() else "",
        "torchrun": next(
            (c for c in commands if c.startswith("torchrun ")), f"torchrun --nproc-per-node 2 {rel}"
        ),
        "commands": commands,
        "requires": sorted(f"scripts/{h}.py" for h in helpers),
    }


def _examples_markdown(examples: list[dict[str, Any]]) -> str:
    lines = [
        f"{len(examples)} runnable examples (call get_example with a name for the script and its command):",
        "",
    ]
    for e in examples:
        lines.append(f"- `{e['name']}`: {e['summary']}\n  Run: `{e['torchrun']}`")
    return "\n".join(lines) + "\n"


def _example_markdown(e: dict[str, Any]) -> str:
    out = [f"# {e['path']}", e["summary"], "", "Run:"]
    out += [f"    {c}" for c in e["commands"] or [e["torchrun"]]]
    if e["requires"]:
        out += [
            "",
            "Imports "
            + ", ".join(f"`{r}`" for r in e["requires"])
            + ": copy it next to the script.",
        ]
    out += ["", "```python", e["text"].rstrip("\n"), "```", ""]
    return "\n".join(out)


def build_server(root: str | None = None, warm: bool = True) -> "MCPServer":
    """The MCPServer with the four tools, over a Docs for the skill at `root`."""
    from mcp.server.mcpserver import MCPServer

    from fsdp_skill import __version__

    docs = Docs(root)
    server = MCPServer(
        SERVER_NAME,
        title="PyTorch FSDP / torch.distributed docs",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        middleware=[_one_line_errors],
    )
    _register_tools(server, docs)
    server.docs = docs  # for callers that want to close it
    if warm:
        threading.Thread(target=docs.warm, name="fsdp-skill-index", daemon=True).start()
    return server


def _answer(fn: Callable[..., Answer], *args: Any) -> "CallToolResult":
    """Run a tool body: a result with text and structured content, or an MCP error result."""
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent

    try:
        out = fn(*args)
    except ToolFailure as exc:
        raise ToolError(_one_line(exc)) from None
    except Exception as exc:  # noqa: BLE001 - never a traceback, never a dead server
        raise ToolError(f"{type(exc).__name__}: {_one_line(exc)}") from None
    return CallToolResult(
        content=[TextContent(type="text", text=out["markdown"])],
        structured_content=out["structured"],
    )


def _register_tools(server: "MCPServer", docs: Docs) -> None:
    """The four tools; the SDK reads their signatures (types, bounds, descriptions) for the
    input schemas it publishes and checks calls against."""
    from mcp_types import CallToolResult, ToolAnnotations
    from pydantic import Field

    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )

    @server.tool(description=SEARCH_DESCRIPTION, annotations=read_only)
    def search_docs(
        query: Annotated[
            str, Field(description="The question, API name, or pasted error message / traceback.")
        ],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many hits.")] = 5,
        source: Annotated[
            Literal["guide", "docstring", "web"] | None,
            Field(description="Only guides, API docstrings or scraped docs pages; omit for all."),
        ] = None,
        page: Annotated[
            int, Field(ge=1, description="Result page, 1-based: page 2 gives hits k+1..2k.")
        ] = 1,
    ) -> CallToolResult:
        return _answer(docs.search, query, k, source, page)

    @server.tool(description=READ_DESCRIPTION, annotations=read_only)
    def read_reference(
        path_or_id: Annotated[
            str,
            Field(description="A search hit's id, path#anchor or url, or a qualified API name."),
        ],
        max_chars: Annotated[
            int, Field(ge=500, le=MAX_READ_CHARS, description="Cap on the text returned.")
        ] = 20000,
    ) -> CallToolResult:
        return _answer(docs.read, path_or_id, max_chars)

    @server.tool(description=LIST_EXAMPLES_DESCRIPTION, annotations=read_only)
    def list_examples() -> CallToolResult:
        def run() -> Answer:
            examples = docs.examples()
            return {"markdown": _examples_markdown(examples), "structured": {"examples": examples}}

        return _answer(run)

    @server.tool(description=GET_EXAMPLE_DESCRIPTION, annotations=read_only)
    def get_example(
        name: Annotated[
            str, Field(description="Script name from list_examples, e.g. 'fsdp2_train'.")
        ],
    ) -> CallToolResult:
        def run() -> Answer:
            e = docs.example(name)
            return {"markdown": _example_markdown(e), "structured": e}

        return _answer(run)


def _usage_error(message: str) -> int:
    print(f"fsdp-skill mcp: error: {message}", file=sys.stderr)
    return 2


HELP = """usage: fsdp-skill mcp

Serve the skill's search, references and examples to an agent over MCP (stdio): tools
search_docs, read_reference, list_examples, get_example. Register it with your agent, e.g.
    claude mcp add pytorch-fsdp -- fsdp-skill mcp
The index is built on first use (progress on stderr); FSDP_SKILL_ROOT / FSDP_SKILL_DATA_DIR
choose the skill and its data folder as for every command."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(HELP)
        return 0
    if argv:
        return _usage_error(f"unexpected argument {argv[0]!r} (it takes none; see --help)")
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:  # the MCP SDK is an optional extra: say how to install it
        print(
            "fsdp-skill mcp: error: the MCP server needs the MCP Python SDK: "
            f"{sys.executable} -m pip install 'mcp>=2,<3'",
            file=sys.stderr,
        )
        return 1
    if sys.stdin is None or sys.stdout is None:
        print(
            "fsdp-skill mcp: error: needs stdin and stdout (it speaks MCP over them)",
            file=sys.stderr,
        )
        return 1
    server = None
    try:
        server = build_server()
        server.run("stdio")
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        print(f"fsdp-skill mcp: error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.docs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
