"""The search command's options come from one table: parser, defaults and --help agree."""

import pytest

from fsdp_skill.search import cli
from fsdp_skill.search.cli import DEFAULTS, OPTIONS, UsageError, help_text, parse

SAMPLE_VALUE = {cli.NUMBER: lambda o: str(o.minimum + 7), cli.CHOICE: lambda o: o.choices[-1]}


def _args(opt, joined=False):
    if opt.kind == cli.FLAG:
        return [f"--{opt.name}"]
    value = SAMPLE_VALUE[opt.kind](opt)
    return [f"--{opt.name}={value}"] if joined else [f"--{opt.name}", value]


def _expected(opt):
    if opt.kind == cli.FLAG:
        return True
    value = SAMPLE_VALUE[opt.kind](opt)
    return int(value) if opt.kind == cli.NUMBER else value


def test_defaults_are_the_table():
    assert DEFAULTS == {o.key: o.default for o in OPTIONS}
    assert parse(["q"]) == {**DEFAULTS, "query": "q"}


@pytest.mark.parametrize(
    "opt,joined",
    [(o, j) for o in OPTIONS for j in (False, True) if not (j and o.kind == cli.FLAG)],
    ids=lambda v: getattr(v, "name", "joined" if v else "apart"),
)
def test_every_option_in_the_table_is_parsed(opt, joined):
    opts = parse(["fully_shard", *_args(opt, joined), "mixed"])
    assert opts[opt.key] == _expected(opt)
    assert opts["query"] == "fully_shard mixed"
    assert set(opts) == {o.key for o in OPTIONS} | {"query"}


@pytest.mark.parametrize("opt", [o for o in OPTIONS if o.minimum is not None], ids=lambda o: o.name)
def test_minimums_come_from_the_table(opt):
    assert parse(["q", f"--{opt.name}", str(opt.minimum)])[opt.key] == opt.minimum
    with pytest.raises(UsageError, match=f"--{opt.name} must be at least {opt.minimum}"):
        parse(["q", f"--{opt.name}", str(opt.minimum - 1)])


def test_help_lists_every_option_with_its_default_from_the_table():
    text = help_text("search.py")
    lines = text.splitlines()
    assert lines[0].startswith("usage: search.py ")
    for opt in OPTIONS:
        [line] = [ln for ln in lines if ln.lstrip().startswith(f"{opt.spec()}  ")]
        assert line.rstrip().endswith(f"(default {opt.shown_default()})"), line
        assert f"[{opt.spec()}]" in lines[0]
    for opt in OPTIONS:
        if opt.kind == cli.NUMBER:
            assert f"(default {opt.default})" in text
    # No option is documented that the table lacks (-h/--help aside).
    documented = {w.split("=")[0] for w in text.split() if w.startswith("--") and w != "--help"}
    documented = {w.strip("[](),.'") for w in documented} - {"--"}
    assert documented == {f"--{o.name}" for o in OPTIONS}


@pytest.mark.parametrize(
    "arg",
    [
        "--bogus",
        "--help",  # answered before parsing, never parsed as an option
        "--j",  # no abbreviations, unlike argparse
        "--max",
        "--K",
        "--json=1",
        "--kk",
        "---",
        "-k",
        "-x",
    ],
)
def test_no_option_is_parsed_that_the_table_lacks(arg):
    with pytest.raises(UsageError, match="unknown option"):
        parse(["q", arg, "5"])


def test_the_parser_accepts_a_long_option_exactly_when_the_table_has_it():
    names = {o.name for o in OPTIONS}
    lookalikes = {"help", "query", "prog", "sources", "max-char", "chars", "pages", "verbose"}
    spellings = names | {n.replace("-", "_") for n in names} | lookalikes
    for name in sorted(spellings):
        try:
            parse(["q", f"--{name}", "300"])
            known = True
        except UsageError as exc:
            known = "unknown option" not in str(exc)
        assert known == (name.replace("_", "-") in names), name


@pytest.mark.parametrize(
    "argv,code,stream,needle",
    [
        (["--help"], 0, "out", "usage: search "),
        (["q", "-h"], 0, "out", "--max-chars N"),
        (["q", "--k"], 2, "err", "search: error: --k needs a value (see --help)\n"),
        (["q", "--nope"], 2, "err", "search: error: unknown option --nope (see --help)\n"),
    ],
)
def test_help_exits_0_and_usage_errors_exit_2_with_one_line(capsys, argv, code, stream, needle):
    assert cli.run(argv) == code
    out, err = capsys.readouterr()
    text = out if stream == "out" else err
    assert needle in text
    if code == 2:
        assert out == "" and err.count("\n") == 1
