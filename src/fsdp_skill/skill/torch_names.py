"""Every `torch.*` name SKILL.md writes as inline code must resolve in the installed torch.

Only inline code counts: a name in backticks reads as an API reference, while a code block holds
a whole example and prose may mention a name loosely.
"""

from __future__ import annotations

import importlib.util
import re

from fsdp_skill import apinames
from fsdp_skill.skill.problems import Problems

_TORCH_NAME = re.compile(r"(?<![\w.])torch(?:\.[A-Za-z_]\w*)+")


def names(code_spans: list[tuple[int, str]]) -> dict[str, int]:
    """Every `torch.*` dotted name inside the code spans, with the first line it appears on."""
    found: dict[str, int] = {}
    for line, text in code_spans:
        for m in _TORCH_NAME.finditer(text):
            found.setdefault(m.group(0), line)
    return found


def installed_version() -> str | None:
    """The installed torch's version; None when not installed; raises when it will not import."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return str(torch.__version__)


def check(code_spans: list[tuple[int, str]], rel: str, p: Problems) -> tuple[int, str | None]:
    """Report the names that do not resolve; return (names checked, torch version)."""
    found = names(code_spans)
    if not found:
        return 0, None
    try:
        version = installed_version()
    except Exception as e:  # noqa: BLE001 - a broken torch install is a finding, not a crash
        why = f"{type(e).__name__}: {e}"
        p.add(rel, None, f"torch does not import ({why}), so torch.* names cannot be checked")
        return len(found), None
    if version is None:
        p.add(rel, None, f"torch is not installed, so {len(found)} torch.* names cannot be checked")
        return len(found), None
    for name, line in found.items():
        if not apinames.exists(name):
            p.add(rel, line, f"'{name}' does not resolve in the installed torch {version}")
    return len(found), version
