"""Docstring -> markdown rules, on small docstrings of our own."""

from fsdp_skill.sources.docstring_md import inline, render

DOC = """
    Frobnicate the widget across ranks.

    Uses :class:`~torch.distributed.DeviceMesh` and :func:`torch.distributed.all_reduce`
    with ``async_op`` set, see `the design <https://example.org/design>`_.

    .. note::
        Call it on every rank.

    .. warning:: Not thread safe.

    Args:
        widget (nn.Module): The widget to frobnicate.
            A second line of text.
        level (int, optional): How hard. Default: ``1``

    Returns:
        The frobnicated widget.

    Example::
        >>> # xdoctest: +SKIP("needs a cluster")
        >>> w = frobnicate(widget, level=2)
        >>> w.sum()

    Usage
    -----
    Run it with torchrun::

        torchrun --nproc-per-node 2 train.py
"""


def test_roles_literals_and_links():
    assert inline(":class:`~torch.distributed.DeviceMesh`") == "`DeviceMesh`"
    assert inline(":meth:`torch.nn.Module.to`") == "`torch.nn.Module.to`"
    assert inline("``x``") == "`x`"
    assert inline("`text <https://a.b>`_") == "[text](https://a.b)"


def test_render_sections_admonitions_and_code():
    md = render(DOC, level=2, objects="pkg.frobnicate")
    assert "`DeviceMesh` and `torch.distributed.all_reduce`" in md
    assert "[the design](https://example.org/design)" in md
    assert "> **Note:** Call it on every rank." in md
    assert "> **Warning:** Not thread safe." in md
    assert "- **widget** (*nn.Module*): The widget to frobnicate." in md
    assert "- **level** (*int, optional*): How hard. Default: `1`" in md
    assert "**Returns:**" in md
    # Doctest kept with its prompts, xdoctest directives dropped, fenced as python.
    assert "```python\n>>> w = frobnicate(widget, level=2)\n>>> w.sum()\n```" in md
    assert "xdoctest" not in md
    # rst section titles become sub-headings carrying the entry's objects.
    assert "### Usage\n<!-- objects: pkg.frobnicate -->" in md
    assert "```bash\ntorchrun --nproc-per-node 2 train.py\n```" in md
    assert "::" not in md.replace("```", "")


def test_render_undocumented_is_empty_text():
    assert render("   ") == "\n"
