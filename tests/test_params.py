"""The one declared-parameter type: zoo parameters and algorithm options alike."""

from __future__ import annotations

import pytest

from collsynth.errors import CollsynthError
from collsynth.params import FALSE_WORDS, TRUE_WORDS, Parameter, parse_bool
from collsynth.synth.options import Option
from collsynth.topology import zoo  # noqa: F401  (registers the zoo)
from collsynth.topology.registry import ZOO, Param, build_named


@pytest.mark.parametrize("word", [*TRUE_WORDS, "TRUE", " Yes ", True])
def test_parse_bool_reads_true_words(word):
    assert parse_bool(word, "unused") is True


@pytest.mark.parametrize("word", [*FALSE_WORDS, "FALSE", " No ", False])
def test_parse_bool_reads_false_words(word):
    assert parse_bool(word, "unused") is False


@pytest.mark.parametrize("word", ["", "maybe", "2", "y", None])
def test_parse_bool_refuses_other_words_with_the_callers_message(word):
    with pytest.raises(CollsynthError, match="^the message$"):
        parse_bool(word, "the message")


def test_options_and_topology_parameters_are_one_type():
    assert Option is Parameter
    param = Param("int", 4, "number of things", min=1, max=8)
    assert isinstance(param, Parameter)
    assert (param.kind, param.default, param.help, param.minimum, param.maximum) == (
        "int",
        4,
        "number of things",
        1,
        8,
    )
    assert type(param) is Parameter and param.syntax == "spec"
    for entry in ZOO.values():
        assert all(isinstance(p, Parameter) for p in entry.params.values())


def test_the_two_syntaxes_read_the_same_declaration_their_own_way():
    option = Parameter("n", "int", 1, minimum=1)
    spec = Parameter("n", "int", 1, minimum=1, syntax="spec")
    assert option.parse("2.0", "algo") == 2
    with pytest.raises(CollsynthError, match=r"^thing parameter n '2\.0' is not an integer$"):
        spec.parse("2.0", "thing parameter n")
    with pytest.raises(CollsynthError, match=r"^algo option n=0 must be at least 1$"):
        option.parse("0", "algo")
    with pytest.raises(CollsynthError, match=r"^thing parameter n 0 must be at least 1$"):
        spec.parse("0", "thing parameter n")
    choice = Parameter("lanes", "choice", "merge", choices=("merge", "split"))
    assert choice.parse("SPLIT", "algo") == "split"
    spec_choice = Parameter("lanes", "choice", "merge", choices=("merge", "split"), syntax="spec")
    with pytest.raises(CollsynthError, match="is not one of merge, split"):
        spec_choice.parse("SPLIT", "thing parameter lanes")


def test_booleans_read_alike_in_zoo_parameters_and_options():
    for word, value in [("YES", True), ("off", False)]:
        assert build_named("dgx_h100", {"nvls": word}).meta["params"]["nvls"] is value
        assert Option("flag", "bool", False).parse(word, "algo") is value
    with pytest.raises(CollsynthError, match="is not a boolean \\(use true or false\\)$"):
        build_named("dgx_h100", {"nvls": "maybe"})
    with pytest.raises(CollsynthError, match="^algo option flag='maybe' is not true or false$"):
        Option("flag", "bool", False).parse("maybe", "algo")


def test_bandwidth_options_read_units():
    option = Parameter("rate", "bw", 25e9, minimum=1)
    assert option.parse("50GB/s", "algo") == 50e9
    assert option.values_text().startswith("bandwidth >= ")
    assert option.to_dict()["unit"] == "B/s"


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="unknown kind"):
        Parameter("x", "number")
    with pytest.raises(ValueError, match="unknown syntax"):
        Parameter("x", "int", syntax="yaml")
    with pytest.raises(ValueError, match="options' only"):
        Parameter("x", "int", words=("auto",), syntax="spec")
