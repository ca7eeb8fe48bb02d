"""Render one torch docstring (Google style mixed with reStructuredText) as clean markdown.

Handles what the distributed stack's docstrings use: Google sections (`Args:`, `Returns:`,
`Example::` ...), rst directives (`.. note::`, `.. warning::`, `.. code-block::`), literal
blocks after `::`, `>>>` doctests, inline roles and links. Docstrings are not full rst
documents (docutils would choke on the Google sections), so this is a line-based renderer.
"""

import inspect
import re

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
_CODE_DIRECTIVES = {
    "code-block",
    "code",
    "sourcecode",
    "testcode",
    "doctest",
    "testsetup",
    "testoutput",
}


def inline(text):
    """Roles become code, rst links become markdown links, ``literals`` become `literals`."""

    def role(m):
        tilde, target, alt = m.groups()
        name = (alt or target).strip()
        if tilde:
            name = name.rsplit(".", 1)[-1]
        return f"`{name}`"

    text = _ROLE.sub(role, text)
    text = _RST_LINK.sub(lambda m: f"[{m.group(1).strip()}]({m.group(2).strip()})", text)
    return _DOUBLE_TICK.sub(lambda m: f"`{m.group(1)}`", text)


def _indent(line):
    return len(line) - len(line.lstrip())


def _dedent(lines):
    width = min((_indent(x) for x in lines if x.strip()), default=0)
    return [x[width:] for x in lines]


def _take_block(lines, i, base):
    """Lines from i on that are blank or indented deeper than `base`."""
    j = i
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
        j += 1
    block = lines[i:j]
    while block and not block[-1].strip():
        block.pop()
        j -= 1
    return block, j


def _fence(code_lines, lang="python"):
    code = [x.rstrip() for x in _dedent(code_lines)]
    code = (
        [
            x
            for x in (
                _XDOCTEST.sub("", x).rstrip() if "doctest" in x or "# type:" in x else x
                for x in code
            )
            if x.strip() != ">>>" and x.strip() != "..."
        ]
        if lang == "python"
        else code
    )
    while code and not code[0].strip():
        code.pop(0)
    while code and not code[-1].strip():
        code.pop()
    if not code:
        return []
    return [f"```{lang}", *code, "```", ""]


def _guess_lang(code_lines):
    text = "\n".join(code_lines)
    if text.lstrip().startswith(("$ ", "torchrun", "python -m", "export ", "srun ")):
        return "bash"
    return "python"


def _render_args(lines):
    """`name (type): text` items -> `- **name** (*type*): text`, continuations joined."""
    out, item = [], None
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
    while out and not out[-1].strip():
        out.pop()
    return out + [""]


def _is_underline(line, title):
    s = line.strip()
    return len(s) >= max(3, len(title.strip())) and len(set(s)) == 1 and s[0] in _UNDERLINE_CHARS


_UNDERLINE_CHARS = "=-~+^\"'`#*"


def render_lines(lines, heading=None):
    """Render dedented docstring lines to markdown lines.

    `heading(title, char)` renders an rst section title underlined with `char`; without it the
    title becomes bold text.
    """
    out, para = [], []

    def flush():
        if para:
            out.extend(inline(" ".join(x.strip() for x in para)).split("\n"))
            out.append("")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        base = _indent(line)
        if not stripped:
            flush()
            i += 1
            continue
        if (
            not para
            and i + 1 < len(lines)
            and _is_underline(lines[i + 1], stripped)
            and not _is_underline(line, "xxx")
        ):
            out.extend(
                heading(stripped, lines[i + 1].strip()[0]) if heading else [f"**{stripped}**", ""]
            )
            i += 2
            continue
        if stripped.startswith(">>>"):
            flush()
            j = i
            while j < len(lines) and lines[j].strip() and _indent(lines[j]) >= base:
                j += 1
            out.extend(_fence(lines[i:j]))
            i = j
            continue
        m = _DIRECTIVE.match(stripped)
        if m:
            flush()
            name, arg = m.group(1).lower(), m.group(2).strip()
            # Directive options (`:linenos:`) precede the content.
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith(":") and _indent(lines[j]) > base:
                j += 1
            body, i = _take_block(lines, j, base)
            if name in _CODE_DIRECTIVES:
                lang = arg if name in ("code-block", "code", "sourcecode") and arg else "python"
                out.extend(_fence(body, lang))
            elif name in _ADMONITIONS:
                label = _ADMONITIONS[name] + (f" {arg}" if name.startswith("version") else "")
                inner = render_lines(
                    _dedent(([arg] if arg and not name.startswith("version") else []) + body)
                )
                out.extend(_quote(label, inner))
            elif name in ("math",):
                out.extend(["```", *(x.strip() for x in body if x.strip()), "```", ""])
            # Other directives (autosummary, image, testsetup...) carry nothing for a reader.
            continue
        m = _SECTION.match(stripped)
        if m and not para:
            title = m.group(1)
            body, i = _take_block(lines, i + 1, base)
            key = title.lower()
            if key.startswith("example") or m.group(2) == "::" and key not in _ARG_SECTIONS:
                out.append(f"**{title}:**")
                out.append("")
                if any(x.strip().startswith(">>>") for x in body) or m.group(2) == "::":
                    out.extend(
                        _fence(body)
                        if not any(x.strip().startswith(">>>") for x in body)
                        else render_lines(_dedent(body))
                    )
                else:
                    out.extend(render_lines(_dedent(body)))
            elif key in _ARG_SECTIONS:
                out.extend([f"**{title}:**", ""])
                out.extend(_render_args(body))
            elif key in ("note", "notes", "warning", "warnings"):
                out.extend(
                    _quote(
                        title.rstrip("s") if key.endswith("s") else title,
                        render_lines(_dedent(body)),
                    )
                )
            else:
                out.extend([f"**{title}:**", ""])
                out.extend(render_lines(_dedent(body)))
            continue
        if (
            stripped.startswith(("- ", "* ", "+ "))
            or stripped[:3].rstrip(".").isdigit()
            and stripped[1:3] in (". ", ") ")
        ):
            flush()
            # A list item: its own continuation lines are indented past the bullet.
            body, j = _take_block(lines, i + 1, base)
            text = " ".join(
                [stripped[2:].strip()]
                + [x.strip() for x in body if x.strip() and not x.strip().startswith(("- ", "* "))]
            )
            nested = [x for x in body if x.strip().startswith(("- ", "* "))]
            if nested:
                # Keep nested bullets nested.
                sub_start = next(
                    k for k, x in enumerate(body) if x.strip().startswith(("- ", "* "))
                )
                text = " ".join(
                    [stripped[2:].strip()] + [x.strip() for x in body[:sub_start] if x.strip()]
                )
                sub = render_lines(_dedent(body[sub_start:]))
                out.append(f"{' ' * 0}- {inline(text)}")
                out.extend(("  " + x if x else x) for x in sub if x)
            else:
                out.append(f"- {inline(text)}")
            i = j
            if i >= len(lines) or not lines[i].strip().startswith(("- ", "* ", "+ ")):
                out.append("")
            continue
        if stripped.endswith("::") and not stripped.startswith(".."):
            # Paragraph introducing a literal block.
            if stripped != "::":
                para.append(stripped[:-1] if not stripped.endswith(" ::") else stripped[:-3])
            flush()
            body, i = _take_block(lines, i + 1, base)
            out.extend(_fence(body, _guess_lang(_dedent(body))))
            continue
        if base > 0 and not para and out and out[-1] == "":
            # An indented block that is not a literal block: rst block quote; keep as prose.
            para.append(stripped)
            i += 1
            continue
        para.append(line)
        i += 1
    flush()
    return out


def _quote(label, inner):
    inner = [x for x in inner]
    while inner and not inner[-1].strip():
        inner.pop()
    if not inner:
        return []
    first = inner[0]
    lines = [
        f"> **{label}:** {first}"
        if first and not first.startswith(("```", "- "))
        else f"> **{label}:**"
    ]
    if not (first and not first.startswith(("```", "- "))):
        lines.append(f"> {first}" if first else ">")
    lines.extend(f"> {x}" if x else ">" for x in inner[1:])
    return lines + [""]


def render(doc, level=2, objects=None):
    """Markdown for a raw `__doc__` string whose entry heading is at `level`.

    rst section titles inside the docstring become sub-headings; they still document the same
    API, so they repeat its `objects` comment.
    """
    order = []

    def heading(title, char):
        if char not in order:
            order.append(char)
        lines = ["#" * min(6, level + 1 + order.index(char)) + " " + inline(title)]
        if objects:
            lines.append(f"<!-- objects: {objects} -->")
        return lines + [""]

    lines = inspect.cleandoc(doc).splitlines()
    out = render_lines(lines, heading)
    # Collapse runs of blank lines.
    clean = []
    for x in out:
        if x.strip() or (clean and clean[-1].strip()):
            clean.append(x.rstrip())
    while clean and not clean[-1]:
        clean.pop()
    return "\n".join(clean) + "\n"
