"""Render one torch docstring (Google style mixed with reStructuredText) as clean markdown.

Handles what the distributed stack's docstrings use: Google sections (`Args:`, `Returns:`,
`Example::` ...), rst directives (`.. note::`, `.. warning::`, `.. code-block::`), literal
blocks after `::`, `>>>` doctests, grid tables, bulleted and numbered lists, inline roles and
links. Docstrings are not full rst documents (docutils would choke on the Google sections), so
this is a line-based renderer: `render_lines` offers each line to one handler per construct, in
a fixed order, and the first handler that recognises the line consumes its whole block.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable

# `heading(title, underline_char)` -> markdown lines for an rst section title.
Heading = Callable[[str, str], list[str]]

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|ref|any|paramref):`(~?)([^`<]+?)(?:\s*<([^>]+)>)?`"
)
_RST_LINK = re.compile(r"`([^`<]+?)\s*<([^>]+)>`__?")
_DOUBLE_TICK = re.compile(r"``(.+?)``")
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword [Aa]rgs|Keyword [Aa]rguments|Kwargs|Other [Pp]arameters|"
    r"Returns?|Yields?|Raises|Attributes|Examples?|Example usage|Note|Notes|Warnings?|See [Aa]lso|"
    r"Shape|Type|Return type)\s*(::?)\s*$"
)
_DIRECTIVE = re.compile(r"^\.\.\s+([\w-]+)\s*::\s*(.*)$")
_ARG_ITEM = re.compile(
    r"^\*{0,2}(\w[\w.,\s*]*?)\*{0,2}\s*(\(([^)]*(?:\([^)]*\)[^)]*)*)\))?\s*:(?:\s+|$)(.*)$"
)
_XDOCTEST = re.compile(r"#\s*(x?doctest|type):.*$")
# `1. text`, `10. text`, `2) text`: an enumerated list item (the number is kept).
_ORDERED = re.compile(r"^(\d+)[.)]\s+(\S.*)$")
# The top and bottom border of an rst grid table: `+-----+----+` (`=` under the header).
_GRID_BORDER = re.compile(r"^\+(?:[-=]+\+)+$")
_UNDERLINE_CHARS = "=-~+^\"'`#*"
_ADMONITIONS = {
    "note": "Note",
    "warning": "Warning",
    "tip": "Tip",
    "important": "Important",
    "seealso": "See also",
    "caution": "Caution",
    "danger": "Danger",
    "hint": "Hint",
    "attention": "Attention",
    "deprecated": "Deprecated",
    "versionadded": "Added in",
    "versionchanged": "Changed in",
}
_ARG_SECTIONS = {
    "args",
    "arguments",
    "parameters",
    "params",
    "keyword args",
    "keyword arguments",
    "kwargs",
    "other parameters",
    "attributes",
    "raises",
}
_NOTE_SECTIONS = {"note", "notes", "warning", "warnings"}
_CODE_DIRECTIVES = {
    "code-block",
    "code",
    "sourcecode",
    "testcode",
    "doctest",
    "testsetup",
    "testoutput",
}
# Directives whose argument is the code's language; the others hold python.
_LANG_DIRECTIVES = {"code-block", "code", "sourcecode"}


def inline(text: str) -> str:
    """Roles become code, rst links become markdown links, ``literals`` become `literals`."""

    def role(m: re.Match[str]) -> str:
        tilde, target, alt = m.groups()
        name = (alt or target).strip()
        if tilde:
            name = name.rsplit(".", 1)[-1]
        return f"`{name}`"

    text = _ROLE.sub(role, text)
    text = _RST_LINK.sub(lambda m: f"[{m.group(1).strip()}]({m.group(2).strip()})", text)
    return _DOUBLE_TICK.sub(lambda m: f"`{m.group(1)}`", text)


# --- line helpers -------------------------------------------------------------------------


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _dedent(lines: list[str]) -> list[str]:
    width = min((_indent(x) for x in lines if x.strip()), default=0)
    return [x[width:] for x in lines]


def _trim_end(lines: list[str]) -> list[str]:
    """The lines without their trailing blank lines."""
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def _trim(lines: list[str]) -> list[str]:
    """The lines without their leading and trailing blank lines."""
    lines = _trim_end(lines)
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    return lines[start:]


def _take_block(lines: list[str], i: int, base: int) -> tuple[list[str], int]:
    """Lines from i on that are blank or indented deeper than `base`, and the index after them.
    Trailing blank lines are not taken, so the caller still sees the blank that ends the block."""
    j = i
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
        j += 1
    block = _trim_end(lines[i:j])
    return block, i + len(block)


def _is_underline(line: str, title: str) -> bool:
    s = line.strip()
    return len(s) >= max(3, len(title.strip())) and len(set(s)) == 1 and s[0] in _UNDERLINE_CHARS


def _ordered(stripped: str, interrupting: bool) -> tuple[str, str] | None:
    """(number, text) of an enumerated item. Inside a running paragraph only a list's first
    number starts one (`1`, as in CommonMark, or `0` for a zero-based list), so prose wrapped
    onto a line like `8. Otherwise` stays prose."""
    m = _ORDERED.match(stripped)
    if m is None or (interrupting and m.group(1) not in ("0", "1")):
        return None
    return m.group(1), m.group(2)


def _item(stripped: str, interrupting: bool) -> tuple[str, str] | None:
    """(markdown marker, text) when the line starts a list item: `- ` or `N. `.

    `interrupting`: the line would cut a running paragraph short. Only `- `, `* `, `0.` and
    `1.` do that; a `+ ` or `8. ` there is more often a wrapped formula or number than a list."""
    if stripped.startswith(("- ", "* ")) or (not interrupting and stripped.startswith("+ ")):
        return "- ", stripped[2:].strip()
    ordered = _ordered(stripped, interrupting)
    return (f"{ordered[0]}. ", ordered[1]) if ordered else None


# --- code ---------------------------------------------------------------------------------


def _drop_doctest_directive(line: str) -> str:
    """`>>> x = f()  # xdoctest: +SKIP` -> `>>> x = f()`: test-runner notes mean nothing to a
    reader (nor do `# type:` comments)."""
    if "doctest" in line or "# type:" in line:
        return _XDOCTEST.sub("", line).rstrip()
    return line


def _fence(code_lines: list[str], lang: str = "python") -> list[str]:
    code = [x.rstrip() for x in _dedent(code_lines)]
    if lang == "python":
        code = [_drop_doctest_directive(x) for x in code]
        # A bare prompt is the doctest's way of writing a blank line.
        code = [x for x in code if x.strip() not in (">>>", "...")]
    code = _trim(code)
    if not code:
        return []
    return [f"```{lang}", *code, "```", ""]


def _guess_lang(code_lines: list[str]) -> str:
    text = "\n".join(code_lines)
    if text.lstrip().startswith(("$ ", "torchrun", "python -m", "export ", "srun ")):
        return "bash"
    return "python"


# --- blocks that nest other markdown ------------------------------------------------------


def _quote(label: str, inner: list[str]) -> list[str]:
    """A labelled blockquote; the label shares the first line unless that line opens a block
    (a fence, list or table) that must start a line of its own."""
    inner = _trim_end(inner)
    if not inner:
        return []
    first, rest = inner[0], inner[1:]
    if first and not (first.startswith(("```", "- ", "|")) or _ORDERED.match(first)):
        lines = [f"> **{label}:** {first}"]
    else:
        lines = [f"> **{label}:**", f"> {first}" if first else ">"]
    lines.extend(f"> {x}" if x else ">" for x in rest)
    return lines + [""]


def _render_args(lines: list[str]) -> list[str]:
    """`name (type): text` items -> `- **name** (*type*): text`, continuations joined."""
    out: list[str] = []
    item: list[str] | None = None
    lines = _dedent(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        m = _ARG_ITEM.match(line) if _indent(line) == 0 else None
        if m:
            if item:
                out.extend(item)
            name, _, typ, rest = m.groups()
            head = f"- **{name.strip()}**" + (f" (*{inline(typ.strip())}*)" if typ else "")
            item = [head + (f": {inline(rest.strip())}" if rest.strip() else ":")]
            body, i = _take_block(lines, i + 1, 0)
            if body:
                rendered = render_lines(_dedent(body))
                item.extend(("  " + x if x else "") for x in rendered)
            continue
        # A line that is not an item: keep it as prose.
        if item:
            out.extend(item)
            item = None
        out.append(inline(line.strip()))
        i += 1
    if item:
        out.extend(item)
    # Items of one list must not be separated by blank lines, or the list breaks apart.
    return _trim_end(out) + [""]


def _table_cells(line: str, cuts: list[int]) -> list[str] | None:
    """The text between the column boundaries of one grid-table line, or None when a
    boundary is not a `|`/`+` (a cell spanning columns, which markdown cannot show)."""
    if len(line) != cuts[-1] + 1 or any(line[c] not in "|+" for c in cuts):
        return None
    return [line[a + 1 : b] for a, b in zip(cuts, cuts[1:])]


def _grid_table(block: list[str]) -> list[str] | None:
    """An rst grid table as a markdown pipe table, or None where its shape is not a plain grid.

    Each row's lines are joined cell by cell. A row-spanning cell (a rule drawn under some
    columns only) ends the row for every column; the spanned cell is empty below.
    """
    rows = [x.strip() for x in block]
    if len(rows) < 3 or not _GRID_BORDER.match(rows[-1]):
        return None
    cuts = [k for k, c in enumerate(rows[0]) if c == "+"]
    table: list[list[str]] = []
    header_rows = 0
    cells: list[list[str]] | None = None
    for line in rows[1:]:
        segments = _table_cells(line, cuts)
        if segments is None:
            return None
        rules = [bool(s) and (set(s) == {"-"} or set(s) == {"="}) for s in segments]
        if any(rules):
            if not all(r or not s.strip() for r, s in zip(rules, segments)):
                return None
            if cells is not None:
                table.append([inline(" ".join(x.strip() for x in c if x.strip())) for c in cells])
                cells = None
            if "=" in line:
                header_rows = len(table)
            continue
        if cells is None:
            cells = [[] for _ in segments]
        for column, text in zip(cells, segments):
            column.append(text)
    if not table:
        return None
    # Markdown has one header row: stack a multi-row header into it, or promote the first row.
    header_rows = header_rows or 1
    header = [" ".join(filter(None, col)) for col in zip(*table[:header_rows])]

    def row(values: list[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return [row(header), row(["---"] * len(header)), *(row(r) for r in table[header_rows:]), ""]


# --- the handlers -------------------------------------------------------------------------


class _Renderer:
    """The state `render_lines`' handlers share: the input, the output so far, and the
    paragraph being collected (joined into one line when a blank line or a block ends it)."""

    def __init__(self, lines: list[str], heading: Heading | None) -> None:
        self.lines = lines
        self.heading = heading
        self.out: list[str] = []
        self.para: list[str] = []

    def flush(self) -> None:
        if self.para:
            text = inline(" ".join(x.strip() for x in self.para))
            # Prose that starts with "#" would become a markdown heading, and a chunk title.
            self.out.extend(("\\" + text if text.startswith("#") else text).split("\n"))
            self.out.append("")
            self.para.clear()


# A handler looks at line i; if it recognises its construct it writes the markdown and returns
# the index of the first line after it, otherwise it returns None and touches nothing.
Handler = Callable[[_Renderer, int], int | None]


def _blank(r: _Renderer, i: int) -> int | None:
    if r.lines[i].strip():
        return None
    r.flush()
    return i + 1


def _title(r: _Renderer, i: int) -> int | None:
    """An rst section title: a line over an underline of one repeated punctuation character."""
    lines, stripped = r.lines, r.lines[i].strip()
    if (
        r.para
        or i + 1 >= len(lines)
        or not _is_underline(lines[i + 1], stripped)
        # A rule is never a title itself (an overline, or a transition drawn as two rules).
        or _is_underline(lines[i], "xxx")
    ):
        return None
    char = lines[i + 1].strip()[0]
    r.out.extend(r.heading(stripped, char) if r.heading else [f"**{stripped}**", ""])
    return i + 2


def _doctest(r: _Renderer, i: int) -> int | None:
    """`>>>` lines and their output, up to the next blank or less indented line."""
    lines = r.lines
    if not lines[i].strip().startswith(">>>"):
        return None
    r.flush()
    base = _indent(lines[i])
    j = i
    while j < len(lines) and lines[j].strip() and _indent(lines[j]) >= base:
        j += 1
    r.out.extend(_fence(lines[i:j]))
    return j


def _code_directive(name: str, arg: str, body: list[str]) -> list[str]:
    return _fence(body, arg if name in _LANG_DIRECTIVES and arg else "python")


def _admonition(name: str, arg: str, body: list[str]) -> list[str]:
    # `.. versionadded:: 2.4` carries a version, not text; `.. note:: text` starts the text.
    versioned = name.startswith("version")
    label = _ADMONITIONS[name] + (f" {arg}" if versioned else "")
    text = ([arg] if arg and not versioned else []) + body
    return _quote(label, render_lines(_dedent(text)))


def _math(body: list[str]) -> list[str]:
    return ["```", *(x.strip() for x in body if x.strip()), "```", ""]


def _directive(r: _Renderer, i: int) -> int | None:
    """`.. name:: arg` with its options and indented content."""
    lines, line = r.lines, r.lines[i]
    m = _DIRECTIVE.match(line.strip())
    if m is None:
        return None
    r.flush()
    name, arg = m.group(1).lower(), m.group(2).strip()
    base = _indent(line)
    # Directive options (`:linenos:`) precede the content.
    j = i + 1
    while j < len(lines) and lines[j].strip().startswith(":") and _indent(lines[j]) > base:
        j += 1
    body, j = _take_block(lines, j, base)
    if name in _CODE_DIRECTIVES:
        r.out.extend(_code_directive(name, arg, body))
    elif name in _ADMONITIONS:
        r.out.extend(_admonition(name, arg, body))
    elif name == "math":
        r.out.extend(_math(body))
    # Other directives (autosummary, image, ...) carry nothing for a reader.
    return j


def _example_section(title: str, colons: str, body: list[str]) -> list[str]:
    """`Example::` holds code; `Example:` holds prose that may contain doctests."""
    has_doctest = any(x.strip().startswith(">>>") for x in body)
    content = _fence(body) if colons == "::" and not has_doctest else render_lines(_dedent(body))
    return [f"**{title}:**", "", *content]


def _section(r: _Renderer, i: int) -> int | None:
    """A Google section: `Args:`, `Returns:`, `Example::`, `Note:` ... and its indented body."""
    line = r.lines[i]
    m = _SECTION.match(line.strip())
    if m is None or r.para:
        return None
    title, colons = m.groups()
    body, j = _take_block(r.lines, i + 1, _indent(line))
    key = title.lower()
    if key.startswith("example") or (colons == "::" and key not in _ARG_SECTIONS):
        r.out.extend(_example_section(title, colons, body))
    elif key in _ARG_SECTIONS:
        r.out.extend([f"**{title}:**", "", *_render_args(body)])
    elif key in _NOTE_SECTIONS:
        label = title.rstrip("s") if key.endswith("s") else title
        r.out.extend(_quote(label, render_lines(_dedent(body))))
    else:
        r.out.extend([f"**{title}:**", "", *render_lines(_dedent(body))])
    return j


def _table(r: _Renderer, i: int) -> int | None:
    """An rst grid table; one whose shape a pipe table cannot hold is kept as drawn."""
    lines = r.lines
    if not _GRID_BORDER.match(lines[i].strip()):
        return None
    r.flush()
    j = i
    while j < len(lines) and lines[j].strip()[:1] in ("+", "|"):
        j += 1
    r.out.extend(_grid_table(lines[i:j]) or _fence(lines[i:j], "text"))
    return j


def _opens_block(lines: list[str], k: int) -> bool:
    """Whether line k starts a construct of its own rather than continuing a paragraph."""
    s = lines[k].strip()
    return bool(
        s.startswith(">>>")
        or s.endswith("::")
        or _DIRECTIVE.match(s)
        or _SECTION.match(s)
        or _GRID_BORDER.match(s)
        or _item(s, interrupting=False)
        or (k + 1 < len(lines) and _is_underline(lines[k + 1], s))
    )


def _item_text(lines: list[str], i: int, first: str) -> tuple[str, int]:
    """An item's first paragraph: its line, the deeper-indented lines under it, and lines at
    the marker's own indent that merely wrap the text (`1. The module must ...` /
    `or buffers ...`). Stops at a blank line, a nested item or another construct."""
    base = _indent(lines[i])
    text = [first]
    j = i + 1
    while j < len(lines) and lines[j].strip():
        s, indent = lines[j].strip(), _indent(lines[j])
        if indent > base and _item(s, interrupting=True):
            break
        if indent < base or (indent == base and _opens_block(lines, j)):
            break
        text.append(s)
        j += 1
    return " ".join(text), j


def _interrupts_paragraph(line: str) -> bool:
    """Whether a markdown line starts a block even straight after a paragraph line: a fence,
    a list item or a blockquote."""
    return line.startswith(("```", "- ", ">")) or bool(_ORDERED.match(line))


def _list_item(r: _Renderer, i: int) -> int | None:
    """A bulleted (`-`, `*`, `+`) or numbered (`1.`, `10.`, `2)`) item: its text, then what is
    indented under it (a nested list, a literal block, more paragraphs) kept under the item."""
    lines, line = r.lines, r.lines[i]
    item = _item(line.strip(), interrupting=bool(r.para))
    if item is None:
        return None
    r.flush()
    marker, first = item
    text, j = _item_text(lines, i, first)
    body, j = _take_block(lines, j, _indent(line))
    body = _dedent(body)
    if text.endswith("::") and body:
        # `- text::` introduces a literal block, as a paragraph would.
        text = text[:-3] if text.endswith(" ::") else text[:-1]
        nested = _fence(body, _guess_lang(body))
    else:
        nested = render_lines(body)
    r.out.append(marker + inline(text))
    nested = _trim_end(nested)
    if nested and not _interrupts_paragraph(nested[0]):
        # A nested paragraph right under the text would read as more of that text.
        r.out.append("")
    # Nested lines are indented past the marker (`- `, `10. `) so they belong to the item.
    pad = " " * len(marker)
    r.out.extend(pad + x if x else "" for x in nested)
    following = lines[j].strip() if j < len(lines) else ""
    nxt = _item(following, interrupting=False)
    # Consecutive items of one kind form one tight list; anything else needs a blank line.
    if nxt is None or (nxt[0] == "- ") != (marker == "- "):
        r.out.append("")
    return j


def _literal_block(r: _Renderer, i: int) -> int | None:
    """`text::` (or a bare `::`) followed by an indented literal block."""
    lines, line = r.lines, r.lines[i]
    stripped = line.strip()
    if not stripped.endswith("::") or stripped.startswith(".."):
        return None
    # rst keeps one colon of `text::`, and none of `text ::`.
    if stripped != "::":
        r.para.append(stripped[:-3] if stripped.endswith(" ::") else stripped[:-1])
    r.flush()
    body, j = _take_block(lines, i + 1, _indent(line))
    r.out.extend(_fence(body, _guess_lang(_dedent(body))))
    return j


def _looks_like_code(body: list[str]) -> bool:
    """An indented block that parses as Python and assigns or calls something on two or more
    lines: code written without `::` (a "Usage:" block), which read as prose would come out as
    one run-on line, and its `# comment` lines as markdown headings."""
    code = [x for x in _dedent(body) if x.strip() and not x.strip().startswith("#")]
    if len(code) < 2 or sum("=" in x or "(" in x for x in code) < 2:
        return False
    try:
        ast.parse("\n".join(_dedent(body)))
    except SyntaxError:
        return False
    return True


def _code_after_colon(r: _Renderer, i: int) -> int | None:
    """`Usage Patterns:` (any line ending in one colon) followed by an indented block of code."""
    lines, line = r.lines, r.lines[i]
    stripped = line.strip()
    if not stripped.endswith(":") or stripped.endswith("::") or i + 1 >= len(lines):
        return None
    body, j = _take_block(lines, i + 1, _indent(line))
    if not body or not _looks_like_code(body):
        return None
    r.para.append(stripped)
    r.flush()
    r.out.extend(_fence(body))
    return j


def _paragraph(r: _Renderer, i: int) -> int:
    """Any other line is prose: it joins the running paragraph (an indented rst block quote
    included: it reads as prose)."""
    r.para.append(r.lines[i])
    return i + 1


# Order matters: a title outranks a paragraph line, a doctest or directive can interrupt a
# paragraph, a Google section only starts one, and a line no other handler takes is prose.
_HANDLERS: tuple[Handler, ...] = (
    _blank,
    _title,
    _doctest,
    _directive,
    _section,
    _table,
    _list_item,
    _literal_block,
    _code_after_colon,
    _paragraph,
)


def render_lines(lines: list[str], heading: Heading | None = None) -> list[str]:
    """Render dedented docstring lines to markdown lines.

    `heading(title, char)` renders an rst section title underlined with `char`; without it the
    title becomes bold text.
    """
    r = _Renderer(lines, heading)
    i = 0
    while i < len(lines):
        i = next(j for j in (h(r, i) for h in _HANDLERS) if j is not None)
    r.flush()
    return r.out


def render(doc: str, level: int = 2, objects: str | None = None) -> str:
    """Markdown for a raw `__doc__` string whose entry heading is at `level`.

    rst section titles inside the docstring become sub-headings; they still document the same
    API, so they repeat its `objects` comment.
    """
    order: list[str] = []

    def heading(title: str, char: str) -> list[str]:
        # rst ranks titles by the order their underline characters first appear.
        if char not in order:
            order.append(char)
        lines = ["#" * min(6, level + 1 + order.index(char)) + " " + inline(title)]
        if objects:
            lines.append(f"<!-- objects: {objects} -->")
        return lines + [""]

    lines = inspect.cleandoc(doc).splitlines()
    out = render_lines(lines, heading)
    # Collapse runs of blank lines.
    clean: list[str] = []
    for x in out:
        if x.strip() or (clean and clean[-1].strip()):
            clean.append(x.rstrip())
    while clean and not clean[-1]:
        clean.pop()
    return "\n".join(clean) + "\n"
