"""Fixtures for the validate / install tests: tiny skill folders built in tmp_path."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
try:
    import fsdp_skill.skill  # noqa: F401
except ImportError:  # not pip-installed: use the checkout
    sys.path.insert(0, str(REPO / "src"))

GOOD_FRONT = "name: {name}\ndescription: Checks things. Use when testing the validator.\n"
HELP_SCRIPT = "import argparse\nargparse.ArgumentParser(description='demo').parse_args()\n"


def write_skill(
    parent: Path,
    name: str = "demo-skill",
    *,
    front: str | None = None,
    body: str = "# Demo\n\nNothing to see.\n",
    files: dict[str, str] | None = None,
    raw: str | None = None,
    skill_md: str = "SKILL.md",
) -> Path:
    """A skill folder `parent/name`; `raw` replaces the whole SKILL.md, `front` its frontmatter."""
    root = parent / name
    root.mkdir(parents=True, exist_ok=True)
    if raw is None:
        fm = GOOD_FRONT.format(name=name) if front is None else textwrap.dedent(front)
        raw = f"---\n{fm}---\n{textwrap.dedent(body)}"
    (root / skill_md).write_text(raw, encoding="utf-8")
    for rel, text in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def skill(tmp_path):
    """Factory: skill(name=..., front=..., body=..., files=...) -> folder."""

    def make(name: str = "demo-skill", **kwargs) -> Path:
        return write_skill(tmp_path, name, **kwargs)

    return make


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
    """A complete, valid pytorch-fsdp source tree (with its own tiny fsdp_skill package)."""
    monkeypatch.delenv("FSDP_SKILL_DATA_DIR", raising=False)
    root = write_skill(
        tmp_path / "src-tree",
        "pytorch-fsdp",
        body="# FSDP\n\nRun `scripts/search.py` and read `references/guides/start.md`.\n",
        files={
            "scripts/search.py": (
                "import os, sys\n"
                "sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src'))\n"
                "from fsdp_skill import marker\n"
                "print(os.path.realpath(marker.__file__))\n"
            ),
            "scripts/_common.py": "X = 1\n",
            "scripts/__pycache__/search.cpython-311.pyc": "junk",
            "references/README.md": "# refs\n",
            "references/guides/start.md": "# start\n",
            "references/api/torch.distributed.fsdp.md": "# api\n",
            "references/index/index.bin": "INDEX",
            "references/.cache/page.html": "cached",
            "references/.index.tmp-1234/index.bin": "partial",
            "references/index.tmp-99/index.bin": "partial",
            "assets/template.yaml": "a: b\n",
            "src/fsdp_skill/__init__.py": "",
            "src/fsdp_skill/marker.py": "HERE = True\n",
            "src/fsdp_skill/__pycache__/marker.cpython-311.pyc": "junk",
            "tests/test_nothing.py": "",
            "README.md": "# dev readme\n",
        },
    )
    return root
