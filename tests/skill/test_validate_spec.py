"""spec: skills-ref decides the spec's rules when it is installed; line numbers and wording stay
this project's, and its stricter rules stand either way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fsdp_skill.skill import spec
from fsdp_skill.skill import validate as V

skills_ref = pytest.importorskip("skills_ref")


def problems(root, **kw):
    return V.validate(root, run_scripts=False, check_torch=False, **kw)


@pytest.fixture
def calls(monkeypatch):
    """skills_ref.validate, still doing its job, with every folder it was handed recorded."""
    seen: list[tuple[str, str]] = []
    real = skills_ref.validate

    def spy(root):
        seen.append((Path(root).name, (Path(root) / "SKILL.md").read_text(encoding="utf-8")))
        return real(root)

    monkeypatch.setattr(skills_ref, "validate", spy)
    return seen


def test_skills_ref_judges_a_copy_named_as_the_skill(skill, calls):
    root = skill("staging-123", front="name: demo-skill\ndescription: d\n")
    assert problems(root, folder_name="demo-skill") == []
    assert calls == [("demo-skill", (root / "SKILL.md").read_text(encoding="utf-8"))]
    assert "must match the folder name 'staging-123'" in problems(root)[0]


def test_a_finding_skills_ref_does_not_confirm_is_dropped(skill, monkeypatch):
    root = skill("Demo-Skill", front="name: Demo-Skill\ndescription: d\nlicense:\n  - MIT\n")
    monkeypatch.setattr(skills_ref, "validate", lambda root: [])
    # The spec's rule (lowercase) is skills-ref's call; the project's own rule still stands.
    assert problems(root) == [f"{root}/SKILL.md:4: 'license' must be a string"]


def test_a_message_no_rule_explains_is_printed_at_its_field(skill, monkeypatch):
    root = skill(front="name: demo-skill\ndescription: d\n")
    news = [
        "Field 'description' must not end without a full stop",
        "Invalid YAML in frontmatter: while scanning\n  in line 3",
    ]
    monkeypatch.setattr(skills_ref, "validate", lambda root: news)
    assert problems(root) == [
        f"{root}/SKILL.md:3: Field 'description' must not end without a full stop",
        f"{root}/SKILL.md: Invalid YAML in frontmatter: while scanning in line 3",
    ]


def test_a_confirmed_finding_keeps_this_projects_line_and_wording(skill, calls):
    root = skill(front="name: demo-skill\ndescription: d\nversion: 1\n")
    assert problems(root) == [
        f"{root}/SKILL.md:4: unknown frontmatter field 'version'; allowed: "
        "allowed-tools, compatibility, description, license, metadata, name"
    ]
    assert len(calls) == 1


def test_skills_ref_breaking_leaves_the_own_rules(skill, monkeypatch):
    def boom(root):
        raise RecursionError("deep")

    monkeypatch.setattr(skills_ref, "validate", boom)
    root = skill("Demo", front="name: Demo\ndescription: d\n")
    assert problems(root) == [f"{root}/SKILL.md:2: name 'Demo' must be lowercase"]


@pytest.mark.parametrize("folder", ["a/b", ".."])
def test_a_name_no_folder_can_have_is_judged_by_the_own_rules(skill, calls, folder):
    root = skill(front="name: demo-skill\ndescription: d\n")
    got = problems(root, folder_name=folder)
    assert calls == []
    assert got == [f"{root}/SKILL.md:2: name 'demo-skill' must match the folder name '{folder}'"]


def test_without_skills_ref_the_own_rules_judge(skill, monkeypatch):
    monkeypatch.setitem(sys.modules, "skills_ref", None)
    assert spec.reference_messages("---\nname: x\n---\n", "x") is None
    root = skill("Demo", front="name: Demo\ndescription: d\n")
    assert problems(root) == [f"{root}/SKILL.md:2: name 'Demo' must be lowercase"]


BROKEN = [
    "name: Bad--Name-\ndescription: ''\nversion: 2\nzeta: 1\ncompatibility:\n  - a\n",
    "name: " + "a" * 65 + "\ndescription: " + "x" * 1025 + "\ncompatibility: " + "c" * 501 + "\n",
    "name: demo_skill\n",
    "description: d\n",
    "name:\ndescription: d\n",
]


@pytest.mark.parametrize("front", BROKEN, ids=range(len(BROKEN)))
def test_every_skills_ref_message_maps_to_a_rule(tmp_path, front):
    """skills-ref's wording is what `spec` matches on: a new release that rewords a message
    fails here, before its messages start printing without this project's line numbers."""
    from conftest import write_skill

    root = write_skill(tmp_path, "demo-skill", front=front)
    messages = skills_ref.validate(root)
    assert messages
    for message in messages:
        assert spec.reference_keys(message), message
