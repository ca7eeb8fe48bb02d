"""Read a Sphinx objects.inv: which API objects each page documents, and their URLs."""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass

import sphobjinv as soi

from fsdp_skill.sources.web.html_to_md import strip_controls

# The docs' objects.inv inflates to a few MiB. A zlib stream can inflate 1000-fold, and
# sphobjinv holds about 1 KiB per object, so both the inflated bytes and the object lines are
# capped before anything is parsed: a 177 KiB file of 1.9 M objects took 2 GB without the caps.
MAX_INFLATED_BYTES = 32 * 1024 * 1024
MAX_OBJECTS = 300_000
_HEADER_LINES = 4


class InventoryError(ValueError):
    """The objects.inv bytes are not a Sphinx inventory."""


@dataclass(frozen=True)
class InvObject:
    name: str
    role: str  # class, function, method, module, ...
    page: str  # page key relative to the inventory base, without .html
    anchor: str  # URL fragment ("" when the object is the page itself)
    url: str  # public URL


@dataclass
class Inventory:
    project: str
    version: str
    objects: list[InvObject]

    def by_page(self) -> dict[str, list[InvObject]]:
        pages: dict[str, list[InvObject]] = defaultdict(list)
        for obj in self.objects:
            pages[obj.page].append(obj)
        return dict(pages)

    def names_by_anchor(self, page: str) -> dict[str, list[str]]:
        """Anchor -> every inventory name that points at it (aliases such as
        torch._C._distributed_c10d.FileStore share the torch.distributed.FileStore anchor)."""
        out: dict[str, list[str]] = defaultdict(list)
        for obj in self.objects:
            if obj.page == page and obj.anchor:
                out[obj.anchor].append(obj.name)
        return {k: sorted(set(v)) for k, v in out.items()}


def parse_inventory(data: bytes, public_base: str, *, page_prefix: str = "") -> Inventory:
    """Parse a compressed objects.inv. Only `py` objects count as API objects.

    `public_base` is the public URL of the folder holding objects.inv; `page_prefix` is put
    in front of page keys (the tutorials use "tutorials/").
    """
    plaintext = _inflate(data)
    try:
        inv = soi.Inventory(plaintext=plaintext)
    except Exception as exc:  # sphobjinv raises assorted types for foreign bytes
        raise InventoryError(f"not a Sphinx objects.inv ({type(exc).__name__})") from None
    # sphobjinv skips lines it cannot parse; a torn or garbled file must not lose objects quietly.
    lines = sum(1 for ln in plaintext.split(b"\n")[_HEADER_LINES:] if ln.strip())
    if inv.count != lines:
        raise InventoryError(
            f"objects.inv is inconsistent: {lines - inv.count} of {lines} object lines do not parse"
        )
    objects = []
    for obj in inv.objects:
        if obj.domain != "py":
            continue
        # Names reach the pages, the change report and the terminal: no control characters.
        name = strip_controls(obj.name)
        uri = strip_controls(obj.uri)
        uri = uri.replace("$", name) if uri.endswith("$") else uri
        path, _, anchor = uri.partition("#")
        objects.append(
            InvObject(
                name=name,
                role=obj.role,
                page=page_prefix + path.removesuffix(".html"),
                anchor=anchor,
                url=public_base + uri,
            )
        )
    return Inventory(
        project=strip_controls(inv.project), version=strip_controls(inv.version), objects=objects
    )


def _inflate(data: bytes) -> bytes:
    """The plain text of a compressed objects.inv: its 4 header lines and the inflated body.

    The zlib stream must end where the file ends: a truncated download inflates to a shorter,
    valid-looking list of objects, so an unfinished stream is an error, not a smaller inventory.
    """
    parts = data.split(b"\n", _HEADER_LINES)
    if len(parts) <= _HEADER_LINES or not parts[0].startswith(b"# Sphinx inventory version"):
        raise InventoryError("not a Sphinx objects.inv (no inventory header)")
    header = b"\n".join(parts[:_HEADER_LINES]) + b"\n"
    if b"zlib" not in parts[_HEADER_LINES - 1]:
        raise InventoryError("not a Sphinx objects.inv version 2 (body is not zlib-compressed)")
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(parts[_HEADER_LINES], MAX_INFLATED_BYTES)
    except zlib.error as exc:
        raise InventoryError(f"objects.inv body is not valid zlib data ({exc})") from None
    if inflater.unconsumed_tail:
        raise InventoryError(
            f"objects.inv inflates to more than {MAX_INFLATED_BYTES // (1024 * 1024)} MiB; "
            "refusing it"
        )
    if not inflater.eof:
        raise InventoryError("objects.inv is truncated (its zlib stream does not end)")
    if inflater.unused_data.strip():
        raise InventoryError("objects.inv has data after its zlib stream")
    if body.count(b"\n") > MAX_OBJECTS:
        raise InventoryError(f"objects.inv lists more than {MAX_OBJECTS} objects; refusing it")
    return header + body
