"""The shell's errors speak the shell's language (issue #36, item 8): they name the flag
the user typed (not the API's field), suggest only forms argparse accepts, refuse a flag
that needs another by name, and `--json | head` ends quietly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from robokernel_ros import cli


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("flags") / "runs"
    assert cli.main(["eval", "--robot", "so101", "--max-steps", "5", "--trace-dir", str(runs)]) == 0
    return runs


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_errors_name_the_flag_the_user_typed(tmp_path, capsys, one_run):
    video = str(tmp_path / "v")
    assert cli.main(["eval", "--robot", "so101", "--max-steps", "5", "--no-trace",
                     "--video", video, "--video-fps", "0"]) == 1  # fmt: skip
    err = _err(capsys)
    assert "--video-fps=0.0: must be a positive" in err and "video[" not in err, err
    assert cli.main(["eval", "--robot", "so101", "--max-steps", "5", "--no-trace",
                     "--video", video, "--camera", "nosuch"]) == 1  # fmt: skip
    err = _err(capsys)
    assert "--camera='nosuch'" in err and "video[" not in err, err
    assert cli.main(["replay", str(one_run), "--episode", "4", "--no-trace"]) == 1
    err = _err(capsys)
    assert "--episode=4" in err and "episode=4" not in err.replace("--episode=4", ""), err
    missing = str(tmp_path / "nothing")
    assert cli.main(["replay", missing, "--robot", "so101", "--no-trace"]) == 1
    err = _err(capsys)
    assert f"PATH={missing!r}" in err and "repo_id" not in err, err


def test_suggestions_are_forms_argparse_accepts(capsys):
    assert cli.main(["eval", "--robot", "so101", "--max-steps", "5", "--no-trace",
                     "--batch-inference"]) == 1  # fmt: skip
    err = _err(capsys)
    assert "--batch-inference" in err and "=False" not in err and "=True" not in err, err
    assert "without --batch-inference" in err, err
    assert cli.main(["eval", "--robot", "so101", "--max-steps", "5", "--no-trace",
                     "--wbc-gains", '{"so101": {}}']) == 1  # fmt: skip
    err = _err(capsys)
    assert "--wbc-install-torque-control" in err and "=True" not in err, err


def test_a_flag_that_needs_another_is_refused_by_name(capsys):
    for given, needs in (
        (["--max-batch", "4"], "--batch-inference"),
        (["--ray-address", "auto"], "--workers"),
        (["--live-wait", "5"], "--live"),
    ):
        assert cli.main(["eval", "--robot", "so101", "--no-trace", *given]) == 2
        err = _err(capsys)
        assert f"{given[0]}=" in err and f"give {needs}" in err, err


def test_a_missing_benchmark_file_says_so(tmp_path, capsys):
    missing = str(tmp_path / "my_bench.json")
    assert cli.main(["benchmark", missing]) == 1
    err = _err(capsys)
    assert f"NAME={missing!r}: no such file" in err and "no such benchmark" not in err, err


def test_json_into_a_pipe_whose_reader_left_ends_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "robokernel_ros.cli", "eval", "--robot", "so101",
                             "--max-steps", "3", "--no-trace", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    proc.stdout.close()  # `| head` that has read its lines and left
    err = proc.stderr.read()
    proc.wait(timeout=240)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode == 141, err


def test_every_eval_flag_says_its_domain_in_its_help(capsys):
    """The CLI reference is generated from argparse: each flag's help says what it takes."""
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    text = capsys.readouterr().out
    parser = cli.build_parser()
    eval_parser = parser._subparsers._group_actions[0].choices["eval"]
    for action in eval_parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings[0]} has no help text"
    for flag in ("--video-fps", "--control-frequency", "--action-horizon", "--live-wait"):
        assert flag in text
    assert json.dumps  # the module's import is used by the other tests


def test_a_refused_eval_writes_nothing_into_its_output_folder(tmp_path, capsys):
    """A policy config the provider refuses ends the call before any episode: the error
    names --policy-config (not policy_config), and the --output folder it would have made
    does not exist (nothing to --resume); a folder the user made stays, empty."""
    new = tmp_path / "new"
    assert cli.main(["eval", "--robot", "so101", "--policy", "scripted", "--max-steps", "5",
                     "--output", str(new)]) == 1  # fmt: skip
    err = _err(capsys)
    assert "--policy-config['targets']" in err and "policy_config" not in err, err
    assert "--resume" not in err + capsys.readouterr().out
    assert not new.exists()
    made = tmp_path / "made"
    made.mkdir()
    assert cli.main(["eval", "--robot", "so101", "--policy", "scripted", "--max-steps", "5",
                     "--output", str(made)]) == 1  # fmt: skip
    assert made.is_dir() and not any(made.iterdir())
