"""Markdown pages -> chunks, on pages of our own."""

from fsdp_skill.build import collect_chunks, page_path
from fsdp_skill.chunking import chunk_markdown
from fsdp_skill.pages import write_page

META = {
    "title": "Widgets",
    "url": "https://docs.pytorch.org/docs/2.13/widgets.html",
    "source": "docstring",
    "torch_version": "2.13.0",
    "page": "widgets",
}

PAGE = """# Widgets

Intro prose about widgets.

## pkg.Widget
<!-- objects: pkg.Widget, pkg.alias.Widget -->
<!-- anchor: pkg.Widget -->

```python
class pkg.Widget(size: int)
```

First paragraph.

- **size** (*int*): how big.
- **color** (*str*): which color.

### pkg.Widget.spin
<!-- objects: pkg.Widget.spin -->
<!-- anchor: pkg.Widget.spin -->

```python
pkg.Widget.spin(self)
```

Spins it.

## Background

Prose section without objects.
"""


def test_sections_objects_urls_and_breadcrumbs():
    chunks = chunk_markdown(META, PAGE, "references/api/widgets.md")
    by_title = {c.title: c for c in chunks}
    assert set(by_title) == {"Widgets", "pkg.Widget", "pkg.Widget.spin", "Background"}
    w = by_title["pkg.Widget"]
    assert w.objects == ["pkg.Widget", "pkg.alias.Widget"]
    assert w.url == META["url"] + "#pkg.Widget"
    assert w.breadcrumbs == ["Widgets", "pkg.Widget"]
    assert w.path == "references/api/widgets.md"
    assert w.text.startswith("```python\nclass pkg.Widget(size: int)\n```")
    assert "- **size** (*int*): how big.\n- **color** (*str*): which color." in w.text
    spin = by_title["pkg.Widget.spin"]
    assert spin.breadcrumbs == ["Widgets", "pkg.Widget", "pkg.Widget.spin"]
    # Objects are not inherited: a prose section carries none.
    assert by_title["Background"].objects == [] and by_title["Background"].url == META["url"]
    assert len({c.id for c in chunks}) == len(chunks)


def test_size_cap_splits_between_blocks_never_inside_code():
    code = "```python\n" + "\n".join(f"x{i} = {i}" for i in range(300)) + "\n```"
    paras = "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(12))
    page = f"# T\n\n## pkg.f\n<!-- objects: pkg.f -->\n\n```python\npkg.f(x)\n```\n\n{paras}\n\n{code}\n"
    chunks = chunk_markdown(META, page, "references/api/t.md", max_chars=800)
    assert len(chunks) > 3
    for c in chunks:
        assert c.text.count("```") % 2 == 0, "a code fence was split"
        assert c.text.startswith("```python\npkg.f(x)\n```"), "continuation lost its signature"
        assert c.objects == ["pkg.f"]
    assert any(code in c.text for c in chunks)


def test_a_short_tail_joins_the_part_before():
    # Greedy packing left a lone last bullet as a chunk of its own: ranked first for a query it
    # matched, it showed nothing of its section. It must travel with the text before it.
    body = "\n\n".join(f"Paragraph {i} " + "word " * 36 for i in range(4))  # 4 x 192 chars
    page = f"# T\n\n## A section\n\n{body}\n\n- a lone closing bullet, past the limit\n"
    chunks = chunk_markdown(META, page, "references/api/t.md", max_chars=800)
    assert all(len(c.text) > 100 for c in chunks), [c.text for c in chunks]
    assert "Paragraph 3" in chunks[-1].text and chunks[-1].text.endswith("past the limit")


def test_guide_urls_use_heading_slugs():
    meta = dict(META, source="guide", url="references/guides/g.md", page="g")
    chunks = chunk_markdown(
        meta,
        "# G\n\n## Save a Checkpoint!\n<!-- objects: pkg.save -->\n\nText.\n",
        "references/guides/g.md",
    )
    assert chunks[0].url == "references/guides/g.md#save-a-checkpoint"
    assert chunks[0].path == "references/guides/g.md"


def test_page_path_names_the_file_under_references():
    assert page_path("docstring", "widgets.md") == "references/api/widgets.md"
    assert page_path("web", "tutorials/a/b.md") == "references/web/tutorials/a/b.md"
    # Guides nest, and their page key is not their file name.
    assert page_path("guide", "errors/fsdp.md") == "references/guides/errors/fsdp.md"


def test_collected_chunks_carry_where_their_page_is(tmp_path):
    # Wherever the folders really are (a data dir in the user cache, a stage folder), the
    # path is the page's place in the skill.
    api, guides = tmp_path / "data" / "api", tmp_path / "skill" / "g"
    write_page(api / "widgets.md", META, PAGE)
    guide_meta = dict(META, source="guide", url="references/guides/errors/x.md", page="errors-x")
    write_page(guides / "errors" / "x.md", guide_meta, "# X\n\nText.\n")
    chunks = collect_chunks({"docstring": str(api), "guide": str(guides)})
    assert {c["path"] for c in chunks if c["source"] == "docstring"} == {
        "references/api/widgets.md"
    }
    assert {c["path"] for c in chunks if c["source"] == "guide"} == {
        "references/guides/errors/x.md"
    }
