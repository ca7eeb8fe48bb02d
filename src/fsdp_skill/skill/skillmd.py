"""Read SKILL.md and split off its front matter, the way skills-ref does, with line numbers kept.

The folder checked may be hostile: SKILL.md is read only if it is a regular file, and at most
MAX_SKILL_MD_BYTES of it; its front matter is parsed with limits on size, nesting and aliases.
The YAML is held to what strictyaml (which skills-ref parses with) accepts: block style only, no
anchors, aliases, tags or duplicate keys.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import yaml

from fsdp_skill import files
from fsdp_skill.skill.problems import Problems

# A SKILL.md is a few KiB (500 body lines); the caps keep a hostile one from costing more than
# a moment: /dev/zero or a huge file is never read whole, deep or aliased YAML never composed.
MAX_SKILL_MD_BYTES = 1024 * 1024
MAX_FRONTMATTER_BYTES = 64 * 1024
MAX_YAML_DEPTH = 32
MAX_YAML_ALIASES = 64


@dataclasses.dataclass
class SkillMd:
    """SKILL.md split the way skills-ref splits it, with line numbers kept."""

    meta: dict | None  # None when the YAML uses a construct skills-ref refuses
    key_lines: dict[str, int]  # top-level front matter key -> its 1-based line
    body_first_line: int  # 1-based line of the first body line
    body: list[str]
    text: str  # the whole file as read (newlines normalised), for skills-ref to judge as well


def find_skill_md(skill_dir: Path) -> Path | None:
    for name in ("SKILL.md", "skill.md"):
        candidate = skill_dir / name
        if candidate.exists():
            return candidate
    return None


class _YamlLimit(Exception):
    """The front matter is past a parsing limit; the message says which (line, text)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _yaml_style_problems(text: str) -> list[tuple[int, str]]:
    """What strictyaml (which skills-ref parses with) refuses and PyYAML quietly accepts.

    The event stream is read without recursion, so this is also where the limits are enforced,
    before PyYAML's recursive composer sees the text: deeper nesting raised RecursionError, and
    nested aliases cost 8x per level.
    """
    out: list[tuple[int, str]] = []
    depth = aliases = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        line = ev.start_mark.line + 1
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise _YamlLimit(line, f"frontmatter nests more than {MAX_YAML_DEPTH} levels deep")
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1
        if isinstance(ev, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise _YamlLimit(
                    line, f"frontmatter uses more than {MAX_YAML_ALIASES} YAML aliases"
                )
            out.append((line, f"YAML alias *{ev.anchor} is not allowed in frontmatter"))
            continue
        if getattr(ev, "anchor", None):
            out.append((line, f"YAML anchor &{ev.anchor} is not allowed in frontmatter"))
        if getattr(ev, "tag", None) is not None:
            out.append((line, f"YAML tag {ev.tag} is not allowed in frontmatter"))
        if isinstance(ev, yaml.CollectionStartEvent) and ev.flow_style:
            kind = "{...}" if isinstance(ev, yaml.MappingStartEvent) else "[...]"
            out.append((line, f"flow-style {kind} is not allowed in frontmatter; use block style"))
    return out


def _walk_keys(
    node: yaml.Node,
    out: list[tuple[int, str]],
    top: dict[str, int] | None,
    visited: set[int] | None = None,
) -> None:
    # An alias is the same node object again: each node is checked once, however often it is
    # referenced (walking every reference is exponential in the nesting of aliases).
    visited = set() if visited is None else visited
    if id(node) in visited:
        return
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            line = key.start_mark.line + 1
            if not isinstance(key, yaml.ScalarNode):
                out.append((line, "frontmatter keys must be plain strings"))
            elif key.value in seen:
                out.append((line, f"duplicate key '{key.value}' in frontmatter"))
            else:
                seen.add(key.value)
                if top is not None:
                    top[key.value] = line
            _walk_keys(value, out, None, visited)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _walk_keys(item, out, None, visited)


def _read(skill_md: Path) -> bytes:
    """SKILL.md's bytes; OSError (its message says why) for anything that is not a small file.

    A regular file past the cap is refused by its size before a byte is read, so the message can
    say how large it is; files.read_capped then holds the cap on what is actually opened.
    """
    size = os.stat(skill_md).st_size
    if size > MAX_SKILL_MD_BYTES:
        raise OSError(f"is {size} bytes; the limit is {MAX_SKILL_MD_BYTES}")
    return files.read_capped(skill_md, MAX_SKILL_MD_BYTES)


def parse_skill_md(skill_md: Path, problems: Problems) -> SkillMd | None:
    """Split and parse SKILL.md; report problems and return None when skills-ref would stop."""
    rel = skill_md.name
    try:
        content = _read(skill_md).decode("utf-8")
    except UnicodeDecodeError as e:
        problems.add(rel, None, f"not valid UTF-8 ({e.reason} at byte {e.start})")
        return None
    except OSError as e:
        problems.add(rel, None, f"cannot read: {e.strerror or e}")
        return None
    # Text mode's newline handling, as read_text() gives (and skills-ref reads with).
    content = content.replace("\r\n", "\n").replace("\r", "\n")

    if not content.startswith("---"):
        problems.add(rel, 1, "must start with YAML frontmatter (---)")
        return None
    # skills-ref splits on the first two '---' anywhere in the file, not on delimiter lines.
    parts = content.split("---", 2)
    if len(parts) < 3:
        problems.add(rel, 1, "frontmatter is not closed with ---")
        return None
    front, rest = parts[1], parts[2]
    if len(front.encode("utf-8")) > MAX_FRONTMATTER_BYTES:
        problems.add(rel, 1, f"frontmatter is larger than {MAX_FRONTMATTER_BYTES // 1024} KiB")
        return None
    close_at = 3 + len(front)
    close_line = content.count("\n", 0, close_at) + 1
    if not front.endswith("\n") or rest.split("\n", 1)[0].strip():
        problems.add(
            rel,
            close_line,
            "'---' inside the frontmatter ends it here: skills-ref splits on any '---', "
            "even a quoted one; rephrase it",
        )
        return None

    try:
        style = _yaml_style_problems(front)
        node = yaml.compose(front, Loader=yaml.BaseLoader)
    except _YamlLimit as e:
        problems.add(rel, e.line, e.message)
        return None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        problems.add(rel, mark.line + 1 if mark else 1, f"frontmatter is not valid YAML: {what}")
        return None
    key_lines: dict[str, int] = {}
    if node is not None:
        _walk_keys(node, style, key_lines)
    for line, message in sorted(style):
        problems.add(rel, line, message)

    # BaseLoader keeps every scalar a string, as strictyaml does.
    meta = yaml.load(front, Loader=yaml.BaseLoader)
    if not isinstance(meta, dict):
        problems.add(rel, 1, "frontmatter must be a YAML mapping")
        return None

    lines = content.splitlines()
    return SkillMd(
        meta=meta if not style else None,
        key_lines=key_lines,
        body_first_line=close_line + 1,
        body=lines[close_line:],
        text=content,
    )
