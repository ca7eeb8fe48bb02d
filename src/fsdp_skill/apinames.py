"""Resolve dotted API names (``torch.distributed.fsdp.fully_shard``) against the installed torch.

Shared by ``fsdp-skill validate`` (every ``torch.*`` name SKILL.md mentions must exist) and the eval
command (is the object an answer names the same object the gold answer names?).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings

# Importing a module runs its code, and names can come from model output: only packages under
# these roots are ever imported unless the caller asks for others.
DEFAULT_ROOTS = ("torch",)

_MISSING = object()


def lookup(name: str, roots: tuple[str, ...] | None = DEFAULT_ROOTS) -> tuple[bool, object]:
    """(found, object) for a dotted name; found tells a real ``None`` value from a missing name."""
    parts = name.strip().split(".")
    if not parts or not all(p.isidentifier() for p in parts):
        return False, None
    # A `__main__` module runs its program when imported.
    if "__main__" in parts:
        return False, None
    if roots is not None and parts[0] not in roots:
        return False, None

    with warnings.catch_warnings():
        # Deprecated modules warn on import; the name still resolves.
        warnings.simplefilter("ignore")
        depth = 0
        for i in range(len(parts), 0, -1):
            try:
                importlib.import_module(".".join(parts[:i]))
            except Exception:  # noqa: BLE001 - any failure means "not importable as a module"
                continue
            depth = i
            break
        if depth == 0:
            return False, None

        obj: object = sys.modules[parts[0]]
        for j in range(1, len(parts)):
            module = sys.modules.get(".".join(parts[: j + 1]), _MISSING)
            if j + 1 < depth or (j + 1 == depth < len(parts)):
                # Still descending the module path: the module itself, even where the package
                # re-exports a function of the same name over it.
                obj = module
            elif j + 1 == depth:
                # The name ends at a module: evaluate it as the expression `a.b.c` would, so a
                # function re-exported over its own submodule (`fsdp.fully_shard`) wins.
                obj = _getattr(obj, parts[j])
                if obj is _MISSING:
                    obj = module
            else:
                obj = _getattr(obj, parts[j])
            if obj is _MISSING:
                return False, None
        return True, obj


def _getattr(obj: object, attr: str) -> object:
    try:
        return getattr(obj, attr)
    except Exception:  # noqa: BLE001 - properties and lazy loaders may raise anything
        return _MISSING


def resolve(name: str, roots: tuple[str, ...] | None = DEFAULT_ROOTS) -> object | None:
    """The object a dotted name denotes in this interpreter, or None when it does not resolve.

    Imports the longest importable module prefix, then walks the rest with getattr. Only names
    under `roots` are imported (``None`` allows any). A name whose value is itself ``None``
    also gives None; use `lookup` to tell the two apart.
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
