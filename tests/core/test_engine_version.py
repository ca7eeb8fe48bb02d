"""Changing how pages, chunks or term weights are made must invalidate existing indexes."""

import hashlib
from pathlib import Path

from fsdp_skill.freshness import ENGINE

PKG = Path(__file__).resolve().parents[2] / "src" / "fsdp_skill"
PIPELINE = [
    "index/tokenization.py",
    "chunking.py",
    "pages.py",
    "index/builder.py",
    "index/store.py",
    "sources/docstrings.py",
    "sources/docstring_md.py",
    "data/api_pages.yaml",
    "view.py",
]
# ENGINE -> sha256 of the pipeline files. When this test fails: bump freshness.ENGINE, then
# record the new pair here.
KNOWN = {
    "11": "bd19c7c1de290d743ea0ed29bcc49fd54ffea8f3416fe959573a9d848edb72b2",
}


def pipeline_hash():
    h = hashlib.sha256()
    for rel in PIPELINE:
        h.update(rel.encode())
        h.update((PKG / rel).read_bytes())
    return h.hexdigest()


def test_engine_version_is_bumped_with_the_pipeline():
    assert KNOWN.get(ENGINE) == pipeline_hash(), (
        f"the index pipeline changed: bump ENGINE in freshness.py and set KNOWN[{ENGINE!r}] "
        f"to {pipeline_hash()!r}"
    )
