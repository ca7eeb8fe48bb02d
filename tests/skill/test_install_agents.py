"""fsdp-skill install --agent NAME [--scope user|project] and --agent all, under a fake HOME."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fsdp_skill import build
from fsdp_skill.skill import install as I

# Where each agent reads skills, as its documentation states (the URLs are in install.py).
USER = {
    "claude": ".claude/skills",
    "codex": ".agents/skills",
    "agents": ".agents/skills",
    "gemini": ".gemini/skills",
    "cursor": ".cursor/skills",
    "opencode": ".config/opencode/skills",
    "goose": ".agents/skills",
    "copilot": ".copilot/skills",
    "hermes": ".hermes/skills",
}
PROJECT = {
    "claude": ".claude/skills",
    "codex": ".agents/skills",
    "agents": ".agents/skills",
    "gemini": ".gemini/skills",
    "cursor": ".cursor/skills",
    "opencode": ".opencode/skills",
    "goose": ".agents/skills",
    "copilot": ".github/skills",
    "hermes": None,
}
MOVERS = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "HERMES_HOME", "XDG_CONFIG_HOME")


class StubIndex:
    def __init__(self):
        self.calls = 0

    def __call__(self, root: Path) -> Path:
        self.calls += 1
        return root / "references" / "index"


@pytest.fixture
def stub(monkeypatch, fake_root):
    """The fake skill is the one installed; its index build is a stub that counts calls."""
    stub = StubIndex()
    monkeypatch.setenv("FSDP_SKILL_ROOT", str(fake_root))
    monkeypatch.setattr(build, "ensure_index", stub)
    return stub


@pytest.fixture
def home(tmp_path, monkeypatch, stub):
    """A fake HOME, with none of the variables that move an agent's home set."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for var in MOVERS:
        monkeypatch.delenv(var, raising=False)
    return h


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The project folder, as the current directory."""
    p = tmp_path / "project"
    p.mkdir()
    monkeypatch.chdir(p)
    return p


def installed(folder: Path) -> bool:
    return (folder / "pytorch-fsdp" / "SKILL.md").is_file() and (
        folder / "pytorch-fsdp" / "scripts" / "search.py"
    ).is_file()


def test_the_table_covers_every_agent_with_a_cited_source():
    assert set(I.AGENTS) == set(USER) == set(PROJECT)
    for name, agent in I.AGENTS.items():
        assert agent.docs.startswith("https://"), name


@pytest.mark.parametrize("agent", sorted(USER))
def test_user_scope_folder(agent, home, capsys):
    assert I.agent_skills_dir(agent) == home / USER[agent]
    assert I.main(["--agent", agent]) == 0
    assert installed(home / USER[agent])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(
        f"installed pytorch-fsdp into {home / USER[agent] / 'pytorch-fsdp'} ("
    )


@pytest.mark.parametrize("agent", sorted(a for a, p in PROJECT.items() if p))
def test_project_scope_folder(agent, home, project):
    assert I.agent_skills_dir(agent, "project") == project / PROJECT[agent]
    assert I.main(["--agent", agent, "--scope", "project"]) == 0
    assert installed(project / PROJECT[agent])
    assert not any(p.is_dir() for p in home.iterdir())  # nothing written into HOME


def test_hermes_has_no_project_scope(home, capsys):
    with pytest.raises(SystemExit) as e:
        I.main(["--agent", "hermes", "--scope", "project"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "fsdp-skill install: error: hermes reads no project skills folder; use --scope user"
    ]
    with pytest.raises(I.InstallError, match="no project skills folder"):
        I.agent_skills_dir("hermes", "project")


def test_environment_variables_that_move_an_agent_home(home, tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-cfg"))
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    assert I.agent_skills_dir("claude") == tmp_path / "claude-cfg" / "skills"
    assert I.agent_skills_dir("hermes") == tmp_path / "hermes-home" / "skills"
    assert I.agent_skills_dir("opencode") == tmp_path / "xdg" / "opencode" / "skills"
    # Codex reads user skills from ~/.agents/skills whatever CODEX_HOME says; CODEX_HOME only
    # tells `--agent all` where Codex is set up.
    assert I.agent_skills_dir("codex") == home / ".agents" / "skills"
    assert I.agent_home("codex") == tmp_path / "codex-home"
    assert I.agent_home("goose") == tmp_path / "xdg" / "goose"


def test_all_installs_once_per_folder_for_the_agents_that_are_set_up(home, project, stub, capsys):
    for d in (".claude", ".codex", ".config/goose", ".hermes"):
        (home / d).mkdir(parents=True)
    assert I.agents_present() == ["claude", "codex", "goose", "hermes"]
    assert I.main(["--agent", "all"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    dests = [line.split(" into ", 1)[1].split(" (", 1)[0] for line in out]
    assert dests == [
        str(home / rel / "pytorch-fsdp")
        for rel in (".claude/skills", ".agents/skills", ".hermes/skills")
    ]
    for rel in (".claude/skills", ".agents/skills", ".hermes/skills"):
        assert installed(home / rel)
    for rel in (".cursor", ".gemini", ".copilot", ".config/opencode"):
        assert not (home / rel).exists()
    assert stub.calls == 1  # built once, copied three times

    # Again, project scope: Hermes is skipped with a note, Codex and goose share .agents/skills.
    assert I.main(["--agent", "all", "--scope", "project"]) == 0
    captured = capsys.readouterr()
    assert "skipping hermes: it reads no project skills folder" in captured.err
    assert installed(project / ".claude" / "skills") and installed(project / ".agents" / "skills")
    assert len(captured.out.strip().splitlines()) == 2


def test_all_with_no_agent_set_up_is_one_line(home, capsys):
    assert I.main(["--agent", "all"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fsdp-skill install: no agent found (none of ")


def test_reinstall_through_an_agent_swaps_the_folder_in_whole(home, fake_root):
    assert I.main(["--agent", "cursor"]) == 0
    dest = home / ".cursor" / "skills" / "pytorch-fsdp"
    inode = os.stat(dest).st_ino
    (fake_root / "references" / "guides" / "new.md").write_text("# new\n")
    assert I.main(["--agent", "cursor"]) == 0
    assert (dest / "references" / "guides" / "new.md").is_file()
    assert os.stat(dest).st_ino != inode  # a new folder took the name, not a copy over the old one
    assert sorted(p.name for p in dest.parent.iterdir() if not p.name.endswith(".lock")) == [
        "pytorch-fsdp"
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--agent", "vim"],
        ["--agent", "claude", "--scope", "global"],
        ["--target", "x", "--scope", "project"],
    ],
)
def test_bad_agent_arguments_are_usage_errors(argv, home, capsys):
    with pytest.raises(SystemExit) as e:
        I.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fsdp-skill install: error: "), err
