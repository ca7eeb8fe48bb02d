"""Markdown pages -> chunks, on pages of our own."""

from fsdp_skill.chunking import chunk_markdown

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
    chunks = chunk_markdown(META, PAGE, "widgets.md")
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
    chunks = chunk_markdown(META, page, "t.md", max_chars=800)
    assert len(chunks) > 3
    for c in chunks:
        assert c.text.count("```") % 2 == 0, "a code fence was split"
        assert c.text.startswith("```python\npkg.f(x)\n```"), "continuation lost its signature"
        assert c.objects == ["pkg.f"]
    assert any(code in c.text for c in chunks)


def test_guide_urls_use_heading_slugs():
    meta = dict(META, source="guide", url="references/guides/g.md", page="g")
    chunks = chunk_markdown(
        meta, "# G\n\n## Save a Checkpoint!\n<!-- objects: pkg.save -->\n\nText.\n", "g.md"
    )
    assert chunks[0].url == "references/guides/g.md#save-a-checkpoint"
    assert chunks[0].path == "references/guides/g.md"
