"""The offline commands take the folders the others write (issue #36, items 5, 11, 12):
`score`/`export-lerobot` accept an `eval --output` folder, `score runs/*` survives the
report's and the demo's folders inside the trace dir, a 0-step episode is skipped by name
(alone: refused), `bag-recover` on an empty bag prints no None, the report page reads as
words with whole-number episode ticks and no empty plot, and `compare` warns when the
two evaluations ran different horizons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from robokernel_ros import cli


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    """An `eval --output` folder of three 6-step episodes."""
    out = tmp_path_factory.mktemp("folders") / "eval"
    assert cli.main(["eval", "--robot", "so101", "--episodes", "3", "--max-steps", "6",
                     "--output", str(out)]) == 0  # fmt: skip
    return out


def _zero_step_copy(run_dir: Path, dest: Path) -> Path:
    """The run directory of an episode stopped before its first step: start and end only."""
    dest.mkdir(parents=True)
    shutil.copy(run_dir / "meta.json", dest / "meta.json")
    kept = [line for line in (run_dir / "events.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] in ("episode.start", "episode.end")]  # fmt: skip
    (dest / "events.jsonl").write_text("\n".join(kept) + "\n")
    return dest


def test_score_and_export_take_an_eval_output_folder(evaluation, tmp_path, capsys):
    assert cli.main(["score", str(evaluation), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["episodes"]) == 3
    pytest.importorskip("lerobot.datasets.lerobot_dataset")
    root = tmp_path / "ds"
    assert cli.main(["export-lerobot", str(evaluation), "--repo-id", "u/d", "--root", str(root),
                     "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["episodes"] == 3


def test_score_of_every_entry_of_a_trace_dir_skips_the_report_and_logs_folders(
    evaluation, tmp_path, capsys
):
    runs = tmp_path / "runs"
    shutil.copytree(evaluation / "runs", runs)
    assert cli.main(["report", str(runs)]) == 0  # writes runs/report/
    (runs / "logs").mkdir()  # the demo's node logs
    (runs / "logs" / "runner.log").write_text("started\n")
    capsys.readouterr()
    entries = sorted(str(p) for p in runs.iterdir())  # what the shell makes of runs/*
    assert str(runs / "report") in entries
    assert cli.main(["score", *entries, "--json"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert len(result["episodes"]) == 3
    # a folder holding no episode on its own is still refused by name
    assert cli.main(["score", str(runs / "logs")]) == 1
    assert "logs" in capsys.readouterr().err


def test_a_zero_step_episode_is_skipped_by_name_and_alone_refused(
    evaluation, tmp_path, capfd, caplog
):
    pytest.importorskip("lerobot.datasets.lerobot_dataset")
    runs = tmp_path / "runs"
    shutil.copytree(evaluation / "runs", runs)
    first = sorted(runs.iterdir())[0]
    empty = _zero_step_copy(first, runs / "99999999-000000-000000")
    code = cli.main(["export-lerobot", str(runs), "--repo-id", "u/d", "--root",
                     str(tmp_path / "ds"), "--json"])  # fmt: skip
    captured = capfd.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["episodes"] == 3
    warned = captured.err + caplog.text  # the CLI's log handler, or pytest's
    assert empty.name in warned and "no executed step" in warned, warned
    code = cli.main(["export-lerobot", str(empty), "--repo-id", "u/d", "--root",
                     str(tmp_path / "ds2")])  # fmt: skip
    captured = capfd.readouterr()
    assert code == 1 and "wrote" not in captured.out
    assert empty.name in captured.err and "no executed step" in captured.err
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert not (tmp_path / "ds2").exists()  # a refused call writes nothing


def test_bag_recover_on_an_empty_bag_prints_no_none(tmp_path, capsys):
    from robokernel_ros.recording import BagMirror

    bag = tmp_path / "bag"
    BagMirror(bag).close()
    code = cli.main(["bag-recover", str(bag)])
    out = capsys.readouterr().out
    assert code == 1 and "None" not in out, out
    assert "kernel events: none" in out


def test_the_report_page_reads_as_words_with_whole_episode_ticks(evaluation, tmp_path):
    import re

    from robokernel_ros.scoring.pictures import evaluation as load_evaluation
    from robokernel_ros.scoring.pictures import returns_figure, write_report

    written = write_report([evaluation], tmp_path / "report")
    page = Path(written["html"]).read_text()
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings and all("_" not in h for h in headings), headings
    assert "Success rate" in headings
    # no shield intervention in these episodes: no empty plot, a sentence instead
    assert not any(p.endswith("interventions.png") for p in written["pngs"])
    assert "no shield intervention" in page
    fig = returns_figure([load_evaluation(evaluation)])
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_compare_warns_when_the_horizons_differ(evaluation, tmp_path, capsys):
    other = tmp_path / "other"
    assert cli.main(["eval", "--robot", "so101", "--episodes", "3", "--max-steps", "9",
                     "--output", str(other)]) == 0  # fmt: skip
    capsys.readouterr()
    assert cli.main(["compare", str(evaluation), str(other), "--json"]) == 0
    captured = capsys.readouterr()
    assert "max_steps" in captured.err and "6" in captured.err and "9" in captured.err
    assert json.loads(captured.out)["warnings"]
    assert cli.main(["compare", str(evaluation), str(evaluation)]) == 0
    assert "max_steps" not in capsys.readouterr().err
