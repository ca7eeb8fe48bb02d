"""Resolve dotted API names (``torch.distributed.fsdp.fully_shard``) against the installed torch.

Shared by ``fsdp-skill validate`` (every ``torch.*`` name SKILL.md mentions must exist) and the eval
command (is the object an answer names the same object the gold answer names?).
"""

from __future__ import annotations

import inspect
import pkgutil
import sys
import warnings

# Importing a module runs its code, and names can come from model output: only packages under
# these roots are ever imported unless the caller asks for others.
DEFAULT_ROOTS = ("torch",)

_MISSING = object()


def lookup(name: str, roots: tuple[str, ...] | None = DEFAULT_ROOTS) -> tuple[bool, object]:
    """(found, object) for a dotted name; found tells a real ``None`` value from a missing name.

    ``pkgutil.resolve_name`` does the walk: it imports the longest module prefix, then takes the
    rest as attributes. Around it: only dotted identifiers under `roots` are tried, never a
    `__main__` module, and any failure (an import that raises, a property that raises) is a
    name that does not resolve.
    """
    name = name.strip()
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        return False, None
    # A `__main__` module runs its program when imported.
    if "__main__" in parts:
        return False, None
    if roots is not None and parts[0] not in roots:
        return False, None

    with warnings.catch_warnings():
        # Deprecated modules warn on import; the name still resolves.
        warnings.simplefilter("ignore")
        try:
            obj = pkgutil.resolve_name(name)
        except Exception:  # noqa: BLE001 - any failure means "does not resolve"
            return False, None
        if len(parts) > 1 and obj is sys.modules.get(name):
            # The name ends at a module: evaluate it as the expression `a.b.c` would, so a
            # function re-exported over its own submodule (`fsdp.fully_shard`) wins. Deeper names
            # still descend through the module, as resolve_name does.
            shadow = _getattr(sys.modules.get(".".join(parts[:-1])), parts[-1])
            if shadow is not _MISSING:
                obj = shadow
    return True, obj


def _getattr(obj: object, attr: str) -> object:
    try:
        return getattr(obj, attr)
    except Exception:  # noqa: BLE001 - properties and lazy loaders may raise anything
        return _MISSING


def resolve(name: str, roots: tuple[str, ...] | None = DEFAULT_ROOTS) -> object | None:
    """The object a dotted name denotes in this interpreter, or None when it does not resolve.

    Imports the longest importable module prefix, then walks the rest with getattr (see
    `lookup`). Only names under `roots` are imported (``None`` allows any). A name whose value is
    itself ``None`` also gives None; use `lookup` to tell the two apart.
    """
    return lookup(name, roots)[1]


def exists(name: str, roots: tuple[str, ...] | None = DEFAULT_ROOTS) -> bool:
    return lookup(name, roots)[0]


def _canonical(obj: object) -> object:
    """Strip the wrappers that make one API object look like several."""
    for _ in range(32):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
            continue
        if inspect.ismethod(obj):
            obj = obj.__func__
            continue
        if isinstance(obj, property) and obj.fget is not None:
            obj = obj.fget
            continue
        if callable(obj) and not inspect.ismodule(obj) and not inspect.isclass(obj):
            try:
                wrapped = inspect.getattr_static(obj, "__wrapped__", None)
            except Exception:  # noqa: BLE001
                wrapped = None
            if wrapped is not None and wrapped is not obj:
                obj = wrapped
                continue
        break
    return obj


def same_object(a: object, b: object) -> bool:
    """True when two resolved objects are the same API (re-exports, decorators, bound methods).

    ``None`` (an unresolved name) is never the same as anything.
    """
    if a is None or b is None:
        return False
    if a is b:
        return True
    return _canonical(a) is _canonical(b)
