"""One tiny hand-written snippet per conversion rule."""

from __future__ import annotations

import pytest
import yaml

from fsdp_skill.sources.web.html_to_md import ConversionError, convert_page


def convert(
    article_inner: str,
    *,
    head: str = "<title>T \u2014 PyTorch 2.13 documentation</title>",
    wrapper: str = '<article class="bd-article">{}</article>',
    anchors=None,
) -> str:
    html = f"<html><head>{head}</head><body>{wrapper.format(article_inner)}</body></html>"
    md = convert_page(
        html,
        page="p",
        url="https://docs.pytorch.org/docs/2.13/p.html",
        torch_version="2.13",
        anchor_names=anchors,
    ).markdown
    return md.split("\n---\n", 1)[1].strip()


def sec(inner: str, ident: str = "s", level: int = 1, title: str = "Title") -> str:
    return (
        f'<section id="{ident}"><h{level}>{title}<a class="headerlink" href="#{ident}">#</a>'
        f"</h{level}>{inner}</section>"
    )


SIG = (
    '<dt class="sig sig-object py" id="torch.x.f"><em class="property"><span class="pre">class</span>'
    '<span class="w"> </span></em><span class="sig-prename descclassname"><span class="pre">torch.x.'
    '</span></span><span class="sig-name descname"><span class="pre">f</span></span>'
    '<span class="sig-paren">(</span><em class="sig-param"><span class="n"><span class="pre">a</span>'
    '</span><span class="o"><span class="pre">=</span></span><span class="default_value">'
    '<span class="pre">1</span></span></em><span class="sig-paren">)</span>'
    '<span class="sig-return"><span class="sig-return-icon">&#x2192;</span> '
    '<span class="sig-return-typehint"><span class="pre">int</span></span></span>'
    '<a class="reference internal" href="_modules/x.html#f"><span class="viewcode-link">'
    '<span class="pre">[source]</span></span></a><a class="headerlink" href="#torch.x.f">\u00b6</a></dt>'
)


def test_front_matter_and_title_suffix_removed():
    html = (
        "<html><head><title>Join \u2014 PyTorch 2.13 documentation</title></head><body>"
        '<article class="bd-article">' + sec("<p>x</p>") + "</article></body></html>"
    )
    md = convert_page(
        html,
        page="a/b",
        url="https://docs.pytorch.org/docs/2.13/a/b.html",
        torch_version="2.13",
        category="notes",
    ).markdown
    front = yaml.safe_load(md.split("---\n")[1])
    assert front == {
        "title": "Join",
        "url": "https://docs.pytorch.org/docs/2.13/a/b.html",
        "source": "web",
        "torch_version": "2.13",
        "page": "a/b",
        "category": "notes",
    }


def test_section_headings_keep_anchors():
    out = convert(sec("<p>Intro.</p>" + sec("<p>Body.</p>", "which-backend", 2, "Which backend")))
    assert out == (
        "# Title\n<!-- anchor: s -->\n\nIntro.\n\n## Which backend\n"
        "<!-- anchor: which-backend -->\n\nBody."
    )


def test_api_entry_heading_signature_and_nested_member():
    member = (
        '<dl class="py method"><dt class="sig sig-object py" id="torch.x.f.m">'
        '<span class="sig-name descname"><span class="pre">m</span></span>'
        '<span class="sig-paren">(</span><span class="sig-paren">)</span></dt>'
        "<dd><p>Member.</p></dd></dl>"
    )
    out = convert(sec(f'<dl class="py class">{SIG}<dd><p>Body.</p>{member}</dd></dl>'))
    assert (
        "## torch.x.f\n<!-- objects: torch.x.f -->\n<!-- anchor: torch.x.f -->\n\n"
        "```python\nclass torch.x.f(a=1) -> int\n```\n\nBody.\n\n"
        "### torch.x.f.m\n<!-- objects: torch.x.f.m -->\n<!-- anchor: torch.x.f.m -->\n\n"
        "```python\nm()\n```\n\nMember."
    ) in out
    assert "[source]" not in out and "\u00b6" not in out


def test_inventory_aliases_and_module_targets_become_objects():
    inner = sec(
        '<span id="module-torch.x"></span><p>Mod.</p>'
        f'<dl class="py class">{SIG}<dd><p>B.</p></dd></dl>'
    )
    out = convert(
        inner, anchors={"torch.x.f": ["torch.x.f", "torch._C.f"], "module-torch.x": ["torch.x"]}
    )
    assert "# Title\n<!-- objects: torch.x -->\n<!-- anchor: s -->" in out
    assert "<!-- objects: torch.x.f, torch._C.f -->" in out


def test_module_section_without_prose_gets_a_line():
    out = convert(
        '<section id="module-torch.y"><h1>Y</h1>' + sec("<p>b</p>", "c", 2, "C") + "</section>"
    )
    assert out.startswith(
        "# Y\n<!-- objects: torch.y -->\n<!-- anchor: module-torch.y -->\n\n"
        "Module `torch.y`.\n\n## C"
    )


def test_field_list_parameters_returns_raises():
    fl = (
        '<dl class="field-list simple"><dt class="field-odd">Parameters<span class="colon">:</span></dt>'
        '<dd class="field-odd"><ul class="simple">'
        "<li><p><strong>mesh</strong> (<em>Optional</em><em>[</em><em>DeviceMesh</em><em>]</em>) \u2013 the "
        '<code class="docutils literal notranslate"><span class="pre">mesh</span></code>.</p></li>'
        "<li><p><strong>n</strong> (<em>int</em>) \u2013 count.</p></li></ul></dd>"
        '<dt class="field-even">Returns<span class="colon">:</span></dt><dd class="field-even"><p>A handle.</p></dd>'
        '<dt class="field-odd">Return type<span class="colon">:</span></dt><dd class="field-odd"><p><em>Work</em></p></dd>'
        '<dt class="field-even">Raises<span class="colon">:</span></dt><dd class="field-even">'
        "<p><strong>ValueError</strong> \u2013 if bad.</p></dd></dl>"
    )
    out = convert(sec(fl))
    assert (
        "**Parameters:**\n\n- **mesh** (`Optional[DeviceMesh]`) \u2013 the `mesh`.\n"
        "- **n** (`int`) \u2013 count."
    ) in out
    assert "**Returns:** A handle." in out
    assert "**Return type:** `Work`" in out
    assert "**Raises:**\n\n- **ValueError** \u2013 if bad." in out


def test_admonitions_become_labelled_blocks():
    adm = (
        '<div class="admonition warning"><p class="admonition-title">Warning</p>'
        '<p>Careful.</p></div><div class="admonition note"><p class="admonition-title">Note</p>'
        '<p>One.</p><div class="highlight-python notranslate"><div class="highlight"><pre>x = 1\n'
        "</pre></div></div></div>"
    )
    out = convert(sec(adm))
    assert "> **Warning**\n>\n> Careful." in out
    assert "> **Note**\n>\n> One.\n>\n> ```python\n> x = 1\n> ```" in out


@pytest.mark.parametrize(
    "cls, lang",
    [
        ("highlight-default", "python"),
        ("highlight-python", "python"),
        ("highlight-bash", "bash"),
        ("highlight-shell", "shell"),
        ("highlight-none", "text"),
        ("doctest highlight-default", "python"),
    ],
)
def test_code_blocks_language_and_prompts(cls, lang):
    code = (
        f'<div class="{cls} notranslate"><div class="highlight"><pre><span></span>'
        '<span class="gp">&gt;&gt;&gt; </span><span class="n">f</span>(<span class="mi">1</span>)\n'
        '<span class="go">2</span>\n</pre></div></div>'
    )
    assert f"```{lang}\n>>> f(1)\n2\n```" in convert(sec(code))


def test_code_with_backtick_fence_inside():
    code = '<div class="highlight-text notranslate"><div class="highlight"><pre>```\nx\n```</pre></div></div>'
    assert "````text\n```\nx\n```\n````" in convert(sec(code))


def test_tables_become_markdown_tables():
    table = (
        '<div class="pst-scrollable-table-container"><table class="table"><thead><tr>'
        '<th class="head"><p>Backend</p></th><th class="head" colspan="2"><p><code class="docutils literal">'
        '<span class="pre">gloo</span></code></p></th></tr></thead><tbody>'
        "<tr><td><p>send</p></td><td><p>a|b</p></td><td><p>✓</p></td></tr></tbody></table></div>"
    )
    assert "| Backend | `gloo` | |\n|---|---|---|\n| send | a\\|b | ✓ |" in convert(sec(table))


def test_links_keep_text():
    p = (
        '<p>See <a class="reference internal" href="#torch.x.f"><code class="xref py py-func docutils literal">'
        '<span class="pre">f()</span></code></a> and <a class="reference external" '
        'href="https://example.org/a">the guide</a> and <a class="reference internal" href="fsdp.html">'
        '<span class="doc">FSDP</span></a>.</p>'
    )
    assert "See `f()` and [the guide](https://example.org/a) and FSDP." in convert(sec(p))


def test_lists_nested_and_ordered():
    lst = '<ol class="arabic"><li><p>One</p><ul><li><p>a</p></li></ul></li><li><p>Two</p></li></ol>'
    out = convert(sec(lst))
    assert "1. One\n\n   - a\n\n2. Two" in out


def test_furniture_and_date_line_dropped():
    inner = sec(
        "<p>Created On: Jun 1, 2025 | Last Updated On: Jun 2, 2025</p><p>Real.</p>"
        '<script type="application/ld+json">{"articleBody": "dup"}</script>'
        '<div class="rating">Rate this Page \u2605</div><nav class="bd-breadcrumbs">Home</nav>'
        '<img src="x.png" alt="pic"/>'
    )
    assert convert(inner) == "# Title\n<!-- anchor: s -->\n\nReal."


def test_deprecated_and_versionchanged_are_quoted():
    inner = sec(
        '<div class="deprecated"><p><span class="versionmodified deprecated">Deprecated since '
        "version 2.1: </span>Use g.</p></div>"
    )
    assert "> Deprecated since version 2.1: Use g." in convert(inner)


def test_older_theme_pytorch_article_fallback():
    out = convert(
        sec("<p>Old theme.</p>"),
        wrapper='<div class="pytorch-breadcrumbs">Docs</div>'
        '<article id="pytorch-article" class="pytorch-article">{}</article>',
    )
    assert out == "# Title\n<!-- anchor: s -->\n\nOld theme."


def test_page_without_article_is_an_error():
    with pytest.raises(ConversionError, match="no main article"):
        convert_page(
            "<html><body><div>x</div></body></html>", page="p", url="u", torch_version="2.13"
        )
