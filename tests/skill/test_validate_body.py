"""body: SKILL.md's body read as CommonMark, with every path and code span on its own line."""

from __future__ import annotations

import textwrap

from fsdp_skill.skill import body, skillmd
from fsdp_skill.skill.problems import Problems


def scan(tmp_path, text):
    path = tmp_path / "SKILL.md"
    # Front matter on lines 1-4: the body's first line is line 5.
    path.write_text("---\nname: x\ndescription: d\n---\n" + textwrap.dedent(text), encoding="utf-8")
    md = skillmd.parse_skill_md(path, Problems(str(tmp_path)))
    assert md is not None and md.body_first_line == 5
    return body.scan(md)


def test_lines_after_a_code_span_that_wraps(tmp_path):
    got = scan(
        tmp_path,
        """\
        Run `python scripts/a.py
        --json` then `torch.x` and [b](
        scripts/b.py "a title
        over two lines") then scripts/c.py
        and `torch.y`.
        """,
    )
    assert got.code_spans == [(5, "python scripts/a.py --json"), (6, "torch.x"), (9, "torch.y")]
    # A link counts on the line it starts on; what follows it, on the line its title ends.
    assert got.mentions == [(5, "scripts/a.py"), (6, "scripts/b.py"), (8, "scripts/c.py")]


def test_links_are_read_as_commonmark(tmp_path):
    got = scan(
        tmp_path,
        """\
        [a](<references/with space.md>) [b](references/%41.md?x=1#part) [c](#anchor)
        [d](https://example.com/scripts/x.py) ![e](assets/pic.png) [f][def] [g][def]

        [def]: references/defined.md
        """,
    )
    assert got.mentions == [
        (5, "references/with space.md"),
        (5, "references/A.md"),  # no stray 'references/' folder from the percent escape
        (6, "assets/pic.png"),
        (8, "references/defined.md"),  # a reference definition: on its own line, once
    ]


def test_inline_code_is_only_inline_code(tmp_path):
    got = scan(
        tmp_path,
        """\
        ```python
        `torch.in_fence` scripts/in_fence.py
        ```

            `torch.indented` scripts/indented.py

        <div>
        `torch.in_html` scripts/in_html.py
        </div>

        | `torch.cell` | scripts/cell.py |
        |---|---|
        | a | `torch.row` |

        > `torch.quoted`
        """,
    )
    assert got.code_spans == [(15, "torch.cell"), (17, "torch.row"), (19, "torch.quoted")]
    # Paths written in commands count wherever they are.
    assert got.mentions == [
        (6, "scripts/in_fence.py"),
        (9, "scripts/indented.py"),
        (12, "scripts/in_html.py"),
        (15, "scripts/cell.py"),
    ]


def test_a_line_lists_its_links_first_and_each_path_once(tmp_path):
    got = scan(tmp_path, "see scripts/b.py and [a](scripts/a.py), `scripts/b.py` again\n")
    assert got.mentions == [(5, "scripts/a.py"), (5, "scripts/b.py")]
