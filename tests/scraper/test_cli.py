"""`fsdp-skill scrape` argument and config errors: one line, non-zero exit, no traceback."""

from __future__ import annotations

import pytest

from fsdp_skill.scrape_cli import main
from fsdp_skill.sources.web.config import load_config


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--version", "2.x"], "version '2.x' is not"),
        (["--base-url", "ftp://mirror/"], "--base-url 'ftp://mirror/' is not an http(s) URL"),
        (["--config", "/nonexistent/scrape.yaml"], "config file not found"),
    ],
)
def test_bad_input_is_one_line(argv, needle, tmp_path, capsys):
    # A bad option or config value is a usage error: exit 2, as search and eval do.
    assert main(argv + ["--references", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_yaml_and_bad_page(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: '2.13'\nsite_root: https://docs.pytorch.org/\ndocs_base: docs/{version}/\n"
        "tutorials_base: tutorials/\npages:\n  - {page: ../etc/passwd, category: x}\n"
    )
    assert main(["--config", str(cfg), "--references", str(tmp_path)]) == 2
    assert "bad page path" in capsys.readouterr().err
    cfg.write_text("pages: [")
    assert main(["--config", str(cfg), "--references", str(tmp_path)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_unreachable_site_is_one_line(tmp_path, capsys):
    # Port 9 on 127.0.0.1 refuses connections; nothing leaves the machine.
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: '2.13'\nsite_root: https://docs.pytorch.org/\ndocs_base: docs/{version}/\n"
        "tutorials_base: tutorials/\nclient: {retries: 0, min_interval_s: 0}\n"
        "pages:\n  - {page: fsdp, category: reference}\n"
    )
    code = main(
        [
            "--config",
            str(cfg),
            "--base-url",
            "http://127.0.0.1:9/",
            "--references",
            str(tmp_path / "refs"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(
        "fsdp-skill scrape: error: objects.inv: http://127.0.0.1:9/"
    )
    assert err.count("\n") == 1


def test_default_config_covers_the_required_pages():
    pages = {p.page for p in load_config().pages}
    required = {
        "distributed",
        "fsdp",
        "distributed.fsdp.fully_shard",
        "distributed.checkpoint",
        "distributed.tensor",
        "distributed.tensor.parallel",
        "distributed.algorithms.join",
        "ddp_comm_hooks",
        "distributed.optim",
        "distributed.elastic",
        "elastic/run",
        "notes/ddp",
        "notes/fsdp",
        "generated/torch.nn.parallel.DistributedDataParallel",
        "tutorials/intermediate/FSDP_tutorial",
        "tutorials/intermediate/ddp_tutorial",
        "tutorials/advanced/generic_join",
        "tutorials/recipes/distributed_checkpoint_recipe",
        "tutorials/recipes/distributed_device_mesh",
    }
    assert required <= pages
    cfg = load_config().with_overrides(base_url="http://127.0.0.1:1/mirror")
    spec = next(p for p in cfg.pages if p.page == "notes/ddp")
    assert cfg.fetch_url(spec) == "http://127.0.0.1:1/mirror/docs/2.13/notes/ddp.html"
    assert cfg.public_url(spec) == "https://docs.pytorch.org/docs/2.13/notes/ddp.html"
