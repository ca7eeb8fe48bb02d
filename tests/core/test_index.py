"""What goes into the index (the default view's flags), and the index file: its scores equal
rank-bm25's, and damage is detected."""

import math
import random

import pytest
import rank_bm25

from fsdp_skill import view
from fsdp_skill.index import builder
from fsdp_skill.index.store import Index, IndexFileError, write_index

WORDS = (
    "shard gradient fsdp ddp join uneven hook mesh tensor all_reduce barrier checkpoint save load "
    "optimizer zero offload prefetch nccl gloo timeout rank world size"
).split()


def corpus(n=60, seed=0):
    rnd = random.Random(seed)
    docs = []
    for i in range(n):
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(3, 40))]
        docs.append(
            {
                "id": f"d{i}",
                "title": rnd.choice(WORDS),
                "breadcrumbs": ["P", "s"],
                "url": "u",
                "objects": [f"pkg.{rnd.choice(WORDS)}"] if i % 3 else [],
                "source": "guide",
                "torch_version": "2.13.0",
                "path": "p",
                "page": f"p{i % 5}",
                "flags": "",
                "text": " ".join(words),
            }
        )
    return docs


@pytest.mark.parametrize("variant", sorted(builder.VARIANTS))
def test_persisted_scores_equal_rank_bm25(tmp_path, variant):
    docs = corpus()
    path = tmp_path / "index.bin"
    builder.build(docs, str(path), {"torch_version": "x"}, "stamp", variant=variant)
    cls_name, params = builder.VARIANTS[variant]
    ref = getattr(rank_bm25, cls_name)([builder.doc_tokens(d) for d in docs], **params)
    idx = Index(str(path))
    rnd = random.Random(1)
    for _ in range(25):
        query = [rnd.choice(WORDS + ["absent"]) for _ in range(rnd.randint(1, 5))]
        expected = ref.get_scores(query)
        constant, extra = idx.scores([(t, 1.0) for t in query])
        got = [constant + extra.get(i, 0.0) for i in range(len(docs))]
        for a, b in zip(got, expected):
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (query, a, b)
    idx.close()


def test_records_round_trip(tmp_path):
    docs = corpus(5)
    docs[0]["text"] = "unicode ✓ and control \x1f chars"
    path = tmp_path / "i.bin"
    builder.build(docs, str(path), {"torch_version": "x"}, "the stamp")
    idx = Index(str(path))
    assert idx.stamp() == "the stamp"
    assert idx.doc(1)["breadcrumbs"] == ["P", "s"]
    assert idx.doc(0)["text"] == "unicode ✓ and control   chars"
    assert idx.header["torch_version"] == "x"
    idx.close()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "header"])
def test_damaged_index_is_detected(tmp_path, damage):
    path = tmp_path / "i.bin"
    builder.build(corpus(10), str(path), {"torch_version": "x"}, "s")
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00" * len(raw))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(raw.replace(b"n_docs=", b"n_dox=", 1))
    with pytest.raises(IndexFileError):
        Index(str(path))


def test_write_is_atomic_on_failure(tmp_path):
    path = tmp_path / "i.bin"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_index(str(path), {}, {"t": (0.0, [(0, "not a float")])}, [], "s")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["i.bin"]


def _chunk(source, page, torch_version="2.13.0"):
    return {"source": source, "page": page, "torch_version": torch_version, "flags": "x"}


def test_view_scraped_pages_shadow_docstring_pages_of_the_same_page():
    chunks = {
        "guide": [_chunk("guide", "distributed")],
        "web": [_chunk("web", "distributed", "2.13"), _chunk("web", "notes/fsdp", "2.13")],
        "docstring": [_chunk("docstring", "distributed"), _chunk("docstring", "fsdp")],
    }
    assert view.assign_flags(chunks, "2.13.0+cpu") == set()
    flags = {(c["source"], c["page"]): c["flags"] for cs in chunks.values() for c in cs}
    assert flags == {
        ("guide", "distributed"): "",  # guides are never shadowed, even by a page of that key
        ("web", "distributed"): "",
        ("web", "notes/fsdp"): "",
        ("docstring", "distributed"): "shadowed",
        ("docstring", "fsdp"): "",  # no scraped page of that key
    }


def test_view_scraped_pages_of_another_release_are_stale_and_shadow_nothing():
    chunks = {
        "web": [_chunk("web", "distributed", "1.9"), _chunk("web", "fsdp", "2.13")],
        "docstring": [_chunk("docstring", "distributed"), _chunk("docstring", "fsdp")],
    }
    assert view.assign_flags(chunks, "2.13.0") == {"1.9"}
    assert [c["flags"] for c in chunks["web"]] == ["stale", ""]
    assert [c["flags"] for c in chunks["docstring"]] == ["", "shadowed"]


def test_view_without_api_pages_no_scraped_page_is_stale():
    chunks = {"web": [_chunk("web", "distributed", "1.9")]}
    assert view.assign_flags(chunks, None) == set()
    assert chunks["web"][0]["flags"] == ""
    assert view.release("2.13.0+cu126") == "2.13" and view.release("2.13") == "2.13"
