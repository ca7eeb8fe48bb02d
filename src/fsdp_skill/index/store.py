"""The index file: precomputed BM25 term weights, read without pickle, numpy or sqlite.

Layout of `index.bin` (all integers native-endian; the header records the byte order):

    FSDPIDX1\\n
    key=value\\n ...            header: build facts and section offsets
    \\n
    vocab     \\n-prefixed lines `term\\tdefault\\tstart\\tcount\\n`, sorted by term
    postings  per term: `count` uint32 doc numbers, then `count` float64 weights
    docs      one record per chunk, fields joined by \\x1f, list items by \\x1e
    docoffs   uint64 offsets of each record in docs, plus the end
    priors    float64 per document: a query-independent factor on its score
    doccrc    uint32 CRC-32 of each docs record
    stamp     the references fingerprint the index was built from

Integrity: the header holds the CRC-32 of every section read whole (vocab, docoffs, priors,
doccrc, stamp); each vocab line carries the CRC-32 of its postings and doccrc that of each
record. Every read is checked, so a flipped byte anywhere is an IndexFileError (and a rebuild),
never a wrong answer, at the cost of checksumming only the bytes a query reads.

A query reads the header and vocab, a few postings and the records of the top hits: a few
hundred microseconds, where loading rank-bm25 (numpy) would take ~100 ms.

Why a hand-written format: every question is a fresh process, and numpy (bm25s, rank-bm25) or
sqlite3 cost more to import than this whole search; SQLite FTS5 cannot weight query terms.
"""

import os
import stat
import sys
from zlib import crc32

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

MAGIC = b"FSDPIDX1\n"
FORMAT = "3"
WHOLE_SECTIONS = ("vocab", "docoffs", "priors", "doccrc", "stamp")
SECTIONS = ("vocab", "postings", "docs", "docoffs", "priors", "doccrc", "stamp")
FIELDS = (
    "id",
    "title",
    "breadcrumbs",
    "url",
    "objects",
    "source",
    "torch_version",
    "path",
    "page",
    "flags",
    "text",
)
LIST_FIELDS = ("breadcrumbs", "objects")
US, RS = "\x1f", "\x1e"
HEADER_MAX = 8192  # bytes the reader takes in one read to find the header (magic included)


class IndexFileError(Exception):
    """The index file is missing, truncated, corrupt or of another format."""


def _clean(value: str) -> str:
    return value.replace(US, " ").replace(RS, " ")


def encode_record(doc: dict[str, object]) -> bytes:
    parts = []
    for name in FIELDS:
        value = doc.get(name, "")
        if name in LIST_FIELDS:
            parts.append(RS.join(_clean(str(v)) for v in value))
        else:
            parts.append(_clean(str(value)))
    return US.join(parts).encode("utf-8")


def decode_record(raw: bytes) -> dict[str, object]:
    try:
        values = raw.decode("utf-8").split(US)
    except UnicodeDecodeError:
        raise IndexFileError("index record is not UTF-8 (corrupt index)") from None
    if len(values) != len(FIELDS):
        raise IndexFileError("index record has the wrong number of fields")
    doc = dict(zip(FIELDS, values))
    for name in LIST_FIELDS:
        doc[name] = doc[name].split(RS) if doc[name] else []
    return doc


def write_index(
    path: str | os.PathLike[str],
    header: dict[str, str],
    postings: dict[str, tuple[float, list[tuple[int, float]]]],
    docs: list[dict[str, object]],
    stamp: str,
    priors: list[float] | None = None,
) -> None:
    """Write the index to `path` atomically.

    postings: {term: (default, [(doc, weight), ...])}; docs: list of record dicts;
    priors: one factor per doc (default 1.0).
    """
    from array import array

    vocab, post = [b"\n"], bytearray()
    for term in sorted(postings):
        default, items = postings[term]
        start = len(post)
        chunk = (
            array("I", [d for d, _ in items]).tobytes()
            + array("d", [w for _, w in items]).tobytes()
        )
        post += chunk
        vocab.append(f"{term}\t{default!r}\t{start}\t{len(items)}\t{crc32(chunk)}\n".encode())
    vocab = b"".join(vocab)
    records, offsets, crcs = bytearray(), [0], []
    for doc in docs:
        rec = encode_record(doc)
        records += rec
        offsets.append(len(records))
        crcs.append(crc32(rec))
    docoffs = array("Q", offsets).tobytes()
    doccrc = array("I", crcs).tobytes()
    priors = array("d", priors if priors is not None else [1.0] * len(docs)).tobytes()
    stamp = stamp.encode("utf-8")

    head = dict(header, format=FORMAT, byteorder=sys.byteorder, n_docs=str(len(docs)))
    body = {
        "vocab": vocab,
        "postings": bytes(post),
        "docs": bytes(records),
        "docoffs": docoffs,
        "priors": priors,
        "doccrc": doccrc,
        "stamp": stamp,
    }
    sizes = [(name, len(body[name])) for name in SECTIONS]
    for name in WHOLE_SECTIONS:
        head[f"{name}_crc"] = str(crc32(body[name]))
    # Offsets depend on the header's own length: fix them with a padded width.
    keys = [f"{name}_off" for name, _ in sizes] + [f"{name}_len" for name, _ in sizes]
    for k in keys:
        head[k] = "0" * 12
    base = len(MAGIC) + len(_header_bytes(head))
    pos = base
    for name, size in sizes:
        head[f"{name}_off"], head[f"{name}_len"] = f"{pos:012d}", f"{size:012d}"
        pos += size
    if base > HEADER_MAX:
        raise ValueError(f"index header is {base} bytes; the reader takes at most {HEADER_MAX}")
    blob = MAGIC + _header_bytes(head) + b"".join(body[name] for name in SECTIONS)
    from fsdp_skill import files  # build side only: keeps its imports off the query path

    files.write_bytes(path, blob)


def _header_bytes(head: dict[str, str]) -> bytes:
    for k, v in head.items():
        if "\n" in str(v) or "=" in k:
            raise ValueError(f"bad header entry {k!r}")
    return "".join(f"{k}={v}\n" for k, v in head.items()).encode("utf-8") + b"\n"


class Index:
    """Read side. Opening parses the header only; everything else is read on demand."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        try:
            # A FIFO or device in its place would block open() or read without end.
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise IndexFileError(f"{path} is not a regular file")
            self._f = open(path, "rb")
        except OSError as exc:
            raise IndexFileError(f"cannot open index {path}: {exc.strerror}") from None
        try:
            self._open_header()
        except BaseException:
            self._f.close()
            raise
        self._vocab = None
        self._docoffs = None
        self._priors = None
        self._doccrc = None

    def _open_header(self) -> None:
        path = self.path
        head = self._f.read(HEADER_MAX)
        if not head.startswith(MAGIC):
            raise IndexFileError(f"{path} is not an fsdp-skill index (bad magic)")
        end = head.find(b"\n\n", len(MAGIC) - 1)
        if end < 0:
            raise IndexFileError(f"{path}: index header is truncated")
        try:
            self.header = dict(
                line.split("=", 1) for line in head[len(MAGIC) : end].decode("utf-8").splitlines()
            )
            if self.header.get("format") != FORMAT or self.header.get("byteorder") != sys.byteorder:
                raise IndexFileError(f"{path}: index was written in another format or byte order")
            self.n_docs = int(self.header["n_docs"])
            self._sec = {
                name: (int(self.header[f"{name}_off"]), int(self.header[f"{name}_len"]))
                for name in SECTIONS
            }
            self._crc = {name: int(self.header[f"{name}_crc"]) for name in WHOLE_SECTIONS}
        except (KeyError, ValueError, UnicodeDecodeError):
            raise IndexFileError(f"{path}: index header is corrupt") from None
        pos = end + 2  # sections start right after the blank line that ends the header
        for name in SECTIONS:
            off, size = self._sec[name]
            if off != pos or size < 0:
                raise IndexFileError(f"{path}: index header is corrupt (section {name})")
            pos += size
        if self.n_docs < 0 or os.fstat(self._f.fileno()).st_size != pos:
            raise IndexFileError(f"{path}: index file is truncated or has trailing bytes")

    def close(self) -> None:
        self._f.close()

    def _read(self, section: str, start: int = 0, size: int | None = None) -> bytes:
        off, length = self._sec[section]
        size = length - start if size is None else size
        if start < 0 or start + size > length:
            raise IndexFileError(f"{self.path}: {section} reference out of range (corrupt index)")
        self._f.seek(off + start)
        data = self._f.read(size)
        if len(data) != size:
            raise IndexFileError(f"{self.path}: index file is truncated")
        return data

    def _whole(self, section: str) -> bytes:
        data = self._read(section)
        if crc32(data) != self._crc[section]:
            raise IndexFileError(
                f"{self.path}: {section} section fails its checksum (corrupt index)"
            )
        return data

    def stamp(self) -> str:
        try:
            return self._whole("stamp").decode("utf-8")
        except UnicodeDecodeError:
            raise IndexFileError(f"{self.path}: stamp is corrupt") from None

    def term(self, term: str) -> tuple[float, memoryview, memoryview] | None:
        """(default, doc numbers, weights) for a term, or None when it is not indexed."""
        if self._vocab is None:
            self._vocab = self._whole("vocab")
            self._spans = {}
        key = b"\n" + term.encode("utf-8") + b"\t"
        # The vocabulary is sorted: look only among the terms with the same first byte.
        first = key[1]
        span = self._spans.get(first)
        if span is None:
            start = self._vocab.find(b"\n" + bytes([first]))
            end = -1
            if start >= 0:
                nxt = first + 1
                while end < 0 and nxt < 256:
                    end = self._vocab.find(b"\n" + bytes([nxt]), start)
                    nxt += 1
            span = self._spans[first] = (start, len(self._vocab) if end < 0 else end + 1)
        if span[0] < 0:
            return None
        at = self._vocab.find(key, span[0], span[1])
        if at < 0:
            return None
        line_end = self._vocab.find(b"\n", at + 1)
        try:
            _, default, start, count, crc = (
                self._vocab[at + 1 : line_end].decode("utf-8").split("\t")
            )
            default, start, count, crc = float(default), int(start), int(count), int(crc)
        except ValueError:  # UnicodeDecodeError included
            raise IndexFileError(f"{self.path}: vocabulary entry is corrupt") from None
        if count < 0:
            raise IndexFileError(f"{self.path}: vocabulary entry is corrupt")
        raw = self._read("postings", start, count * 12)
        if crc32(raw) != crc:
            raise IndexFileError(
                f"{self.path}: postings of {term!r} fail their checksum (corrupt index)"
            )
        docs = memoryview(raw[: count * 4]).cast("I")
        weights = memoryview(raw[count * 4 :]).cast("d")
        return default, docs, weights

    def doc(self, n: int) -> dict[str, object]:
        if self._docoffs is None:
            self._docoffs = memoryview(self._whole("docoffs")).cast("Q")
            self._doccrc = memoryview(self._whole("doccrc")).cast("I")
            if len(self._docoffs) != self.n_docs + 1 or len(self._doccrc) != self.n_docs:
                raise IndexFileError(f"{self.path}: document table is corrupt")
        if not 0 <= n < self.n_docs:
            raise IndexFileError(f"{self.path}: document {n} out of range")
        start, end = self._docoffs[n], self._docoffs[n + 1]
        raw = self._read("docs", start, end - start)
        if crc32(raw) != self._doccrc[n]:
            raise IndexFileError(f"{self.path}: document {n} fails its checksum (corrupt index)")
        try:
            return decode_record(raw)
        except IndexFileError as exc:
            raise IndexFileError(f"{self.path}: {exc}") from None

    def prior(self, n: int) -> float:
        if self._priors is None:
            self._priors = memoryview(self._whole("priors")).cast("d")
            if len(self._priors) != self.n_docs:
                raise IndexFileError(f"{self.path}: priors section is corrupt")
        return self._priors[n]

    def verify(self) -> None:
        """Check every checksum of the file (a query checks only what it reads)."""
        self.stamp()
        if self.n_docs:
            self.prior(0)
        for line in self._whole("vocab").split(b"\n")[1:]:
            if line:
                self.term(line.split(b"\t", 1)[0].decode("utf-8", "replace"))
        for n in range(self.n_docs):
            self.doc(n)

    def scores(
        self, weighted_terms: "Iterable[tuple[str, float]]"
    ) -> tuple[float, dict[int, float]]:
        """BM25 scores as (constant, {doc: extra}); a doc's score is constant + extra.

        weighted_terms: [(term, query weight)]. With weight 1 for every query token this equals
        rank-bm25's get_scores (checked by a test).
        """
        constant, extra = 0.0, {}
        for term, qw in weighted_terms:
            entry = self.term(term)
            if entry is None:
                continue
            default, docs, weights = entry
            if len(docs) and max(docs) >= self.n_docs:
                raise IndexFileError(f"{self.path}: postings of {term!r} name unknown documents")
            constant += qw * default
            get = extra.get
            for d, w in zip(docs, weights):
                extra[d] = get(d, 0.0) + qw * (w - default)
        return constant, extra
