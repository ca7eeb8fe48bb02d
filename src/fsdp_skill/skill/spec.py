"""The Agent Skills spec's rules on SKILL.md's front matter fields, plus this project's stricter ones.

The reference validator, skills-ref, is the authority on the spec's rules whenever it can be
imported (it is in the dev extra; it needs Python >= 3.11 and this package supports 3.10): it
decides which rules a skill breaks. The same rules are written out here as well, each finding
keyed by (field, rule), because skills-ref's messages carry no line numbers: where skills-ref
reports a rule this module also knows, the finding is printed with this module's wording at the
line of its key. A finding here that skills-ref does not report is dropped; a message of
skills-ref's that no rule here explains (a rule added in a later release) is printed as it is,
at the line of the field it names. Without skills-ref these rules judge on their own.

The project's additions stand whatever skills-ref says: `license` is a string, `metadata` maps
strings to strings, and `allowed-tools` is a string or a list of strings. (The other addition,
no '---' inside the front matter, is enforced where SKILL.md is split: skills-ref cuts the front
matter short there without a word.)
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable
from pathlib import Path

from fsdp_skill.skill.problems import Problems
from fsdp_skill.skill.skillmd import SkillMd

MAX_NAME_LENGTH = 64
MAX_DESCRIPTION_LENGTH = 1024
MAX_COMPATIBILITY_LENGTH = 500
ALLOWED_FIELDS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
)

Key = tuple[str, str]  # (field, rule), or ("unknown", field) / ("missing", field)


@dataclasses.dataclass(frozen=True)
class Finding:
    key: Key | None  # None for the project's additions: skills-ref has no say on them
    line: int | None
    message: str


# skills-ref 0.1.1's messages (skills_ref/validator.py) -> the key of the rule each reports.
_REFERENCE_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], list[Key]]], ...] = (
    (
        re.compile(r"Unexpected fields in frontmatter: (.*)\. Only \[.*\] are allowed\.", re.S),
        lambda m: [("unknown", f) for f in m.group(1).split(", ")],
    ),
    (
        re.compile(r"Missing required field in frontmatter: (.*)", re.S),
        lambda m: [("missing", m.group(1))],
    ),
    (
        re.compile(r"Field '(.*)' must be a (?:non-empty )?string", re.S),
        lambda m: [(m.group(1), "type")],
    ),
    (
        re.compile(r"Skill name .* exceeds \d+ character limit.*", re.S),
        lambda m: [("name", "length")],
    ),
    (re.compile(r"Skill name .* must be lowercase", re.S), lambda m: [("name", "lowercase")]),
    (
        re.compile(r"Skill name cannot start or end with a hyphen"),
        lambda m: [("name", "edge-hyphen")],
    ),
    (
        re.compile(r"Skill name cannot contain consecutive hyphens"),
        lambda m: [("name", "double-hyphen")],
    ),
    (
        re.compile(r"Skill name .* contains invalid characters\..*", re.S),
        lambda m: [("name", "characters")],
    ),
    (
        re.compile(r"Directory name .* must match skill name .*", re.S),
        lambda m: [("name", "folder")],
    ),
    (
        re.compile(r"Description exceeds \d+ character limit.*", re.S),
        lambda m: [("description", "length")],
    ),
    (
        re.compile(r"Compatibility exceeds \d+ character limit.*", re.S),
        lambda m: [("compatibility", "length")],
    ),
)
# For a message no rule above matches: the field it is about, to give it that field's line.
_FIELD_NAMED = re.compile(r"Field '([^']+)'|(?:Skill|Directory) (name)|(Description|Compatibility)")


def reference_keys(message: str) -> list[Key]:
    """The rules a skills-ref message reports, as keys of this module's findings; [] if unknown."""
    for pattern, keys in _REFERENCE_RULES:
        m = pattern.fullmatch(message)
        if m:
            return keys(m)
    return []


def _reference_line(message: str, keys: list[Key], at: Callable[[str], int | None]) -> int | None:
    """The line of the field a skills-ref message is about; None when it names none."""
    if keys:
        head, tail = keys[0]
        if head == "missing":
            return 1  # where this module reports a missing field too
        return at(tail if head == "unknown" else head)
    m = _FIELD_NAMED.match(message)
    if m is None:
        return None
    return at(next(g for g in m.groups() if g).lower())


def _check_name(name: object, folder: str, line: int | None) -> list[Finding]:
    if not isinstance(name, str) or not name.strip():
        return [Finding(("name", "type"), line, "'name' must be a non-empty string")]
    name = unicodedata.normalize("NFKC", name.strip())
    out: list[Finding] = []

    def add(rule: str, message: str) -> None:
        out.append(Finding(("name", rule), line, f"name '{name}' {message}"))

    if len(name) > MAX_NAME_LENGTH:
        add("length", f"is {len(name)} characters; the limit is {MAX_NAME_LENGTH}")
    if name != name.lower():
        add("lowercase", "must be lowercase")
    if name.startswith("-") or name.endswith("-"):
        add("edge-hyphen", "must not start or end with a hyphen")
    if "--" in name:
        add("double-hyphen", "must not contain consecutive hyphens")
    if not all(c.isalnum() or c == "-" for c in name):
        add("characters", "may only contain letters, digits and hyphens")
    if unicodedata.normalize("NFKC", folder) != name:
        add("folder", f"must match the folder name '{folder}'")
    return out


def spec_findings(meta: dict, folder: str, at: Callable[[str], int | None]) -> list[Finding]:
    """The spec's rules (the ones skills-ref applies), in the order they are reported."""
    out: list[Finding] = []
    allowed = ", ".join(sorted(ALLOWED_FIELDS))
    for key in sorted(set(meta) - ALLOWED_FIELDS):
        out.append(
            Finding(
                ("unknown", key), at(key), f"unknown frontmatter field '{key}'; allowed: {allowed}"
            )
        )

    if "name" not in meta:
        out.append(Finding(("missing", "name"), 1, "missing required frontmatter field 'name'"))
    else:
        out += _check_name(meta["name"], folder, at("name"))

    def check_text(key: str, limit: int, required: bool) -> None:
        if key not in meta:
            if required:
                out.append(
                    Finding(("missing", key), 1, f"missing required frontmatter field '{key}'")
                )
            return
        value = meta[key]
        if not isinstance(value, str) or (required and not value.strip()):
            kind = "non-empty " if required else ""
            out.append(Finding((key, "type"), at(key), f"'{key}' must be a {kind}string"))
        elif len(value) > limit:
            message = f"{key} is {len(value)} characters; the limit is {limit}"
            out.append(Finding((key, "length"), at(key), message))

    check_text("description", MAX_DESCRIPTION_LENGTH, required=True)
    check_text("compatibility", MAX_COMPATIBILITY_LENGTH, required=False)
    return out


def project_findings(meta: dict, at: Callable[[str], int | None]) -> list[Finding]:
    """This project's rules on fields the spec leaves loose: shapes that agents trip over."""
    out: list[Finding] = []
    if "license" in meta and not isinstance(meta["license"], str):
        out.append(Finding(None, at("license"), "'license' must be a string"))

    if "metadata" in meta:
        value = meta["metadata"]
        if not isinstance(value, dict):
            message = "'metadata' must be a mapping of strings to strings"
            out.append(Finding(None, at("metadata"), message))
        else:
            for key, item in value.items():
                if not isinstance(item, str):
                    kind = "mapping" if isinstance(item, dict) else "list"
                    message = f"metadata '{key}' must be a string, not a {kind}"
                    out.append(Finding(None, at("metadata"), message))

    if "allowed-tools" in meta:
        tools = meta["allowed-tools"]
        as_list = isinstance(tools, list) and all(isinstance(t, str) for t in tools)
        if not (isinstance(tools, str) or as_list):
            message = "'allowed-tools' must be a string or a list of strings"
            out.append(Finding(None, at("allowed-tools"), message))
    return out


def _plain_folder_name(folder: str) -> bool:
    seps = {os.sep, os.altsep} - {None}
    return folder not in ("", ".", "..") and "\0" not in folder and not (seps & set(folder))


def reference_messages(text: str, folder: str) -> list[str] | None:
    """skills-ref's verdict on a SKILL.md with this text in a folder named `folder`.

    None when skills-ref cannot judge: not importable, or it failed on this input. Its
    `validate()` reads the folder by path and reads SKILL.md whole, so it is handed a private
    copy of exactly the text already read under the size caps, in a folder with the name the
    skill is judged by (install checks a staging folder under the name it is about to get).
    """
    try:
        import skills_ref
    except ImportError:
        return None
    if not _plain_folder_name(folder):
        return None
    try:
        with tempfile.TemporaryDirectory(prefix="fsdp-skill-spec-") as tmp:
            root = Path(tmp) / folder
            root.mkdir()
            (root / "SKILL.md").write_text(text, encoding="utf-8", newline="")
            return [str(m) for m in skills_ref.validate(root)]
    except Exception:  # noqa: BLE001 - skills-ref is a demonstration library and the input may
        # be hostile: where it breaks, this module's own rules still judge the skill.
        return None


def reconcile(
    ours: list[Finding], theirs: list[str], at: Callable[[str], int | None]
) -> list[Finding]:
    """The findings skills-ref confirms, then its messages that none of ours explains."""
    confirmed: set[Key] = set()
    unexplained: list[Finding] = []
    known = {f.key for f in ours}
    for message in theirs:
        keys = reference_keys(message)
        confirmed.update(keys)
        if not keys or not set(keys) <= known:
            # One problem a line: a YAML error from strictyaml spans several.
            text = " ".join(message.split())
            unexplained.append(
                Finding(keys[0] if keys else None, _reference_line(message, keys, at), text)
            )
    return [f for f in ours if f.key in confirmed] + unexplained


def check(md: SkillMd, folder: str, rel: str, p: Problems) -> str | None:
    """Report the front matter's problems; return the skill's name (None when it has none)."""
    meta = md.meta or {}
    at = md.key_lines.get
    findings = spec_findings(meta, folder, at)
    theirs = reference_messages(md.text, folder)
    if theirs is not None:
        findings = reconcile(findings, theirs, at)
    for f in findings + project_findings(meta, at):
        p.add(rel, f.line, f.message)
    name = meta.get("name")
    return name.strip() if isinstance(name, str) else None
