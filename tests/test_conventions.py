"""One set of command-line conventions, and options declared once.

Every subcommand's help shows its defaults and ends with an example; -t/-o/-s/--sizes mean the
same everywhere; --opt takes KEY=VALUE items repeated or comma-joined; the option tables in
docs/options.md, `collsynth list` and the validation all come from the declarations; every
size-aware algorithm has one default size; bench and demo never write into the current folder
by default.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsynth.cli import build_parser, main
from collsynth.cli.topology import options_markdown
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.schedule.io import load_schedule
from collsynth.synth import DEFAULT_SIZE, get, load_all, synthesize
from collsynth.synth.options import Option, parse_assignments
from collsynth.topology import load_topology
from collsynth.units import parse_size_list

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _subcommands(parser=None, prefix=()):
    """Every leaf subcommand as an argv prefix."""
    import argparse

    parser = parser or build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix
        return
    for name, sub in subs[0].choices.items():
        yield from _subcommands(sub, prefix + (name,))


SUBCOMMANDS = sorted(_subcommands())


def test_every_command_group_is_present():
    groups = {argv[0] for argv in SUBCOMMANDS}
    assert groups >= {
        "topo",
        "list",
        "synth",
        "verify",
        "simulate",
        "bound",
        "compare",
        "tune",
        "export",
        "check-xml",
        "run",
        "wan",
        "bench",
        "demo",
    }


@pytest.mark.parametrize("argv", SUBCOMMANDS, ids=" ".join)
def test_help_shows_defaults_and_an_example(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    examples = out.split("examples:\n", 1)
    assert len(examples) == 2, f"{' '.join(argv)} --help has no example"
    assert all(
        line.strip().startswith(("collsynth ", "mpiexec "))
        for line in examples[1].strip().splitlines()
    )
    # every option with a non-trivial default says what it is
    parser = build_parser()
    for name in argv:
        import argparse

        sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]
        parser = sub.choices[name]
    for action in parser._actions:
        if (
            action.option_strings
            and action.default not in (None, False)
            and action.help not in (None, argparse.SUPPRESS)
            and not isinstance(action.default, (list, tuple))
            and action.dest != "help"
        ):
            section = out.split("\noptions:\n", 1)[1]
            after = section.split(action.option_strings[-1], 1)[1]
            entry = after.split("\n  -", 1)[0]  # up to the next option
            assert "default" in entry, f"{' '.join(argv)} {action.option_strings[-1]}"


@pytest.mark.parametrize("argv", SUBCOMMANDS, ids=" ".join)
def test_output_and_topology_flags_are_uniform(argv):
    parser = build_parser()
    import argparse

    for name in argv:
        sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]
        parser = sub.choices[name]
    flags = {s: a for a in parser._actions for s in a.option_strings}
    for long, short in (
        ("--output", "-o"),
        ("--topology", "-t"),
        ("--size", "-s"),
        ("--collective", "-c"),
    ):
        if long in flags:
            assert flags.get(short) is flags[long], f"{' '.join(argv)}: {long} without {short}"
    assert "--proto" not in flags or flags["--proto"].help == argparse.SUPPRESS


def test_docs_option_tables_are_generated_from_the_declarations():
    assert (ROOT / "docs" / "options.md").read_text() == options_markdown() + "\n", (
        "run: collsynth list --options-markdown > docs/options.md"
    )


def test_declarations_are_complete():
    for name, algo in load_all().items():
        assert algo.summary and "seed" not in algo.summary.lower(), name
        for opt in algo.options.values():
            assert opt.help, f"{name}.{opt.name} has no help"
            # the default is a valid value of the option
            assert opt.parse(opt.default_text(), name) == opt.default or opt.kind == "float"


def test_opt_items_comma_joined_or_repeated():
    assert parse_assignments(["epoch=fast,time_limit=5", "gap=0.1"], "teccl") == {
        "teccl": {"epoch": "fast", "time_limit": "5", "gap": "0.1"}
    }
    # a value with commas stays whole when no KEY= follows the comma
    assert parse_assignments(["highs=a:1,b:2,seed=3"], "teccl") == {
        "teccl": {"highs": "a:1,b:2", "seed": "3"}
    }
    assert parse_assignments(["ring.rings=2,k=1"]) == {"ring": {"rings": "2"}, "*": {"k": "1"}}
    with pytest.raises(CollsynthError, match="not KEY=VALUE"):
        parse_assignments(["rings"])


def test_readme_opt_form_parses(capsys, tmp_path):
    out = tmp_path / "s.json"
    rc, _, err = run(
        capsys,
        "synth",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--algo",
        "teccl",
        "--opt",
        "epoch=fast,time_limit=5",
        "-o",
        str(out),
    )
    assert rc == 0, err
    opts = load_schedule(str(out)).meta["options"]
    assert opts == {"epoch": "fast", "time_limit": 5.0}


@pytest.mark.parametrize(
    "value, message",
    [
        ("rings=0", "ring option rings=0 must be at least 1"),
        ("rings=two", "ring option rings='two' is not an integer or auto"),
        ("nosuch=1", "algorithm 'ring' has no option 'nosuch' (its options: rings)"),
    ],
)
def test_options_validated_by_the_declaration(capsys, tmp_path, value, message):
    rc, _, err = run(
        capsys,
        "synth",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--algo",
        "ring",
        "--opt",
        value,
        "-o",
        str(tmp_path / "s.json"),
    )
    assert rc == 2 and err.strip() == f"collsynth: error: {message}"
    assert not (tmp_path / "s.json").exists()


def test_option_kinds():
    t = Option("slot", "time", "auto", words=("auto",), minimum=0.0, exclusive_minimum=True)
    assert t.parse("2us", "x") == pytest.approx(2e-6) and t.parse("AUTO", "x") == "auto"
    with pytest.raises(CollsynthError, match="must be greater than 0s"):
        t.parse("0", "x")
    c = Option("protocol", "choice", "Simple", choices=("Simple", "LL", "LL128"))
    assert c.parse("ll128", "x") == "LL128"
    b = Option("flag", "bool", False)
    assert b.parse("yes", "x") is True and b.parse("off", "x") is False
    i = Option("n", "int", 1, minimum=1, maximum=4)
    with pytest.raises(CollsynthError, match="at most 4"):
        i.parse("5", "x")
    with pytest.raises(CollsynthError, match="not an integer"):
        i.parse("1.5", "x")
    s = Option("size", "size", 1.0, minimum=1)
    assert s.parse("1KiB", "x") == 1024.0


def test_size_sweeps():
    assert parse_size_list("1KB:8KB:x2") == [1e3, 2e3, 4e3, 8e3]
    assert parse_size_list("1MB:3MB:+1MB,1KB,1MB") == [1e6, 2e6, 3e6, 1e3]
    for bad in ("1KB:1MB", "1MB:1KB:x2", "1KB:1MB:x1", "1KB:1MB:+0", "1KB:1MB:y2", "1B:1TB:+1B"):
        with pytest.raises(CollsynthError):
            parse_size_list(bad)


def test_compare_takes_a_sweep(capsys):
    rc, out, err = run(
        capsys,
        "compare",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--sizes",
        "1KB:1MB:x10",
        "--algos",
        "ring",
        "--json",
    )
    assert rc == 0, err
    assert json.loads(out)["sizes"] == [1e3, 1e4, 1e5, 1e6]


@pytest.mark.parametrize(
    "size_aware", sorted(n for n, a in load_all().items() if a.size_aware and n != "teccl")
)
def test_one_default_size(size_aware):
    topo = load_topology(
        {"syccl": "h800_rails:servers=2", "nvls": "dgx_h100"}.get(size_aware, "ring:n=4")
    )
    coll = Collective.make("allgather", topo.num_ranks, 1)
    a = synthesize(size_aware, topo, coll)
    b = synthesize(size_aware, topo, coll, size=DEFAULT_SIZE)
    assert a.num_ops == b.num_ops and (a.src == b.src).all() and (a.dst == b.dst).all()


def test_topo_show_takes_t_and_positional(capsys):
    rc1, out1, _ = run(capsys, "topo", "show", "-t", "dgx1", "--json")
    rc2, out2, _ = run(capsys, "topo", "show", "dgx1", "--json")
    assert rc1 == rc2 == 0 and json.loads(out1) == json.loads(out2)
    rc, _, err = run(capsys, "topo", "show")
    assert rc == 2 and err.startswith("collsynth: error: topo show: -t/--topology SPEC")


def test_usage_errors_have_one_prefix(capsys):
    rc, _, err = run(capsys, "topo", "show", "-t", "dgx1", "--bogus")
    assert rc == 2 and err.startswith("collsynth: error: ") and "unrecognized arguments" in err
    assert "collsynth: error: collsynth" not in err and len(err.splitlines()) == 1
    rc, _, err = run(capsys, "topo", "show", "-t")
    assert rc == 2 and err.startswith("collsynth: error: topo show: argument -t/--topology")


def test_synth_algo_best_picks_the_fastest(capsys, tmp_path):
    out = tmp_path / "best.json"
    rc, res, err = run(
        capsys,
        "synth",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--algo",
        "best",
        "-s",
        "1MB",
        "-o",
        str(out),
        "--json",
    )
    assert rc == 0, err
    info = json.loads(res)
    rc, res, err = run(
        capsys,
        "compare",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--sizes",
        "1MB",
        "--algos",
        "best",
        "--json",
    )
    assert rc == 0, err
    assert info["algorithm"] == json.loads(res)["rows"][0]["algo"]
    assert load_schedule(str(out)).meta["algorithm"] == info["algorithm"]


def test_export_protocol_flag(capsys, tmp_path):
    s, x = tmp_path / "s.json", tmp_path / "s.xml"
    assert (
        run(capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "-o", str(s))[0]
        == 0
    )
    rc, out, err = run(
        capsys, "export", "msccl", str(s), "--protocol", "LL", "-o", str(x), "--json"
    )
    assert rc == 0, err
    assert 'proto="LL"' in x.read_text() and json.loads(out)["checked"] is True
    rc, _, err = run(capsys, "export", "msccl", str(s), "--protocol", "LL64", "-o", str(x))
    assert rc == 2 and "protocol='LL64' is not one of Simple, LL, LL128" in err


def test_bench_default_output_is_not_the_current_folder(capsys, tmp_path, monkeypatch):
    from collsynth.bench import harness

    monkeypatch.setitem(
        harness.SUITES, "tiny", lambda: [harness.Case("ring:n=4", "allgather", "ring", (1e6,))]
    )
    data, cwd = tmp_path / "data", tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.chdir(cwd)
    rc, _, err = run(capsys, "bench", "tiny", "--repeat", "1", "--json")
    assert rc == 0, err
    assert (data / "collsynth" / "bench" / "tiny.json").exists()
    assert list(cwd.iterdir()) == []


def test_wan_stats_json(capsys, tmp_path):
    rc, out, err = run(
        capsys, "wan", "stats", "-t", "wan:dcs=2,gpus=2", "-o", str(tmp_path / "st.json"), "--json"
    )
    assert rc == 0, err
    assert json.loads(out)["links"] > 0


def test_get_unknown_algorithm():
    with pytest.raises(CollsynthError, match="unknown algorithm 'nope'"):
        get("nope")
