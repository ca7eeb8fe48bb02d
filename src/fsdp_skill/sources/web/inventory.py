"""Read a Sphinx objects.inv: which API objects each page documents, and their URLs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import sphobjinv as soi


class InventoryError(ValueError):
    """The objects.inv bytes are not a Sphinx inventory."""


@dataclass(frozen=True)
class InvObject:
    name: str
    role: str        # class, function, method, module, ...
    page: str        # page key relative to the inventory base, without .html
    anchor: str      # URL fragment ("" when the object is the page itself)
    url: str         # public URL


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
    try:
        inv = soi.Inventory(zlib=data)
    except Exception as exc:  # sphobjinv raises assorted types for foreign bytes
        raise InventoryError(f"not a Sphinx objects.inv ({type(exc).__name__})") from None
    objects = []
    for obj in inv.objects:
        if obj.domain != "py":
            continue
        uri = obj.uri.replace("$", obj.name) if obj.uri.endswith("$") else obj.uri
        path, _, anchor = uri.partition("#")
        objects.append(InvObject(
            name=obj.name, role=obj.role,
            page=page_prefix + path.removesuffix(".html"),
            anchor=anchor, url=public_base + uri,
        ))
    return Inventory(project=inv.project, version=inv.version, objects=objects)
