"""fsdp-skill validate: every rule, on tiny skill folders, and agreement with skills-ref."""

from __future__ import annotations

import sys

import pytest
from conftest import HELP_SCRIPT, REPO, write_skill

from fsdp_skill.skill import torch_names
from fsdp_skill.skill import validate as V


def fm_problems(root):
    """Only the checks that need neither subprocesses nor torch."""
    return V.validate(root, run_scripts=False, check_torch=False)


def only(problems, needle):
    assert len(problems) == 1, problems
    assert needle in problems[0], problems
    return problems[0]


@pytest.fixture(params=["skills-ref", "own-rules"])
def spec_layer(request, monkeypatch):
    """Each front matter test twice: skills-ref judging the spec's rules, then the fallback."""
    if request.param == "skills-ref":
        pytest.importorskip("skills_ref")
    else:
        monkeypatch.setitem(sys.modules, "skills_ref", None)  # `import skills_ref` now fails
    return request.param


# --------------------------------------------------------------------------- frontmatter

LONG = "x" * 1025
# (id, frontmatter, expected substring or None for "passes", line, stricter-than-skills-ref)
FRONT_CASES = [
    ("minimal", "name: {n}\ndescription: d\n", None, None, False),
    (
        "all-fields",
        "name: {n}\ndescription: d\nlicense: MIT\ncompatibility: Linux\n"
        "metadata:\n  author: me\n  version: 1.0\nallowed-tools: Bash Read\n",
        None,
        None,
        False,
    ),
    (
        "tools-list",
        "name: {n}\ndescription: d\nallowed-tools:\n  - Bash\n  - Read\n",
        None,
        None,
        False,
    ),
    ("folded", "name: {n}\ndescription: >\n  long\n  text\n", None, None, False),
    (
        "unknown-field",
        "name: {n}\ndescription: d\nversion: 1\n",
        "unknown frontmatter field 'version'",
        4,
        False,
    ),
    ("missing-name", "description: d\n", "missing required frontmatter field 'name'", 1, False),
    ("missing-desc", "name: {n}\n", "missing required frontmatter field 'description'", 1, False),
    ("empty-name", "name:\ndescription: d\n", "'name' must be a non-empty string", 2, False),
    (
        "empty-desc",
        "name: {n}\ndescription: ''\n",
        "'description' must be a non-empty string",
        3,
        False,
    ),
    (
        "desc-1025",
        "name: {n}\ndescription: " + LONG + "\n",
        "description is 1025 characters",
        3,
        False,
    ),
    ("desc-1024", "name: {n}\ndescription: " + LONG[:1024] + "\n", None, None, False),
    (
        "compat-501",
        "name: {n}\ndescription: d\ncompatibility: " + "c" * 501 + "\n",
        "compatibility is 501 characters",
        4,
        False,
    ),
    (
        "compat-500",
        "name: {n}\ndescription: d\ncompatibility: " + "c" * 500 + "\n",
        None,
        None,
        False,
    ),
    (
        "compat-list",
        "name: {n}\ndescription: d\ncompatibility:\n  - a\n",
        "'compatibility' must be a string",
        4,
        False,
    ),
    ("flow-map", "name: {n}\ndescription: d\nmetadata: {{a: b}}\n", "flow-style {...}", 4, False),
    (
        "flow-seq",
        "name: {n}\ndescription: d\nallowed-tools: [a, b]\n",
        "flow-style [...]",
        4,
        False,
    ),
    ("anchor", "name: &x {n}\ndescription: d\n", "YAML anchor &x", 2, False),
    ("tag", "name: !!str {n}\ndescription: d\n", "YAML tag", 2, False),
    (
        "duplicate",
        "name: {n}\ndescription: d\ndescription: e\n",
        "duplicate key 'description'",
        4,
        False,
    ),
    ("bad-yaml", "name: {n}\ndescription: d\n  bad: indent\n", "not valid YAML", None, False),
    ("tab", "name:\t{n}\ndescription: d\n", "not valid YAML", 2, False),
    ("not-mapping", "- a\n- b\n", "must be a YAML mapping", 1, False),
    # skills-ref passes this one, having silently cut the description at '---'
    ("dash-in-desc", "name: {n}\ndescription: a --- b\n", "'---' inside the frontmatter", 3, True),
    (
        "metadata-nested",
        "name: {n}\ndescription: d\nmetadata:\n  a:\n    b: c\n",
        "metadata 'a' must be a string",
        4,
        True,
    ),
    (
        "metadata-scalar",
        "name: {n}\ndescription: d\nmetadata: nope\n",
        "'metadata' must be a mapping",
        4,
        True,
    ),
    (
        "tools-nested",
        "name: {n}\ndescription: d\nallowed-tools:\n  a: b\n",
        "'allowed-tools' must be",
        4,
        True,
    ),
    (
        "license-list",
        "name: {n}\ndescription: d\nlicense:\n  - MIT\n",
        "'license' must be a string",
        4,
        True,
    ),
]


@pytest.mark.usefixtures("spec_layer")
@pytest.mark.parametrize("case", FRONT_CASES, ids=[c[0] for c in FRONT_CASES])
def test_frontmatter_rules(skill, case):
    _, front, needle, line, _ = case
    root = skill(front=front.format(n="demo-skill"))
    problems = fm_problems(root)
    if needle is None:
        assert problems == []
        return
    text = only(problems, needle) if needle != "not valid YAML" else problems[0]
    assert needle in text
    if line is not None:
        assert f"SKILL.md:{line}: " in text


NAME_CASES = [
    ("Demo-Skill", "must be lowercase"),
    ("-demo", "must not start or end with a hyphen"),
    ("demo-", "must not start or end with a hyphen"),
    ("demo--skill", "consecutive hyphens"),
    ("demo_skill", "may only contain letters, digits and hyphens"),
    ("a" * 65, "65 characters; the limit is 64"),
]


@pytest.mark.usefixtures("spec_layer")
@pytest.mark.parametrize("name,needle", NAME_CASES, ids=[c[0][:10] for c in NAME_CASES])
def test_name_rules(skill, name, needle):
    # Folder named like the skill, so only the rule under test fires.
    root = skill(name, front=f"name: {name}\ndescription: d\n")
    assert any(needle in p and "SKILL.md:2:" in p for p in fm_problems(root)), fm_problems(root)


@pytest.mark.usefixtures("spec_layer")
def test_name_limits_pass(skill):
    for name in ("a" * 64, "pdf2-x9", "a"):
        assert fm_problems(skill(name, front=f"name: {name}\ndescription: d\n")) == []


@pytest.mark.usefixtures("spec_layer")
def test_name_must_match_folder(skill):
    root = skill("folder-name", front="name: other-name\ndescription: d\n")
    only(fm_problems(root), "must match the folder name 'folder-name'")
    # install checks a staging folder under the name it will get
    assert V.validate(root, run_scripts=False, check_torch=False, folder_name="other-name") == []


@pytest.mark.parametrize(
    "raw,needle",
    [
        ("# no frontmatter\n", "must start with YAML frontmatter"),
        ("---\nname: x\n", "not closed with ---"),
        ("\ufeff---\nname: x\n---\n", "must start with YAML frontmatter"),
    ],
    ids=["none", "unclosed", "bom"],
)
def test_frontmatter_delimiters(skill, raw, needle):
    only(fm_problems(skill(raw=raw)), needle)


def test_missing_and_lowercase_skill_md(tmp_path, skill):
    (tmp_path / "empty").mkdir()
    only(fm_problems(tmp_path / "empty"), "SKILL.md: missing")
    root = skill(skill_md="skill.md")
    only(fm_problems(root), "rename to SKILL.md")


def test_not_utf8(skill):
    root = skill()
    (root / "SKILL.md").write_bytes(b"---\nname: demo-skill\ndescription: \xff\n---\n")
    only(fm_problems(root), "not valid UTF-8")


def test_path_that_is_missing_or_a_file(tmp_path):
    only(fm_problems(tmp_path / "nope"), "does not exist")
    (tmp_path / "f").write_text("x")
    only(fm_problems(tmp_path / "f"), "is not a folder")


def test_agrees_with_skills_ref(tmp_path):
    """Our verdict equals the reference validator's on every case it also judges."""
    skills_ref = pytest.importorskip("skills_ref")
    cases = [(c[0], c[1].format(n="demo-skill")) for c in FRONT_CASES if not c[4]]
    cases += [(f"name-{n[:8]}", f"name: {n}\ndescription: d\n") for n, _ in NAME_CASES]
    cases += [("mismatch", "name: other\ndescription: d\n")]
    for i, (case_id, front) in enumerate(cases):
        name = "demo-skill"
        if case_id.startswith("name-"):
            name = front.split("\n")[0][len("name: ") :]
        root = write_skill(tmp_path / str(i), name, front=front)
        theirs = skills_ref.validate(root)
        ours = fm_problems(root)
        assert bool(theirs) == bool(ours), (case_id, theirs, ours)


def test_both_spec_layers_print_the_same_lines(tmp_path, monkeypatch):
    """skills-ref judging or the fallback alone: the same lines, on the real SKILL.md and on
    every broken case, including the ones where this project is stricter."""
    pytest.importorskip("skills_ref")
    folders = [(REPO, "pytorch-fsdp")]  # a checkout's folder may be named anything
    for i, case in enumerate(FRONT_CASES):
        folders.append(
            (write_skill(tmp_path / f"f{i}", front=case[1].format(n="demo-skill")), None)
        )
    for i, (name, _) in enumerate(NAME_CASES):
        folders.append(
            (write_skill(tmp_path / f"n{i}", name, front=f"name: {name}\ndescription: d\n"), None)
        )
    folders.append((write_skill(tmp_path / "m", front="name: other\ndescription: d\n"), None))

    def run():
        return [
            V.validate(root, run_scripts=False, check_torch=False, folder_name=name)
            for root, name in folders
        ]

    judged = run()
    monkeypatch.setitem(sys.modules, "skills_ref", None)
    assert run() == judged
    # A fresh clone has not built references/api yet; nothing else may be wrong with it.
    assert [p for p in judged[0] if "(build output:" not in p] == []
    broken = [c[2] is not None for c in FRONT_CASES] + [True] * (len(NAME_CASES) + 1)
    assert [bool(p) for p in judged[1:]] == broken


# --------------------------------------------------------------------------- body and paths


def test_body_line_limit(skill):
    assert fm_problems(skill("a-skill", body="line\n" * (V.MAX_BODY_LINES - 1))) == []
    only(fm_problems(skill("b-skill", body="line\n" * V.MAX_BODY_LINES)), "body is 500 lines")
    # blank lines around the body do not count
    assert fm_problems(skill("c-skill", body="\n\n" + "line\n" * 499 + "\n\n\n")) == []


BODY = """\
# Demo

Run `scripts/run.py` then read [the guide](references/guide.md "Guide") and
references/gone.md. The folder assets/ holds templates; see [up](../x.md), [abs](/etc/passwd),
[web](https://example.com/scripts/nope.py), [anchor](#demo) and [mail](mailto:a@b.c).
Generated: references/api/torch.md. Placeholder: references/guides/<topic>.md.

```bash
python scripts/missing.py --help
```

See [section](references/guide.md#part) and `references/dir/`.
"""


def test_paths(skill):
    files = {
        "scripts/run.py": HELP_SCRIPT,
        "references/guide.md": "# g\n",
        "references/guides/x.md": "# x\n",
        "assets/t.txt": "t",
    }
    problems = fm_problems(skill(body=BODY, files=files))
    expected = [
        (8, "'references/gone.md', which does not exist"),
        (8, "'../x.md' points outside the skill folder"),
        (8, "'/etc/passwd' is an absolute path"),
        (10, "'references/api/torch.md', which does not exist (build output"),
        (13, "'scripts/missing.py', which does not exist"),
        (16, "folder 'references/dir/', which does not exist"),
    ]
    assert len(problems) == len(expected), problems
    for line, needle in expected:
        assert any(f"SKILL.md:{line}: " in got and needle in got for got in problems), (
            line,
            needle,
            problems,
        )


# --------------------------------------------------------------------------- scripts


def test_scripts_answer_help(skill):
    root = skill(
        files={
            "scripts/good.py": HELP_SCRIPT,
            "scripts/bad.py": "import sys\nsys.exit('cannot import torch.distributed')\n",
            "scripts/_helper.py": "raise SystemExit(3)\n",
            "scripts/notes.txt": "not a script",
        }
    )
    problems = V.validate(root, check_torch=False, run_scripts=True)
    only(problems, "scripts/bad.py: '--help' exited 1: cannot import torch.distributed")


def test_script_timeout(skill):
    root = skill(files={"scripts/slow.py": "import time\ntime.sleep(30)\n"})
    only(
        V.validate(root, check_torch=False, run_scripts=True, timeout=0.5),
        "did not finish within 0.5 s",
    )


def test_scripts_run_from_a_neutral_cwd(skill, monkeypatch):
    # A script that only works from the skill root would break for an agent elsewhere.
    root = skill(files={"scripts/rel.py": "open('SKILL.md').close()\n"})
    monkeypatch.chdir(root)
    only(V.validate(root, check_torch=False, run_scripts=True), "scripts/rel.py: '--help' exited 1")


# --------------------------------------------------------------------------- torch names

TORCH_BODY = """\
# Demo

Use `torch.distributed.fsdp.fully_shard` and `torch.distributed.fsdp.FSDPModule.reshard`,
`torch.compile(model, mode="max-autotune")`, ``torch.distributed.tensor.DTensor``,
`torch.distributed.fsdp.not_a_thing` and `model.to(torch.bfloat16)`; torch.nope outside code.

```python
torch.also_not_checked_in_fences()
```
"""


def test_torch_names(skill):
    pytest.importorskip("torch")
    report = V.check(skill(body=TORCH_BODY), run_scripts=False)
    only(report.problems, "SKILL.md:9: 'torch.distributed.fsdp.not_a_thing' does not resolve")
    assert report.torch_names == 6


def test_torch_not_installed_is_one_line(skill, monkeypatch):
    monkeypatch.setattr(torch_names, "installed_version", lambda: None)
    got = only(V.validate(skill(body=TORCH_BODY), run_scripts=False), "torch is not installed")
    assert "6 torch.* names cannot be checked" in got


def test_torch_broken_is_one_line(skill, monkeypatch):
    def boom():
        raise OSError("libtorch.so: cannot open")

    monkeypatch.setattr(torch_names, "installed_version", boom)
    only(V.validate(skill(body=TORCH_BODY), run_scripts=False), "torch does not import (OSError")


# --------------------------------------------------------------------------- command line


def test_main_ok(skill, capsys):
    root = skill(body="Run `scripts/ok.py`.\n", files={"scripts/ok.py": HELP_SCRIPT})
    assert V.main([str(root), "--no-torch", "--run-scripts"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("OK ") and "1 scripts answer --help" in out[0]


def test_main_problems(skill, capsys):
    root = skill(front="name: Bad\ndescription: d\n")
    assert V.main([str(root), "--no-scripts", "--no-torch"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out and all(line.startswith(f"{root}/SKILL.md:2: ") for line in out)


def test_main_default_root_is_judged_by_its_install_name(skill, monkeypatch, capsys):
    # a checkout's folder has whatever name it was cloned under; the installed copy is pytorch-fsdp
    root = skill("any-clone-name", front="name: pytorch-fsdp\ndescription: d\n")
    monkeypatch.setenv("FSDP_SKILL_ROOT", str(root))  # what paths.skill_root() answers
    assert V.main(["--no-scripts", "--no-torch"]) == 0
    assert V.main([str(root), "--no-scripts", "--no-torch"]) == 1
    assert "must match the folder name 'any-clone-name'" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv", [["/no/such/dir"], ["--timeout", "0"], ["--jobs", "0"], ["--bogus"]]
)
def test_main_bad_input_is_one_line(argv, capsys):
    try:
        rc = V.main(argv)
    except SystemExit as e:  # argparse errors
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fsdp-skill validate: "), err


def test_runs_as_module(skill):
    import subprocess

    root = skill()
    proc = subprocess.run(
        [sys.executable, "-m", "fsdp_skill.skill.validate", str(root), "--no-torch"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert proc.returncode == 0 and proc.stdout.startswith("OK "), proc


def _env():
    import os

    from conftest import REPO

    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    )
