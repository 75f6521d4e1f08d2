"""Every subcommand's ``--help`` (walked from the one COMMANDS table) speaks the shared grammar."""

from __future__ import annotations

import argparse
import re

import pytest

from systolica import cli
from systolica.cli.exits import EXIT_CODES_HELP
from systolica.cli.options import JSON_STDOUT, normalize_json_args

#: option string -> what it must come with (same dest, visible in --help)
SHARED = {"-o": "--output", "-n": "--max-tokens", "-j": "--jobs"}
#: the meaning of each shared long option, checked on its argparse action
METAVARS = {"--plots": "DIR", "--config": "PRESET|FILE.toml", "--board": "NAME|FILE.toml", "--json": "FILE.json"}
#: spellings the shared grammar replaced: never shown in --help (they may stay as hidden deprecated aliases)
OLD = {"--out", "--tokens", "--workers", "--threads", "--plot"}


def _parser(name: str) -> argparse.ArgumentParser:
    """The parser of command ``name`` ("run", "hw build"), with its arguments added."""
    words = name.split()
    p = cli.build_parser(words)
    for w in words:
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[w]
    return p


def _visible(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings and a.help is not argparse.SUPPRESS]


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_help_uses_the_shared_grammar(name, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([*name.split(), "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert f"usage: systolica {name}" in text
    assert EXIT_CODES_HELP in text, f"{name} --help does not document the exit codes"
    p = _parser(name)
    for a in _visible(p):
        opts = set(a.option_strings)
        assert not opts & OLD, f"{name}: {sorted(opts & OLD)} shown in --help: use the shared spelling"
        for short, long in SHARED.items():
            if short in opts or long in opts:
                assert {short, long} <= opts, f"{name}: {sorted(opts)} should be {short}/{long}"
        for long, metavar in METAVARS.items():
            if long in opts:
                assert a.metavar == metavar, f"{name}: {long} {a.metavar} should be {long} {metavar}"
        if "--json" in opts:  # one meaning: optional FILE; without it, stdout
            assert a.nargs == "?" and a.const == JSON_STDOUT and a.default is None
        if "--output" in opts:
            assert a.dest == "output"
        if "--act-split" in opts:  # compile (default off) and run (default on) spell it alike, both ways
            assert "--no-act-split" in opts
        if a.dest in ("out", "tokens", "workers", "threads", "plot"):
            pytest.fail(f"{name}: option {a.option_strings} stores into the old name {a.dest!r}")


def test_every_command_and_group_is_reachable_and_documented(capsys):
    for group in cli.GROUPS:
        with pytest.raises(SystemExit):
            cli.main([group, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert EXIT_CODES_HELP in text
        for name in cli.COMMANDS:
            if name.startswith(group + " "):
                assert name.split()[1] in text
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert EXIT_CODES_HELP in text


@pytest.mark.parametrize("old,new", list(cli.ALIASES.items()))
def test_old_command_names_still_work_with_a_note(old, new, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([old, "--help"])
    out, err = capsys.readouterr()
    assert e.value.code == 0 and f"usage: systolica {new}" in " ".join(out.split())
    assert f"'systolica {old}' is now 'systolica {new}'" in err


@pytest.mark.parametrize("name,argv,dest,value", [
    ("bench", ["--tokens", "3"], "max_tokens", 3),
    ("bench", ["--threads", "2"], "jobs", 2),
    ("dse", ["--workers", "2"], "jobs", 2),
    ("dse", ["--plot", "x.png"], "plot_file", "x.png"),
    ("hw generate", ["--out", "d"], "output", "d"),
    ("hw build", ["--out", "d"], "output", "d"),
])
def test_deprecated_spellings_are_hidden_aliases(name, argv, dest, value, capsys):
    words = name.split()
    extra = ["-o", "x"] if name == "hw generate" and "--out" not in argv else []
    args = cli.build_parser(words).parse_args([*words, *argv, *extra])
    assert getattr(args, dest) == value
    assert "is deprecated, use" in capsys.readouterr().err


def test_shared_defaults_survive_an_unused_alias():
    args = cli.build_parser(["bench"]).parse_args(["bench"])
    assert args.max_tokens == 8 and args.jobs is None and args.json is None and args.plots is None


@pytest.mark.parametrize("argv,want", [
    (["run", "--json", "hello"], ["run", "--json=-", "hello"]),  # a bare --json never takes the prompt
    (["sim", "p.bin", "--json"], ["sim", "p.bin", "--json=-"]),
    (["bench", "--json", "out.json"], ["bench", "--json=out.json"]),
    (["bench", "--json", "OUT.JSON", "-n", "2"], ["bench", "--json=OUT.JSON", "-n", "2"]),
    (["bench", "--json", "-"], ["bench", "--json=-"]),
    (["bench", "--json=results"], ["bench", "--json=results"]),
    (["run", "--", "--json"], ["run", "--", "--json"]),  # after --: a prompt, not an option
])
def test_json_takes_a_file_only_when_it_names_one(argv, want):
    assert normalize_json_args(argv) == want


def test_no_core_module_outside_cli_imports_a_part():
    """The core (systolica/*.py outside systolica/cli/) imports no part: the CLI modules are the only ones."""
    from pathlib import Path

    import systolica

    parts = ("hw", "sim", "driver", "compiler", "boards", "bench", "cli")
    pat = re.compile(r"^\s*(?:from|import)\s+systolica\.(" + "|".join(parts) + r")\b", re.M)
    core = Path(systolica.__file__).parent
    bad = {f.name: pat.findall(f.read_text()) for f in core.glob("*.py") if pat.search(f.read_text())}
    assert not bad, f"core modules importing parts: {bad}"


def test_the_readme_command_table_names_every_command_as_it_is_spelled():
    """README.md "Command line": one row per command of COMMANDS, and no row for a name that is not one."""
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    if not readme.is_file():
        pytest.skip("no README.md next to the tests (installed package)")
    text = readme.read_text()
    section = text[text.index("## Command line"):]
    section = section[:section.index("\n## ", 3)]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `systolica ")]
    named = set()
    for row in rows:
        for m in re.finditer(r"`systolica ((?:hw )?[a-z-]+)", row.split(" | ")[0]):
            named.add(m.group(1))
    assert named == set(cli.COMMANDS), f"README rows {sorted(named)} vs COMMANDS {sorted(cli.COMMANDS)}"
