"""Chunks -> BM25 term weights (via rank-bm25) -> index file.

BM25's score of a document is a sum over query terms of a weight that depends only on the
term and the document, so every weight is computed here once, with rank-bm25's own statistics
(idf, document lengths), and the query path just adds them up.
"""

from __future__ import annotations

import math
import os

from fsdp_skill.index.store import write_index
from fsdp_skill.index.tokenization import tokenize

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from rank_bm25 import BM25

# Field weights: a chunk's title and the API names it documents say what it is about far
# more reliably than any one word of its body.
FIELD_WEIGHTS = {"title": 3, "objects": 3, "crumbs": 1, "text": 1}
VARIANTS = {
    # name: (rank_bm25 class name, parameters)
    "okapi": ("BM25Okapi", {"k1": 1.2, "b": 0.75, "epsilon": 0.25}),
    "plus": ("BM25Plus", {"k1": 1.2, "b": 0.75, "delta": 1.0}),
    "l": ("BM25L", {"k1": 1.2, "b": 0.75, "delta": 0.5}),
}
DEFAULT_VARIANT = "plus"
# Score factor for a chunk that names no API (tutorial or notes prose): an agent can act on a
# chunk that points at an API; prose alone ranks just behind an equally good API chunk.
PROSE_PRIOR = 0.8


def name_tokens(
    name: str, weight: int, tokenize: Callable[[str], list[str]] = tokenize
) -> list[str]:
    """Tokens of a qualified API name: its own name (last component) counts `weight` times, its
    module path once. Every object of `powerSGD_hook.py` shares the path `...powerSGD_hook`;
    weighting the path as much as the name would make them all look like `powerSGD_hook`."""
    path, _, own = name.rpartition(".")
    tokens = tokenize(own) * weight
    if path:
        whole = name.lower()
        tokens += [whole] + [t for t in tokenize(path) if t != whole]
    return tokens


def doc_tokens(
    chunk: dict[str, object],
    weights: dict[str, int] = FIELD_WEIGHTS,
    tokenize: Callable[[str], list[str]] = tokenize,
) -> list[str]:
    """The token stream BM25 sees for a chunk: fields repeated by their weight."""
    tokens = []
    title = chunk["title"]
    objects = chunk["objects"]
    if title not in objects:
        # API entries are titled by their qualified name, which the objects already cover.
        tokens += tokenize(title) * weights["title"]
    for name in objects:
        tokens += name_tokens(name, weights["objects"], tokenize)
    if weights["crumbs"] and len(chunk["breadcrumbs"]) > 1:
        tokens += tokenize(" ".join(chunk["breadcrumbs"][:-1])) * weights["crumbs"]
    tokens += tokenize(chunk["text"]) * weights["text"]
    return tokens


def make_bm25(corpus_tokens: list[list[str]], variant: str = DEFAULT_VARIANT) -> BM25:
    import rank_bm25

    cls_name, params = VARIANTS[variant]
    return getattr(rank_bm25, cls_name)(corpus_tokens, **params)


def term_weights(
    bm25: BM25, variant: str = DEFAULT_VARIANT
) -> dict[str, tuple[float, list[tuple[int, float]]]]:
    """{term: (default, [(doc, weight)])}, replaying rank-bm25's get_scores formula per term.

    `default` is the weight of a document without the term: 0 for Okapi and L, idf*delta for
    Plus (BM25+ rewards every document a little for each query term).
    """
    k1, b = bm25.k1, bm25.b
    avgdl = bm25.avgdl
    norm = [1 - b + b * dl / avgdl for dl in bm25.doc_len]
    postings = {}
    for d, freqs in enumerate(bm25.doc_freqs):
        for term, tf in freqs.items():
            postings.setdefault(term, []).append((d, tf))
    out = {}
    for term, items in postings.items():
        idf = bm25.idf.get(term) or 0
        if variant == "okapi":
            default = 0.0
            weights = [(d, idf * (tf * (k1 + 1) / (tf + k1 * norm[d]))) for d, tf in items]
        elif variant == "plus":
            delta = bm25.delta
            default = idf * delta
            weights = [
                (d, idf * (delta + (tf * (k1 + 1)) / (k1 * norm[d] + tf))) for d, tf in items
            ]
        elif variant == "l":
            delta = bm25.delta
            default = 0.0
            weights = []
            for d, tf in items:
                ctd = tf / norm[d]
                weights.append((d, idf * tf * (k1 + 1) * (ctd + delta) / (k1 + ctd + delta)))
        else:
            raise ValueError(f"unknown BM25 variant {variant!r}")
        out[term] = (default, weights)
    return out


def build(
    chunks: list[dict[str, object]],
    path: str | os.PathLike[str],
    header: dict[str, str],
    stamp: str,
    variant: str = DEFAULT_VARIANT,
    weights: dict[str, int] = FIELD_WEIGHTS,
    tokenizer: Callable[[str], list[str]] = tokenize,
    prose_prior: float = PROSE_PRIOR,
) -> int:
    """Index `chunks` (dicts) into the file at `path`; returns the number of terms.

    `variant`, `weights` and `tokenizer` are switchable so the quality benchmark can measure
    each choice against the alternative on the same chunks.
    """
    corpus = [doc_tokens(c, weights, tokenizer) for c in chunks]
    # rank-bm25 divides by the corpus size and average length; an empty corpus is a caller bug.
    if not corpus:
        raise ValueError("no chunks to index")
    for toks in corpus:
        if not toks:
            toks.append("")  # keeps doc numbering aligned; '' never matches a query token
    bm25 = make_bm25(corpus, variant)
    postings = term_weights(bm25, variant)
    postings.pop("", None)
    header = dict(
        header,
        variant=variant,
        k1=repr(bm25.k1),
        b=repr(bm25.b),
        avgdl=repr(bm25.avgdl),
        n_terms=str(len(postings)),
    )
    if not all(math.isfinite(w) for _, ws in postings.values() for _, w in ws):
        raise ValueError("non-finite BM25 weight")
    priors = [1.0 if c["objects"] else prose_prior for c in chunks]
    write_index(path, header, postings, chunks, stamp, priors)
    return len(postings)
