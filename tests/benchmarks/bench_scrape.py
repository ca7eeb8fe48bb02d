"""Benchmark: full scrape of the offline docs site from a local server, then a no-change refresh.

    python tests/benchmarks/bench_scrape.py [--site DIR] [--keep]

Prints both times and request counts, and fails (exit 1) if the refresh rewrote any file.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from fsdp_skill.build import refresh_web as scrape
from fsdp_skill.sources.web.config import load_config

SITE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "pytorch-docs"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.stat().st_mtime_ns, p.stat().st_ino, p.stat().st_size)
        for p in root.rglob("*")
        if p.is_file() and not p.name.endswith(".lock")
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", type=Path, default=SITE)
    ap.add_argument("--keep", action="store_true", help="keep the output folder")
    args = ap.parse_args(argv)
    if not (args.site / "docs").is_dir():
        print(f"bench_scrape: error: no offline site at {args.site}", file=sys.stderr)
        return 1
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(args.site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    cfg = load_config().with_overrides(base_url=base)
    # The polite delay is for the public site; the benchmark measures the scraper itself.
    cfg = replace(cfg, client=replace(cfg.client, min_interval_s=0.0))
    out = Path(tempfile.mkdtemp(prefix="bench-scrape-"))
    quiet = lambda msg: None  # noqa: E731
    try:
        t0 = time.perf_counter()
        full = scrape(cfg, out / "references", log=quiet)
        t_full = time.perf_counter() - t0
        before = _snapshot(out / "references")
        t0 = time.perf_counter()
        again = scrape(cfg, out / "references", log=quiet)
        t_again = time.perf_counter() - t0
        rewritten = sorted(
            k for k, v in _snapshot(out / "references").items() if before.get(k) != v
        )
        print(
            f"full scrape : {t_full:6.2f} s  {full.requests} requests, {full.pages} pages, "
            f"{full.report.objects_total} API objects, index built: {full.index_built}"
        )
        print(
            f"no-change   : {t_again:6.2f} s  {again.requests} requests, "
            f"{again.not_modified} x 304, files rewritten: {len(rewritten)}"
        )
        if rewritten or again.changed:
            print(
                "FAIL: the no-change refresh rewrote: " + ", ".join(rewritten[:10]), file=sys.stderr
            )
            return 1
        return 0
    finally:
        server.shutdown()
        if args.keep:
            print(f"output kept in {out}")
        else:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
