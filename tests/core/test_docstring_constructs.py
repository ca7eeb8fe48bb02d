"""Docstring -> markdown, one construct at a time: each case is a small docstring and the
exact markdown it must become, so a handler that breaks fails its own cases."""

import textwrap

import pytest

from fsdp_skill.sources.docstring_md import render, render_lines


def md(text):
    """An expected page fragment written indented in this file."""
    return textwrap.dedent(text).lstrip("\n")


CASES = [
    # Paragraphs and Google sections.
    pytest.param(
        r"""
        First line
        continues here.

        Second paragraph.
        """,
        md(r"""
        First line continues here.

        Second paragraph.
        """),
        id="paragraph",
    ),
    pytest.param(
        r"""
        Args:
            widget (nn.Module): The widget.
                More about it.
            level (int, optional): How hard. Default: ``1``
            *args: Passed on.
            flag: no type
        """,
        md(r"""
        **Args:**

        - **widget** (*nn.Module*): The widget.
          More about it.

        - **level** (*int, optional*): How hard. Default: `1`
        - **args**: Passed on.
        - **flag**: no type
        """),
        id="args",
    ),
    pytest.param(
        r"""
        Args:
            mode (str): One of:

                - ``"a"``: first
                - ``"b"``: second
        """,
        md(r"""
        **Args:**

        - **mode** (*str*): One of:
          - `"a"`: first
          - `"b"`: second
        """),
        id="args-nested-list",
    ),
    pytest.param(
        r"""
        Args:
            mesh (DeviceMesh): The mesh.

                .. note:: Must be 1D or 2D.
        """,
        md(r"""
        **Args:**

        - **mesh** (*DeviceMesh*): The mesh.
          > **Note:** Must be 1D or 2D.
        """),
        id="args-item-with-note",
    ),
    pytest.param(
        r"""
        Returns:
            Tensor: the result.

        Raises:
            ValueError: if ``x`` is negative.
        """,
        md(r"""
        **Returns:**

        Tensor: the result.

        **Raises:**

        - **ValueError**: if `x` is negative.
        """),
        id="raises-returns",
    ),
    pytest.param(
        r"""
        Example::
            >>> # xdoctest: +SKIP("needs a cluster")
            >>> x = f(1)
            >>>
            >>> x
            2
        """,
        md(r"""
        **Example:**

        ```python
        >>> x = f(1)
        >>> x
        2
        ```
        """),
        id="example-doctest",
    ),
    pytest.param(
        r"""
        Example::

            model = Net()
            model(x)
        """,
        md(r"""
        **Example:**

        ```python
        model = Net()
        model(x)
        ```
        """),
        id="example-code",
    ),
    pytest.param(
        r"""
        Example:
            Build it first.

            >>> f(1)
        """,
        md(r"""
        **Example:**

        Build it first.

        ```python
        >>> f(1)
        ```
        """),
        id="example-prose",
    ),
    pytest.param(
        r"""
        Note:
            Call it on every rank.

        Warnings:
            Not thread safe.
        """,
        md(r"""
        > **Note:** Call it on every rank.

        > **Warning:** Not thread safe.
        """),
        id="google-note",
    ),
    pytest.param(
        r"""
        See Also:
            :func:`g`
        """,
        md(r"""
        **See Also:**

        `g`
        """),
        id="see-also",
    ),
    # Inline roles, literals and links.
    pytest.param(
        r"""
        Uses :class:`~torch.distributed.DeviceMesh`, :func:`torch.distributed.all_reduce`,
        :meth:`the method <torch.nn.Module.to>`, :py:attr:`~a.b.c`, :paramref:`x`, ``async_op``,
        `the design <https://example.org/design>`_ and `anon <https://example.org/a>`__.
        """,
        md(r"""
        Uses `DeviceMesh`, `torch.distributed.all_reduce`, `torch.nn.Module.to`, `c`, `x`, `async_op`, [the design](https://example.org/design) and [anon](https://example.org/a).
        """),
        id="roles",
    ),
    # rst directives: admonitions, code, math, the rest.
    pytest.param(
        r"""
        .. note::
            Call it on every rank,
            once.

            A second paragraph.
        """,
        md(r"""
        > **Note:** Call it on every rank, once.
        >
        > A second paragraph.
        """),
        id="note-directive",
    ),
    pytest.param(
        r"""
        .. warning:: Not thread safe.
            Really.
        """,
        md(r"""
        > **Warning:** Not thread safe. Really.
        """),
        id="warning-inline",
    ),
    pytest.param(
        r"""
        .. versionadded:: 2.4
            The ``mesh`` argument.

        .. versionchanged:: 2.5
            Takes a list.
        """,
        md(r"""
        > **Added in 2.4:** The `mesh` argument.

        > **Changed in 2.5:** Takes a list.
        """),
        id="version-directives",
    ),
    pytest.param(
        r"""
        .. code-block:: bash
            :linenos:

            torchrun --nproc-per-node 2 train.py

        .. code-block::

            x = 1

        .. testcode::

            y = 2
        """,
        md(r"""
        ```bash
        torchrun --nproc-per-node 2 train.py
        ```

        ```python
        x = 1
        ```

        ```python
        y = 2
        ```
        """),
        id="code-block",
    ),
    pytest.param(
        r"""
        .. math::

            y = x^2

        .. autosummary::
            :toctree: generated

            torch.foo

        After.
        """,
        md(r"""
        ```
        y = x^2
        ```

        After.
        """),
        id="math-and-unknown",
    ),
    # Literal blocks and doctests.
    pytest.param(
        r"""
        Run it with torchrun::

            torchrun --nproc-per-node 2 train.py

        Or in python ::

            main()

        ::

            $ echo hi
        """,
        md(r"""
        Run it with torchrun:

        ```bash
        torchrun --nproc-per-node 2 train.py
        ```

        Or in python

        ```python
        main()
        ```

        ```bash
        $ echo hi
        ```
        """),
        id="literal-block",
    ),
    pytest.param(
        r"""
        Call it like this:
        >>> f(
        ...     1)
        3

        Done.
        """,
        md(r"""
        Call it like this:

        ```python
        >>> f(
        ...     1)
        3
        ```

        Done.
        """),
        id="doctest-in-prose",
    ),
    # rst section titles.
    pytest.param(
        r"""
        Usage
        -----
        Text.

        Details
        ~~~~~~~
        More.

        Again
        -----
        End.
        """,
        md(r"""
        ### Usage
        <!-- objects: pkg.f -->

        Text.

        #### Details
        <!-- objects: pkg.f -->

        More.

        ### Again
        <!-- objects: pkg.f -->

        End.
        """),
        id="titles",
    ),
    # Grid tables.
    pytest.param(
        r"""
        +-----------+---------------------+
        | Name      | Meaning             |
        +===========+=====================+
        | ``a``     | the first, wrapped  |
        |           | onto two lines      |
        +-----------+---------------------+
        | b | c     | :class:`~x.Y`       |
        +-----------+---------------------+
        """,
        md(r"""
        | Name | Meaning |
        | --- | --- |
        | `a` | the first, wrapped onto two lines |
        | b \| c | `Y` |
        """),
        id="grid-table",
    ),
    pytest.param(
        r"""
        +-------+-------+
        | Err   | one   |
        |       +-------+
        |       | two   |
        +-------+-------+
        """,
        md(r"""
        | Err | one |
        | --- | --- |
        |  | two |
        """),
        id="grid-table-rowspan-no-header",
    ),
    pytest.param(
        r"""
        +-------+-------+
        | Head  | Er    |
        +=======+=======+
        | spans both    |
        +-------+-------+
        """,
        md(r"""
        ```text
        +-------+-------+
        | Head  | Er    |
        +=======+=======+
        | spans both    |
        +-------+-------+
        ```
        """),
        id="grid-table-colspan",
    ),
    pytest.param(
        r"""
        .. note:: Placements:

            +------+------+
            | fwd  | bwd  |
            +======+======+
            | S    | R    |
            +------+------+
        """,
        md(r"""
        > **Note:** Placements:
        >
        > | fwd | bwd |
        > | --- | --- |
        > | S | R |
        """),
        id="table-in-note",
    ),
    # Lists.
    pytest.param(
        r"""
        Caveats:
        - first
          wraps
        * second
        + third

        - loose one

        - loose two
        """,
        md(r"""
        Caveats:

        - first wraps
        - second
        - third

        - loose one

        - loose two
        """),
        id="bullets",
    ),
    pytest.param(
        r"""
        The workflow is:

        1. Catch the exception.
        2. Call ``reset()``.
        3. Run the next iteration.
        """,
        md(r"""
        The workflow is:

        1. Catch the exception.
        2. Call `reset()`.
        3. Run the next iteration.
        """),
        id="ordered",
    ),
    pytest.param(
        r"""
        Steps:

        9) nine
        10) ten
        11) eleven,
            wrapped
        """,
        md(r"""
        Steps:

        9. nine
        10. ten
        11. eleven, wrapped
        """),
        id="ordered-multidigit-paren",
    ),
    pytest.param(
        r"""
        The calls are:
        0) set up
        1) plan
        """,
        md(r"""
        The calls are:

        0. set up
        1. plan
        """),
        id="ordered-interrupts-paragraph",
    ),
    pytest.param(
        r"""
        The size must be divisible by
        8. Otherwise it fails.
        """,
        md(r"""
        The size must be divisible by 8. Otherwise it fails.
        """),
        id="ordered-needs-first-number",
    ),
    pytest.param(
        r"""
        1. The module must accept a ``device``
        argument.

        2. The module must not compute.
        """,
        md(r"""
        1. The module must accept a `device` argument.

        2. The module must not compute.
        """),
        id="ordered-lazy-continuation",
    ),
    pytest.param(
        r"""
        - outer
          - inner a
          - inner b
        - next

        1. Views the tensors, divided into:

            1.1 compressed ones;

            1.2 the rest.

        2. Done.
        """,
        md(r"""
        - outer
          - inner a
          - inner b
        - next

        1. Views the tensors, divided into:

           1.1 compressed ones;

           1.2 the rest.

        2. Done.
        """),
        id="nested-lists",
    ),
    pytest.param(
        r"""
        10. ten:
            - a
            - b
        """,
        md(r"""
        10. ten:
            - a
            - b
        """),
        id="nested-under-multidigit",
    ),
    pytest.param(
        r"""
        - Unions are flattened, e.g.::

              assert U[U[int]] == U[int]

        - Redundant arguments are skipped.
        """,
        md(r"""
        - Unions are flattened, e.g.:
          ```python
          assert U[U[int]] == U[int]
          ```

        - Redundant arguments are skipped.
        """),
        id="item-with-literal-block",
    ),
    pytest.param(
        r"""
        - first item
        .. note:: not part of it
        """,
        md(r"""
        - first item

        > **Note:** not part of it
        """),
        id="item-lazy-line-stops-at-block",
    ),
    pytest.param(
        r"""
        .. note::
            1. one
            2. two
        """,
        md(r"""
        > **Note:**
        > 1. one
        > 2. two
        """),
        id="note-starting-with-list",
    ),
    pytest.param(
        r"""
        - bullet
        1. numbered
        """,
        md(r"""
        - bullet

        1. numbered
        """),
        id="mixed-list-kinds",
    ),
    pytest.param(
        r"""
        Usage Patterns:
            # Synchronous staging
            stager = Stager(sync=True)
            out = stager.stage(sd)
        """,
        md(r"""
        Usage Patterns:

        ```python
        # Synchronous staging
        stager = Stager(sync=True)
        out = stager.stage(sd)
        ```
        """),
        id="code-after-single-colon",
    ),
    pytest.param(
        r"""
        The options are:
            fast mode for small jobs,
            safe mode for the rest.
        """,
        md(r"""
        The options are: fast mode for small jobs, safe mode for the rest.
        """),
        id="prose-after-single-colon-stays-prose",
    ),
    pytest.param(
        r"""
        # not a heading, a comment left in prose
        """,
        md(r"""
        \# not a heading, a comment left in prose
        """),
        id="prose-starting-with-hash",
    ),
]


@pytest.mark.parametrize(("doc", "expected"), CASES)
def test_construct(doc, expected):
    assert render(doc, level=2, objects="pkg.f") == expected


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        # Without a heading renderer an rst title becomes bold text.
        ("Usage\n-----\nText.", ["**Usage**", "", "Text.", ""]),
        # A rule is never a title of its own.
        ("-----\n-----", ["----- -----", ""]),
        # A Google section only starts a paragraph, never interrupts one.
        ("Some text\nReturns:\n    x", ["Some text Returns: x", ""]),
    ],
    ids=["title-without-heading", "rule-is-no-title", "section-needs-fresh-paragraph"],
)
def test_render_lines(doc, expected):
    assert render_lines(doc.splitlines()) == expected


def test_table_and_list_lines_start_a_quote_line_of_their_own():
    # The label cannot share a line with what must begin a line in markdown.
    for body, first in [
        ("1. one", "> 1. one"),
        ("- one", "> - one"),
        ("+-----+\n    | one |\n    +-----+", "> | one |"),
    ]:
        lines = render(f"\n.. note::\n    {body}\n").splitlines()
        assert lines[:2] == ["> **Note:**", first]
