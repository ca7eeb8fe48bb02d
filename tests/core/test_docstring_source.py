"""The docstring source on the installed torch: pages, URLs, signatures, no empty entries."""

from pathlib import Path

import pytest

from fsdp_skill.chunking import chunk_page
from fsdp_skill.pages import read_page
from fsdp_skill.sources.docstrings import own_doc, render_object

torch = pytest.importorskip("torch")
SHORT = ".".join(torch.__version__.split("+")[0].split(".")[:2])


def test_own_doc_never_returns_a_parents_text():
    class Parent:
        """Parent text."""

    class Child(Parent):
        pass

    assert own_doc(Parent) == "Parent text."
    assert own_doc(Child) is None


def test_undocumented_function_is_skipped():
    def f(x):
        return x

    assert render_object(["pkg.f"], f, 2) is None


def test_pages_cover_the_distributed_stack(built_data):
    api = Path(built_data) / "api"
    expected = [
        "distributed",
        "fsdp",
        "distributed.fsdp.fully_shard",
        "distributed.checkpoint",
        "distributed.tensor",
        "distributed.tensor.parallel",
        "distributed.algorithms.join",
        "ddp_comm_hooks",
        "distributed.optim",
        "elastic/run",
        "generated/torch.nn.parallel.DistributedDataParallel",
        "checkpoint",
        "data",
        "generated/torch.nn.utils.clip_grad_norm_",
    ]
    for page in expected:
        meta, body = read_page(api / f"{page}.md")
        assert meta["url"] == f"https://docs.pytorch.org/docs/{SHORT}/{page}.html"
        assert meta["torch_version"] == str(torch.__version__)
        assert body.strip(), page


def test_fully_shard_entry(built_data):
    chunks = chunk_page(Path(built_data) / "api" / "distributed.fsdp.fully_shard.md")
    first = [c for c in chunks if c.objects == ["torch.distributed.fsdp.fully_shard"]]
    assert first, "fully_shard has no chunk"
    c = first[0]
    assert c.url.endswith(
        f"/docs/{SHORT}/distributed.fsdp.fully_shard.html#torch.distributed.fsdp.fully_shard"
    )
    assert c.text.startswith("```python\ntorch.distributed.fsdp.fully_shard(module, *, mesh")
    # Continuation chunks repeat the signature so each chunk stands alone.
    assert all(x.text.startswith("```python\ntorch.distributed.fsdp.fully_shard(") for x in first)
    assert any("**Args:**" in x.text or "- **mesh**" in x.text for x in first)
    methods = {o for x in chunks for o in x.objects}
    assert {
        "torch.distributed.fsdp.FSDPModule.set_requires_gradient_sync",
        "torch.distributed.fsdp.MixedPrecisionPolicy",
        "torch.distributed.fsdp.CPUOffloadPolicy",
    } <= methods


def test_no_empty_or_furniture_chunks(built_data):
    for path in (Path(built_data) / "api").rglob("*.md"):
        for c in chunk_page(path):
            assert c.text.strip(), c.id
            prose = "".join(c.text.split("```")[::2])  # roles inside code comments stay as written
            assert ".. note::" not in prose and ":class:`" not in prose, c.id
            assert "# xdoctest" not in c.text, c.id


def test_aliases_collapse_into_one_entry(built_data):
    chunks = chunk_page(Path(built_data) / "api" / "distributed.algorithms.join.md")
    join = [c for c in chunks if "torch.distributed.algorithms.join.Join" in c.objects]
    assert join and "torch.distributed.algorithms.Join" in join[0].objects


def test_docs_version_for_releases_and_nightlies():
    from fsdp_skill.sources.docstrings import docs_version

    assert docs_version("2.13.0+cpu") == "2.13"
    assert docs_version("2.13.1") == "2.13"
    assert docs_version("2.14.0.dev20260101+cpu") == "main"
    assert docs_version("2.14.0a0+git1234abc") == "main"
    assert docs_version("2.14.0rc1") == "main"


def test_compact_signature_short_names_and_stable_defaults():
    from fsdp_skill.sources.docstrings import compact_signature

    sig = (
        "pkg.f(pg: torch.distributed.distributed_c10d.ProcessGroup, "
        "fn=<function noop_fn at 0x7f4aa45c3880>, check=<function <lambda> at 0x7f4aa38dc180>)"
    )
    # The same page on every build: no memory addresses.
    assert compact_signature(sig) == "pkg.f(pg: ProcessGroup, fn=noop_fn, check=<lambda>)"
