"""Docstring -> markdown on the installed torch's own docstrings, checked for key lines.

The texts change between torch releases, so each check is a line that states what a construct
became, not the whole page."""

import re

import pytest

from fsdp_skill.sources.docstring_md import render

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - torch built without distributed
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from torch.distributed import checkpoint as dcp  # noqa: E402
from torch.distributed.fsdp import FSDPModule, fully_shard  # noqa: E402


def prose(md):
    """The markdown outside code fences."""
    return "".join(md.split("```")[::2])


def assert_no_rst_left(md):
    text = prose(md)
    assert not re.search(r":(class|func|meth|attr|mod):`", text)
    assert ".. note::" not in text and ".. warning::" not in text
    assert "``" not in text
    assert "xdoctest" not in md


def test_fully_shard():
    md = render(fully_shard.__doc__, 2, "torch.distributed.fsdp.fully_shard")
    lines = md.splitlines()
    assert "**Args:**" in lines
    assert any(x.startswith("- **module** (*") for x in lines)
    assert any(x.startswith("- **mesh** (*Optional[DeviceMesh]*):") for x in lines)
    assert any(x.startswith("- **reshard_after_forward** (*") for x in lines)
    # The options of reshard_after_forward stay a list nested under their argument.
    assert any(x.startswith("  - If `True`, then this reshards") for x in lines)
    assert "**Returns:**" in lines
    assert_no_rst_left(md)


def test_checkpoint_save():
    md = render(dcp.save.__doc__, 2, "torch.distributed.checkpoint.save")
    lines = md.splitlines()
    assert any(x.startswith("> **Warning:** ") for x in lines)
    assert any(x.startswith("> **Note:** ") for x in lines)
    assert any(x.startswith("- **state_dict** (*") for x in lines)
    assert any(x.startswith("- **storage_writer** (*Optional[StorageWriter]*)") for x in lines)
    assert "**Example:**" in lines
    # The doctest is fenced with its prompts and continuation lines.
    assert "```python\n>>> my_model = MyModule()\n```" in md
    assert re.search(
        r"```python\n(>>> .*\n|\.\.\. .*\n)*>>> torch\.distributed\.checkpoint\.save\(", md
    )
    assert_no_rst_left(md)


def test_reset_iter_state_numbered_steps():
    doc = getattr(getattr(FSDPModule, "reset_iter_state", None), "__doc__", None) or ""
    if "1. " not in doc:
        pytest.skip("this torch has no numbered recovery steps")
    lines = render(doc).splitlines()
    # One numbered item per line, not one paragraph running 1. ... 2. ... 3. together.
    first = next(i for i, x in enumerate(lines) if x.startswith("1. "))
    assert lines[first + 1].startswith("2. ")
    assert lines[first + 2].startswith("3. ")
    assert " 2. " not in lines[first]


def test_from_local_gradient_table():
    from torch.distributed.tensor import DTensor

    doc = DTensor.from_local.__doc__ or ""
    if "+-----" not in doc:
        pytest.skip("this torch's DTensor.from_local has no placement table")
    lines = render(doc).splitlines()
    assert "> | Forward Placement | Gradient Placement |" in lines
    assert "> | --- | --- |" in lines
    assert "> | `Partial` | `Replicate` |" in lines
    assert not any("+-----" in x for x in lines)
