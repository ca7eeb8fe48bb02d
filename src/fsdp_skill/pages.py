"""Reference pages: markdown with YAML front matter (format in references/README.md)."""

import os
import tempfile
from pathlib import Path

import yaml

REQUIRED = ("title", "url", "source", "torch_version", "page")


class PageError(ValueError):
    """A page that does not follow the format; the message names the file and the problem."""


def read_page(path):
    """Return (meta, body) of a page file."""
    text = Path(path).read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise PageError(f"{path}: no YAML front matter (the file must start with '---')")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise PageError(f"{path}: front matter is not closed with '---'")
    try:
        meta = yaml.safe_load(text[4:end]) or {}
    except yaml.YAMLError as exc:
        raise PageError(
            f"{path}: front matter is not valid YAML ({exc.__class__.__name__})"
        ) from None
    missing = [k for k in REQUIRED if not meta.get(k)]
    if missing:
        raise PageError(f"{path}: front matter lacks {', '.join(missing)}")
    meta["torch_version"] = str(meta["torch_version"])
    return meta, text[end + 5 :]


def public_mode(path, directory=False):
    """Give a temp file/folder (mkstemp/mkdtemp make them owner-only) the mode a plain
    open()/mkdir() would have had, so a shared skill install stays readable by its users."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


def atomic_write(path, text):
    """Write via a temp file in the same folder and rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        public_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_page(path, meta, body):
    front = yaml.safe_dump({k: meta[k] for k in REQUIRED}, sort_keys=False, allow_unicode=True)
    atomic_write(path, f"---\n{front}---\n{body}")
