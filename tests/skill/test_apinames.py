"""apinames: dotted names -> objects, and when two names denote the same API."""

from __future__ import annotations

import sys
import textwrap

import pytest

from fsdp_skill import apinames

ROOTS = ("fakeapi",)


@pytest.fixture
def fakeapi(tmp_path, monkeypatch):
    """A package shaped like torch's tricky corners, importable only during the test."""
    pkg = tmp_path / "fakeapi"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            import functools
            from . import sub
            # re-export a function over the submodule of the same name, like fsdp.fully_shard
            from .shard import shard
            NOTHING = None

            def _deco(fn):
                @functools.wraps(fn)
                def inner(*a, **k):
                    return fn(*a, **k)
                return inner

            @_deco
            def wrapped():
                pass

            class Thing:
                def method(self):
                    pass

                @classmethod
                def cm(cls):
                    pass

                @staticmethod
                def sm():
                    pass

                @property
                def boom(self):
                    raise RuntimeError("a property that raises")

            instance = Thing()
            """
        )
    )
    (pkg / "shard.py").write_text("def shard():\n    pass\n\nHELPER = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "deep.py").write_text("from fakeapi.shard import shard as alias\n")
    (pkg / "__main__.py").write_text("raise SystemExit('must never run')\n")
    (pkg / "broken.py").write_text("raise RuntimeError('fails at import time')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m == "fakeapi" or m.startswith("fakeapi.")]:
        del sys.modules[name]


def test_resolve_walks_modules_and_attributes(fakeapi):
    import fakeapi
    import fakeapi.sub.deep

    assert apinames.resolve("fakeapi", ROOTS) is fakeapi
    assert apinames.resolve("fakeapi.sub.deep", ROOTS) is fakeapi.sub.deep
    assert apinames.resolve("fakeapi.sub.deep.alias", ROOTS) is fakeapi.shard
    assert apinames.resolve("fakeapi.Thing.method", ROOTS) is fakeapi.Thing.method


def test_function_reexported_over_its_submodule(fakeapi):
    import fakeapi

    # `fakeapi.shard` as an expression is the function, though `fakeapi.shard` imports as a module
    assert apinames.resolve("fakeapi.shard", ROOTS) is fakeapi.shard
    assert callable(apinames.resolve("fakeapi.shard", ROOTS))
    # descending further needs the module
    assert apinames.resolve("fakeapi.shard.HELPER", ROOTS) == 1


@pytest.mark.parametrize(
    "name",
    [
        "fakeapi.nope",
        "fakeapi.sub.nope.deeper",
        "fakeapi..x",
        "fakeapi.1x",
        "",
        "fakeapi.__main__",
        "os.path",
        # failures inside the package are names that do not resolve, not errors
        "fakeapi.broken",
        "fakeapi.broken.thing",
        "fakeapi.instance.boom",
        "fakeapi.sub.deep:alias",  # resolve_name's colon form is not a dotted name
    ],
)
def test_unresolved(fakeapi, name):
    assert apinames.lookup(name, ROOTS) == (False, None)
    assert apinames.resolve(name, ROOTS) is None


def test_roots_limit_what_is_imported(fakeapi):
    import os

    assert apinames.resolve("os.path", ROOTS) is None
    assert apinames.resolve("os.path.join", roots=None) is os.path.join
    assert apinames.resolve("fakeapi.shard") is None  # default roots: torch only


def test_lookup_tells_none_from_missing(fakeapi):
    assert apinames.lookup("fakeapi.NOTHING", ROOTS) == (True, None)
    assert apinames.exists("fakeapi.NOTHING", ROOTS)
    assert not apinames.exists("fakeapi.SOMETHING", ROOTS)


def test_same_object(fakeapi):
    import fakeapi

    r = lambda n: apinames.resolve(n, ROOTS)  # noqa: E731
    assert apinames.same_object(r("fakeapi.shard"), r("fakeapi.sub.deep.alias"))
    assert apinames.same_object(r("fakeapi.wrapped"), fakeapi.wrapped.__wrapped__)
    assert apinames.same_object(r("fakeapi.instance.method"), r("fakeapi.Thing.method"))
    assert apinames.same_object(r("fakeapi.Thing.cm"), fakeapi.Thing.__dict__["cm"])
    assert apinames.same_object(r("fakeapi.Thing.sm"), fakeapi.Thing.__dict__["sm"])
    assert not apinames.same_object(r("fakeapi.shard"), r("fakeapi.wrapped"))
    assert not apinames.same_object(r("fakeapi.nope"), r("fakeapi.nope"))
    assert not apinames.same_object(None, None)


def test_real_torch_names():
    pytest.importorskip("torch")
    fully_shard = apinames.resolve("torch.distributed.fsdp.fully_shard")
    assert callable(fully_shard)
    assert apinames.same_object(
        fully_shard,
        apinames.resolve("torch.distributed.fsdp._fully_shard._fully_shard.fully_shard"),
    )
    assert apinames.exists("torch.distributed.fsdp.FSDPModule")
    assert not apinames.exists("torch.distributed.fsdp.not_a_thing")
