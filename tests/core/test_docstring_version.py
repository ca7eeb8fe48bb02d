"""docs_version: which docs.pytorch.org folder a torch version's pages link to."""

import pytest

from fsdp_skill.sources.docstrings import DOCS_URL, docs_version


@pytest.mark.parametrize(
    ("version", "folder"),
    [
        # Releases link to their minor version's docs, whatever the build.
        ("2.13.0", "2.13"),
        ("2.13.1", "2.13"),
        ("2.13.0+cpu", "2.13"),
        ("2.6.0+cu124", "2.6"),
        ("2.13.0.post1", "2.13"),
        ("2", "2.0"),
        # Pre-releases and nightlies have no release docs yet.
        ("2.14.0rc1", "main"),
        ("2.14.0a0", "main"),
        ("2.14.0b2", "main"),
        ("2.14.0.dev20260101", "main"),
        ("2.14.0.dev20260101+cpu", "main"),
        ("2.14.0a0+git1234abc", "main"),
        # A source build from git may be ahead of the release it names.
        ("2.13.0+git1234abc", "main"),
        # A local build label is not a pre-release marker.
        ("2.13.0+rocm6.4", "2.13"),
        ("2.13.0+cu128", "2.13"),
    ],
)
def test_docs_version(version, folder):
    assert docs_version(version) == folder


@pytest.mark.parametrize("version", ["", "garbage", "2.x", "torch-2.13"])
def test_unparsable_version_links_to_main(version):
    # No traceback, and a link that exists rather than a folder that does not.
    assert docs_version(version) == "main"


def test_a_torch_version_object_is_accepted():
    torch = pytest.importorskip("torch")
    folder = docs_version(torch.__version__)
    assert DOCS_URL.format(version=folder, page="fsdp").startswith(
        f"https://docs.pytorch.org/docs/{folder}/"
    )
    assert folder == "main" or folder.count(".") == 1
