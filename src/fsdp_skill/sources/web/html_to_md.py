"""Sphinx HTML (pytorch_sphinx_theme2, older pytorch_sphinx_theme) -> one references/ markdown page.

The output follows references/README.md: YAML front matter, `#` headings with
`<!-- objects: -->` / `<!-- anchor: -->` comments, API entries as a heading named by the
qualified name followed by a fenced signature.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from bs4 import BeautifulSoup, Comment, NavigableString, PageElement, Tag

from fsdp_skill.pages import format_page

# Page furniture that can sit inside the article on some theme versions; dropped before
# conversion so none of it reaches the text.
FURNITURE = ", ".join(
    [
        "script",
        "style",
        "noscript",
        "template",
        "nav",
        "footer",
        "form",
        "button",
        "input",
        "meta",
        "link",
        "img",
        "svg",
        "iframe",
        "a.headerlink",
        "span.viewcode-link",
        "div.searchbox",
        "#searchbox",
        ".rating",
        ".feedback",
        ".bd-breadcrumbs",
        ".pytorch-breadcrumbs",
        ".breadcrumb",
        ".prev-next-area",
        ".prev-next-footer",
        ".rst-footer-buttons",
        ".pytorch-call-to-action-links",
        ".sphx-glr-download-link-note",
        ".sphx-glr-footer",
        ".sphx-glr-signature",
        ".sphx-glr-timing",
        ".sphx-glr-script-out-caption",
    ]
)
BLOCK_TAGS = {
    "p",
    "div",
    "section",
    "article",
    "aside",
    "dl",
    "dt",
    "dd",
    "ul",
    "ol",
    "li",
    "table",
    "pre",
    "blockquote",
    "figure",
    "figcaption",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "details",
    "summary",
    "header",
    "main",
    "center",
}
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
DATE_LINE_PREFIXES = ("Created On:", "Last Updated On:", "Last Updated:", "Created On :")
# Sphinx "default" highlighting is Python (with or without >>> prompts).
LANG_ALIASES = {
    "default": "python",
    "python3": "python",
    "py": "python",
    "none": "text",
    "ipython3": "python",
    "ipython": "python",
    "sh": "shell",
    "console": "shell",
}
TITLE_SUFFIX_WORD = "documentation"
# Sphinx separates a field item's name and type from its text with an en dash.
SEP_DASH = "\u2013"


# The converter recurses once or more per element level; real docs pages nest 26 deep. Deeper
# pages are refused before conversion so a hostile one gives an error, not a RecursionError.
MAX_DEPTH = 150
# Control characters from a fetched page would reach an agent's terminal through search output
# (ESC starts terminal escape sequences, RLO and the other bidi controls reorder what is shown):
# C0 except tab and newline, DEL, C1, and the Unicode bidi embedding, override and isolate marks.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def strip_controls(text: str) -> str:
    """`text` without terminal and bidi control characters (tab and newline stay)."""
    return _CONTROL.sub("", text)


class ConversionError(ValueError):
    """The HTML is not a docs page we can convert (no main article, no title, ...)."""


@dataclass
class ConvertedPage:
    title: str
    markdown: str
    objects: list[str] = field(default_factory=list)  # every object the page's headings carry


def find_article(soup: BeautifulSoup) -> Tag:
    """The main article: pydata-based theme first, then the older theme's #pytorch-article."""
    article = soup.select_one("article.bd-article")
    if article is None:
        article = soup.select_one("#pytorch-article")
    if article is None:
        raise ConversionError("no main article (article.bd-article or #pytorch-article)")
    return article


def page_title(soup: BeautifulSoup, article: Tag) -> str:
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    head, sep, tail = title.rpartition(" \u2014 ")
    if sep and tail.strip().endswith(TITLE_SUFFIX_WORD):
        title = head
    if not title:
        h1 = article.find("h1")
        title = _squash(h1.get_text(" ")) if h1 else ""
    title = _squash(title.replace("\u00b6", "").rstrip("#").strip())
    if not title:
        raise ConversionError("page has no title")
    return title


def convert_page(
    html: bytes | str,
    *,
    page: str,
    url: str,
    torch_version: str,
    category: str | None = None,
    anchor_names: dict[str, list[str]] | None = None,
    api_names: set[str] | None = None,
) -> ConvertedPage:
    """Convert one HTML page.

    `anchor_names` maps an element id to the inventory names whose URL points at it, so
    aliases and module targets end up in `<!-- objects: -->` of the heading that owns them.
    `api_names` (every API object of the docs' inventory) lets a prose section carry the APIs
    it is about: those it cross-references or names in inline code.
    """
    soup = BeautifulSoup(html, "lxml")
    if _depth(soup) > MAX_DEPTH:
        raise ConversionError(
            f"HTML nests more than {MAX_DEPTH} elements deep (docs pages nest "
            "under 30); refusing it"
        )
    try:
        article = find_article(soup)
        title = strip_controls(page_title(soup, article))
        for tag in article.select(FURNITURE):
            tag.decompose()
        for comment in article.find_all(string=lambda s: isinstance(s, Comment)):
            comment.extract()
        conv = _Converter(article, anchor_names, api_names)
        body = strip_controls(conv.render_children(article, level=0))
    except RecursionError:  # the depth cap should make this unreachable; keep it one line anyway
        raise ConversionError("HTML nests too deeply to convert") from None
    if not title.strip():
        raise ConversionError("page has no title")
    if not body.strip():
        raise ConversionError("main article is empty")
    front = {
        "title": title,
        "url": url,
        "source": "web",
        "torch_version": str(torch_version),
        "page": page,
    }
    if category:
        front["category"] = category
    if not body.lstrip().startswith("# "):
        body = f"# {title}\n\n{body}"
    md = format_page(front, f"\n{body.strip()}\n")
    return ConvertedPage(title=title, markdown=md, objects=conv.all_objects)


# --------------------------------------------------------------------------------------------


def _depth(root: Tag) -> int:
    """How many elements deep the tree nests, found without recursion."""
    deepest, stack = 0, [(root, 0)]
    while stack:
        node, d = stack.pop()
        if d > deepest:
            deepest = d
            if deepest > MAX_DEPTH:
                break
        stack.extend((c, d + 1) for c in node.contents if isinstance(c, Tag))
    return deepest


def _squash(text: str) -> str:
    return " ".join(text.split())


def _classes(tag: Tag) -> list[str]:
    return tag.get("class") or []


def _is_api_entry(tag: Tag) -> bool:
    cls = _classes(tag)
    return tag.name == "dl" and "py" in cls and len(cls) >= 2


def _is_section(tag: Tag) -> bool:
    return tag.name == "section" or (tag.name == "div" and "section" in _classes(tag))


def _fence(text: str, lang: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _indent(text: str, prefix: str, first: str | None = None) -> str:
    lines = text.split("\n")
    out = [(first if first is not None else prefix) + lines[0]]
    out += [(prefix + ln) if ln.strip() else "" for ln in lines[1:]]
    return "\n".join(out)


def _quote(text: str) -> str:
    return "\n".join(("> " + ln) if ln.strip() else ">" for ln in text.split("\n"))


def _code_span(text: str) -> str:
    text = _squash(text)
    if not text:
        return ""
    if "`" in text:
        return f"`` {text} ``"
    return f"`{text}`"


class _Converter:
    def __init__(
        self,
        article: Tag,
        anchor_names: dict[str, list[str]] | None,
        api_names: set[str] | None = None,
    ) -> None:
        self.anchor_names = anchor_names
        self.module_sections: dict[int, list[str]] = {}
        self.owned = self._collect_objects(article)
        if api_names:
            self._collect_mentions(article, api_names)
        self.all_objects: list[str] = []

    # ---- objects ----------------------------------------------------------------------------
    def _collect_objects(self, article: Tag) -> dict[int, list[str]]:
        """Map each heading owner (a section or an API entry's dl) to the objects it carries."""
        owned: dict[int, list[str]] = {}
        for el in article.find_all(id=True):
            ident = el["id"]
            if self.anchor_names is not None:
                names = list(self.anchor_names.get(ident, []))
            else:
                names = []
            if el.name == "dt" and "sig" in _classes(el) and ident not in names:
                names.insert(0, ident)
            if ident.startswith("module-") and not names:
                names = [ident[len("module-") :]]
            if not names:
                continue
            owner = self._owner(el)
            if ident.startswith("module-") and owner is not None and _is_section(owner):
                self.module_sections.setdefault(id(owner), []).extend(names)
            if owner is not None:
                bucket = owned.setdefault(id(owner), [])
                bucket.extend(n for n in names if n not in bucket)
        return owned

    def _module_of(self, sec: Tag) -> list[str]:
        """A prose sub-section of a module's documentation (torchrun's "Environment
        Variables") documents that module: it carries the module when it names nothing else."""
        for anc in sec.parents:
            if id(anc) in self.module_sections:
                return self.module_sections[id(anc)]
        return []

    def _collect_mentions(self, article: Tag, api_names: set[str]) -> None:
        """Give each prose section the APIs it refers to: cross-reference targets, link
        fragments naming an API, and inline code that spells an API's full name or a short
        name only one API has (`fully_shard`, `DistributedSampler`; never plain words
        like `save`). API entries keep just their own objects."""
        short: dict[str, set[str]] = {}
        for name in api_names:
            short.setdefault(name.rsplit(".", 1)[-1], set()).add(name)
        for el in article.find_all(["a", "code"]):
            name = None
            if el.name == "a":
                target = el.get("title") or el.get("href", "").partition("#")[2]
                name = target if target in api_names else None
            elif el.find_parent("pre") is None and el.find_parent("a") is None:
                text = el.get_text().strip().removesuffix("()")
                last = text.rsplit(".", 1)[-1]
                identifier = (
                    "_" in last
                    or any(c.isupper() for c in last[1:])
                    or (last.istitle() and len(last) > 3)
                )
                if text in api_names:
                    name = text
                elif identifier and len(short.get(last, ())) == 1:
                    name = next(iter(short[last]))
            if name is None:
                continue
            owner = self._owner(el)
            if owner is not None and _is_section(owner):
                bucket = self.owned.setdefault(id(owner), [])
                if name not in bucket:
                    bucket.append(name)

    @staticmethod
    def _owner(el: Tag) -> Tag | None:
        if _is_section(el):
            return el
        if el.name == "dt" and isinstance(el.parent, Tag) and _is_api_entry(el.parent):
            return el.parent
        for anc in el.parents:
            if _is_section(anc):
                return anc
            if anc.name == "dd" and isinstance(anc.parent, Tag) and _is_api_entry(anc.parent):
                return anc.parent
        return None

    def _meta_lines(self, owner: Tag, anchor: str | None) -> list[str]:
        lines = []
        objs = self.owned.get(id(owner), []) or self._module_of(owner)
        if objs:
            lines.append(f"<!-- objects: {', '.join(objs)} -->")
            self.all_objects.extend(o for o in objs if o not in self.all_objects)
        if anchor:
            lines.append(f"<!-- anchor: {anchor} -->")
        return lines

    # ---- blocks -----------------------------------------------------------------------------
    def render_children(self, tag: Tag, level: int) -> str:
        return "\n\n".join(b for b in self.blocks(tag.children, level) if b.strip())

    def blocks(self, nodes: Iterable, level: int) -> list[str]:
        out: list[str] = []
        run: list = []

        def flush() -> None:
            text = _squash("".join(self.inline(n) for n in run))
            run.clear()
            if text:
                out.append(text)

        for node in nodes:
            if isinstance(node, NavigableString):
                if isinstance(node, Comment):
                    continue
                run.append(node)
                continue
            if not isinstance(node, Tag):
                continue
            if node.name in BLOCK_TAGS or _is_section(node):
                flush()
                block = self.block(node, level)
                if block and block.strip():
                    out.append(block)
            else:
                run.append(node)
        flush()
        return out

    def block(self, tag: Tag, level: int) -> str:
        name, cls = tag.name, _classes(tag)
        if _is_section(tag):
            return self.section(tag)
        if name in HEADINGS:
            # A heading outside a section (e.g. a rubric-like raw heading): keep as bold text.
            return f"**{_squash(self.inline_children(tag))}**"
        if _is_api_entry(tag):
            return self.api_entry(tag, level + 1)
        if name == "dl" and "field-list" in cls:
            return self.field_list(tag)
        if name == "dl":
            return self.definition_list(tag, level)
        if name == "p":
            text = _squash(self.inline_children(tag))
            if text.startswith(DATE_LINE_PREFIXES):
                return ""
            if "rubric" in cls or "caption" in cls:
                return f"**{text}**" if text else ""
            return text
        if name == "div" and any(c.startswith("highlight-") for c in cls):
            return self.code_block(tag)
        if name == "pre":
            return _fence(tag.get_text().rstrip("\n"), "text")
        if name == "div" and "highlight" in cls:
            pre = tag.find("pre")
            return _fence(pre.get_text().rstrip("\n"), "text") if pre else ""
        if name == "div" and ("admonition" in cls or "topic" in cls):
            return self.admonition(tag, level)
        if name == "div" and {
            "deprecated",
            "versionchanged",
            "versionadded",
            "versionremoved",
        } & set(cls):
            return _quote(self.render_children(tag, level))
        if name in ("ul", "ol"):
            return self.list_block(tag, level)
        if name == "table":
            return self.table(tag)
        if name == "blockquote":
            return self.render_children(tag, level)
        if name == "hr":
            return ""
        if name == "figure":
            cap = tag.find("figcaption")
            return _squash(self.inline_children(cap)) if cap else ""
        if name == "div":
            text = _squash(tag.get_text(" "))
            if text.startswith(DATE_LINE_PREFIXES) and len(text) < 120:
                return ""
        return self.render_children(tag, level)

    def section(self, sec: Tag) -> str:
        heading = next((c for c in sec.children if isinstance(c, Tag) and c.name in HEADINGS), None)
        if heading is None:
            return self.render_children(sec, level=0)
        level = HEADINGS[heading.name]
        text = _squash(self.inline_children(heading)).rstrip("#\u00b6").strip()
        lines = ["#" * level + " " + text] + self._meta_lines(sec, sec.get("id"))
        rest = [c for c in sec.children if c is not heading]
        blocks = [b for b in self.blocks(rest, level) if b.strip()]
        objs = self.owned.get(id(sec), [])
        if objs and (not blocks or blocks[0].startswith("#")):
            # A module target with no prose of its own would give the chunker an empty
            # section, and the module would be carried by no chunk: state what it declares.
            blocks.insert(0, "Module " + ", ".join(_code_span(o) for o in objs) + ".")
        body = "\n\n".join(blocks)
        return "\n".join(lines) + ("\n\n" + body if body else "")

    def api_entry(self, dl: Tag, level: int) -> str:
        dts = [c for c in dl.children if isinstance(c, Tag) and c.name == "dt"]
        dds = [c for c in dl.children if isinstance(c, Tag) and c.name == "dd"]
        if not dts:
            return "\n\n".join(self.render_children(dd, level) for dd in dds)
        first = dts[0]
        qualname = first.get("id") or self._dt_name(first)
        sigs = [self.signature(dt) for dt in dts]
        head = "#" * min(level, 6) + " " + qualname
        lines = [head] + self._meta_lines(dl, first.get("id"))
        parts = ["\n".join(lines), _fence("\n".join(s for s in sigs if s), "python")]
        for dd in dds:
            body = self.render_children(dd, level)
            if body:
                parts.append(body)
        return "\n\n".join(parts)

    @staticmethod
    def _dt_name(dt: Tag) -> str:
        pre = dt.select_one(".sig-prename")
        nm = dt.select_one(".sig-name")
        return _squash((pre.get_text() if pre else "") + (nm.get_text() if nm else dt.get_text()))

    def signature(self, dt: Tag) -> str:
        parts: list[str] = []
        for node in dt.descendants:
            if isinstance(node, NavigableString) and not isinstance(node, Comment):
                parent = node.parent
                if parent is not None and "sig-return-icon" in _classes(parent):
                    parts.append(" -> ")
                else:
                    parts.append(str(node))
        sig = _squash("".join(parts))
        return sig.replace("( ", "(").replace(" )", ")").replace(" ,", ",")

    def code_block(self, div: Tag) -> str:
        lang = next(
            (c[len("highlight-") :] for c in _classes(div) if c.startswith("highlight-")), "text"
        )
        lang = LANG_ALIASES.get(lang, lang)
        pre = div.find("pre")
        if pre is None:
            return ""
        # Prompts (>>>, ...) and output lines stay exactly as the page shows them.
        return _fence(pre.get_text().rstrip("\n"), lang)

    def admonition(self, div: Tag, level: int) -> str:
        title_tag = div.find(class_=["admonition-title", "topic-title"], recursive=False)
        label = _squash(self.inline_children(title_tag)) if title_tag else ""
        if not label:
            kinds = [c for c in _classes(div) if c not in ("admonition", "topic")]
            label = kinds[0].replace("-", " ").capitalize() if kinds else "Note"
        rest = [c for c in div.children if c is not title_tag]
        body = "\n\n".join(b for b in self.blocks(rest, level) if b.strip())
        return _quote(f"**{label}**" + ("\n\n" + body if body else ""))

    def list_block(self, lst: Tag, level: int) -> str:
        ordered = lst.name == "ol"
        try:
            n = int(lst.get("start", 1))
        except ValueError:
            n = 1
        items = []
        for li in lst.find_all("li", recursive=False):
            marker = f"{n}. " if ordered else "- "
            n += 1
            body = self.render_children(li, level) or ""
            items.append(_indent(body, " " * len(marker), marker))
        # Loose lists when an item holds more than one block, so markdown keeps them apart.
        sep = "\n\n" if any("\n\n" in i for i in items) else "\n"
        return sep.join(items)

    def definition_list(self, dl: Tag, level: int) -> str:
        items, term = [], None
        for child in dl.children:
            if not isinstance(child, Tag):
                continue
            if child.name == "dt":
                if term is not None:
                    items.append(_indent(f"**{term}**", "  ", "- "))
                term = _squash(self.inline_children(child))
            elif child.name == "dd":
                body = self.render_children(child, level)
                head = f"**{term}**" if term else ""
                items.append(_indent(head + ("\n" + body if body else ""), "  ", "- "))
                term = None
        if term is not None:
            items.append(_indent(f"**{term}**", "  ", "- "))
        return "\n".join(items)

    # ---- field lists (Parameters, Returns, Raises, ...) --------------------------------------
    def field_list(self, dl: Tag) -> str:
        out, name = [], None
        for child in dl.children:
            if not isinstance(child, Tag):
                continue
            if child.name == "dt":
                name = _squash(child.get_text(" ")).rstrip(":").strip()
            elif child.name == "dd" and name:
                out.append(self.field(name, child))
                name = None
        return "\n\n".join(o for o in out if o)

    def field(self, name: str, dd: Tag) -> str:
        lower = name.lower()
        if lower in ("return type", "rtype", "type"):
            return (
                f"**{name}:** {_code_span(dd.get_text(' ').replace(' [', '[').replace('[ ', '['))}"
            )
        ul = dd.find("ul", recursive=False)
        if ul is not None:
            items = [self.field_item(li) for li in ul.find_all("li", recursive=False)]
            return f"**{name}:**\n\n" + "\n".join(_indent(i, "  ", "- ") for i in items if i)
        paras = [c for c in dd.children if isinstance(c, Tag)]
        if (
            lower in ("parameters", "keyword arguments", "raises", "variables", "other parameters")
            and len(paras) == 1
            and paras[0].name == "p"
        ):
            item = self.field_item(dd)
            return f"**{name}:**\n\n" + _indent(item, "  ", "- ")
        body = self.render_children(dd, 0)
        if "\n" not in body:
            return f"**{name}:** {body}"
        return f"**{name}:**\n\n{body}"

    def field_item(self, container: Tag) -> str:
        """`**name** (type) – text` of one Sphinx field item, with the type as code."""
        p = container.find("p", recursive=False)
        if p is not None:
            children = list(p.children)
            rest_blocks = [c for c in container.children if isinstance(c, Tag) and c is not p]
        else:
            # No paragraph: the text runs up to the first block, the blocks follow. Rendering the
            # blocks both inside the text and after it doubled them, and doubled the time per
            # level of nesting (a 20-deep field list took minutes).
            children, rest_blocks = [], []
            for c in container.children:
                if rest_blocks or (isinstance(c, Tag) and (c.name in BLOCK_TAGS or _is_section(c))):
                    rest_blocks.append(c)
                else:
                    children.append(c)
        first_tag = next((c for c in children if isinstance(c, Tag) or str(c).strip()), None)
        if not (isinstance(first_tag, Tag) and first_tag.name == "strong"):
            text = _squash("".join(self.inline(n) for n in children))
        else:
            pname = _squash(first_tag.get_text())
            after = children[children.index(first_tag) + 1 :]
            type_parts, desc_nodes, found = [], [], False
            for node in after:
                if found:
                    desc_nodes.append(node)
                    continue
                if isinstance(node, NavigableString) and SEP_DASH in node:
                    before, _, tail = str(node).partition(SEP_DASH)
                    type_parts.append(before)
                    desc_nodes.append(NavigableString(tail))
                    found = True
                else:
                    type_parts.append(node.get_text() if isinstance(node, Tag) else str(node))
            if not found:
                # No separator: everything after the name is description.
                desc_nodes, type_parts = after, []
            typ = _squash("".join(type_parts)).strip()
            if typ.startswith("(") and typ.endswith(")"):
                typ = typ[1:-1].strip()
            typ = typ.replace(" [", "[").replace("[ ", "[").replace(" ]", "]")
            desc = _squash("".join(self.inline(n) for n in desc_nodes))
            text = f"**{pname}**"
            if typ:
                text += f" ({_code_span(typ)})"
            if desc:
                text += f" \u2013 {desc}"
        extra = "\n\n".join(b for b in self.blocks(rest_blocks, 0) if b.strip())
        return text + ("\n\n" + extra if extra else "")

    # ---- tables -----------------------------------------------------------------------------
    def table(self, table: Tag) -> str:
        rows: list[list[str]] = []
        header_rows = 0
        for tr in table.find_all("tr"):
            if tr.find_parent("table") is not table:
                continue
            cells = []
            for cell in tr.find_all(["td", "th"], recursive=False):
                text = _squash(" ".join(self.blocks(cell.children, 0)).replace("\n", " "))
                text = text.replace("|", "\\|")
                try:
                    span = max(1, int(cell.get("colspan", 1)))
                except ValueError:
                    span = 1
                cells.extend([text] + [""] * (span - 1))
            if tr.parent is not None and tr.parent.name == "thead":
                header_rows += 1
            rows.append(cells)
        if not rows:
            return ""
        width = max(len(r) for r in rows)
        rows = [r + [""] * (width - len(r)) for r in rows]
        caption = table.find("caption")
        if header_rows:
            header, body = rows[0], rows[1:]
        else:
            header, body = [""] * width, rows
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * width]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        out = "\n".join(ln.replace("|  |", "| |") for ln in lines)
        if caption:
            out = f"**{_squash(caption.get_text(' '))}**\n\n" + out
        return out

    # ---- inline -----------------------------------------------------------------------------
    def inline_children(self, tag: Tag | None) -> str:
        if tag is None:
            return ""
        return "".join(self.inline(c) for c in tag.children)

    def inline(self, node: PageElement) -> str:
        if isinstance(node, Comment):
            return ""
        if isinstance(node, NavigableString):
            text = str(node)
            if not text or text.isspace():
                return " " if text else ""
            core = " ".join(text.split())
            return (" " if text[0].isspace() else "") + core + (" " if text[-1].isspace() else "")
        if not isinstance(node, Tag):
            return ""
        name, cls = node.name, _classes(node)
        if name == "code" or (
            name == "span"
            and "pre" in cls
            and node.parent is not None
            and node.parent.name != "code"
        ):
            return _code_span(node.get_text())
        if name == "a":
            text = _squash(self.inline_children(node))
            href = node.get("href", "")
            if not text:
                return ""
            if "external" in cls and href.startswith(("http://", "https://")):
                return f"[{text}]({href})"
            return text
        if name in ("strong", "b"):
            inner = _squash(self.inline_children(node))
            return f"**{inner}**" if inner else ""
        if name in ("em", "i", "cite"):
            inner = _squash(self.inline_children(node))
            if not inner:
                return ""
            if inner.startswith("`") or "*" in inner:
                return inner
            return f"*{inner}*"
        if name == "br":
            return " "
        if name in BLOCK_TAGS:
            return " " + " ".join(self.blocks([node], 0)) + " "
        return self.inline_children(node)
