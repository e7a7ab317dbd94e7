"""The ``guardian`` command line as a user meets it: help, version, and one-line usage errors."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from guardian import cli
from guardian.replay import replay_records
from guardian.start import build_plan, parse_area_names, refusal
from tests.scenario_scripts import build
from tests.streams import T0
from topics.names import TopicNames


def _subparsers(
    parser: argparse.ArgumentParser, path: str = "guardian"
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _subparsers(child, f"{path} {name}")
    return found


def _leaves() -> dict[str, argparse.ArgumentParser]:
    return {
        path: p
        for path, p in _subparsers(cli.build_parser())
        if path.removeprefix("guardian ") in cli.COMMANDS
    }


def test_every_command_has_a_description_and_every_option_its_help() -> None:
    leaves = _leaves()
    assert set(p.removeprefix("guardian ") for p in leaves) == set(cli.COMMANDS)
    for path, parser in _subparsers(cli.build_parser()):
        assert parser.description, f"{path} has no description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{path} {'/'.join(action.option_strings) or action.dest} has no help"


def test_choices_and_defaults_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["replay", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "{recorded,rules,model}" in text and "default: recorded when the input holds decisions" in text


def test_global_flags_only_where_they_mean_something() -> None:
    leaves = _leaves()

    def options(path: str) -> set[str]:
        return {o for a in leaves[path]._actions for o in a.option_strings}

    assert "--supervisor" not in options("guardian kafka down")
    assert "--bootstrap" not in options("guardian kafka down")
    assert "--bootstrap" not in options("guardian replay")
    assert "--partitions" not in options("guardian simulate")
    assert options("guardian schema export") == {"-h", "--help"}
    assert {"--bootstrap", "--topic-prefix", "--partitions", "--data-dir", "--supervisor"} <= options(
        "guardian worker"
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("guardian ")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["topics", "create", "--partitions", "0"], "--partitions: 0 is below 1"),
        (["worker", "--partitions", "many"], "'many' is not a whole number"),
        (["kafka", "down", "--supervisor", "rules"], "--supervisor rules: not an option of this command"),
        (["replay", "--bootstrap", "h:1", "x.jsonl", "--out", "o"], "--bootstrap: not an option"),
        (["replay", "FILE_AS_OUT", "--out", "FILE_AS_OUT"], "exists and is not a directory"),
        (["replay", "FILE_AS_OUT", "--out", "o", "--decisions", "guess"], "invalid choice: 'guess'"),
        (["export", "--out", "DIR_AS_FILE"], "is a directory; name a file"),
        (
            ["export", "--out", "-", "--since-ms", "5", "--until-ms", "4"],
            "--since-ms 5 is after --until-ms 4",
        ),
        (["export", "--out", "-", "--topics", "plans,nope"], "choose from plans"),
        (["start", "--device", "a b"], "is not an ID"),
        (["simulate", "--scenario", "five"], "is not a scenario ID"),
        (["simulate", "--speed", "0"], "must be a number above 0"),
        (["simulate", "--bootstrap", "nohost"], "'nohost' is not HOST:PORT"),
        (["bench", "--only", "gate,warp"], "choose from pipeline"),
        (["demo", "--devices", "0"], "0 is below 1"),
        ([], "required: COMMAND"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("x")
    argv = [
        str(tmp_path / "a-file") if a == "FILE_AS_OUT" else str(tmp_path) if a == "DIR_AS_FILE" else a
        for a in argv
    ]
    with pytest.raises(SystemExit) as done:
        cli.parse(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert says in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("guardian")


def test_scenario_is_repeatable_and_space_separated() -> None:
    args = cli.parse(["simulate", "--scenario", "HG-05", "hg-07", "--scenario", "HG-08,HG-04-B"])
    assert args.scenario == ["HG-05", "HG-07", "HG-08", "HG-04-B"]


def test_start_area_names_default_to_the_language_and_may_be_given() -> None:
    ko = build_plan(cli.parse(["start", "--device", "d1"]), 1, "ko")
    assert ko["area_names"] == {"2": "거실", "3": "안방", "6": "주방"}
    en = build_plan(cli.parse(["start", "--device", "d1"]), 1, "en")
    assert en["area_names"] == {"2": "the living room", "3": "the bedroom", "6": "the kitchen"}
    given = cli.parse(["start", "--device", "d1", "--areas", "2,9", "--area-names", "9=the garage"])
    assert build_plan(given, 1, "en")["area_names"] == {"2": "the living room", "9": "the garage"}
    assert parse_area_names('{"2": "Living room, east"}') == {"2": "Living room, east"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2", "is not ID=NAME"),
        ("2=", "needs a name"),
        ("2=a,2=b", "twice"),
        ("a b=x", "is not an area ID"),
        ("2=Living\u202eroom", "control or formatting character"),
        ("2=" + "x" * 65, "over 64 characters"),
        ("[1]", "is not ID=NAME"),
        ("{oops", "not a JSON object"),
    ],
)
def test_bad_area_names_are_refused(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_area_names(text)


def test_area_names_must_name_planned_areas() -> None:
    args = cli.parse(["start", "--device", "d1", "--areas", "2,3", "--area-names", "6=kitchen"])
    with pytest.raises(ValueError, match="6 not in --areas"):
        build_plan(args, 1, "en")


def test_start_checks_the_plan_with_the_pipelines_gate() -> None:
    settings = Settings.from_env({})
    plan = build_plan(cli.parse(["start", "--device", "d1"]), 1, "en")
    assert refusal(plan, settings, TopicNames()) is None
    plan["steps"].append({"step_id": "watch", "capability": "live_view", "operation": "start", "args": {}})
    reason = refusal(plan, settings, TopicNames())
    assert reason is not None and reason.startswith("plan_invalid")


def test_an_english_deployment_speaks_english_room_names() -> None:
    """GUARDIAN_LANGUAGE=en: the plan 'guardian start' sends names rooms in English, so the
    question the robot speaks after a failed verification (HG-03) does too."""
    script = build("HG-03", device_id="airbot-en")
    plan = build_plan(cli.parse(["start", "--device", "airbot-en"]), T0, "en")
    records = [
        dataclasses.replace(r, value=orjson.dumps(plan)) if r.suffix == "plans" else r for r in script.records
    ]
    result = replay_records(records, settings=Settings.from_env({"GUARDIAN_LANGUAGE": "en"}))
    spoken = [d["tts"] for d in result.outs["dispatch"] if d["tts"]]
    assert len(spoken) == 1
    assert "the living room" in spoken[0]
    assert not re.search("[\uac00-\ud7a3]", spoken[0]), spoken[0]
