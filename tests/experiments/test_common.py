"""The experiments' shared pieces: one vitkit run per directory (reused when finished, resumed when stopped),
the figures of seeds, the Markdown table."""

import json

import pytest

from experiments import common, data_size


def test_a_finished_run_is_reused_and_a_stopped_one_resumed(tmp_path, monkeypatch):
    calls = []

    def fake_main(argv):
        calls.append(argv)
        (tmp_path / "stopped" / "report.json").write_text(json.dumps({"test_top1": 0.5}))
        return 0

    monkeypatch.setattr(common.cli, "main", fake_main)
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "report.json").write_text(json.dumps({"test_top1": 0.25}))
    assert common.run_vitkit("train", tmp_path / "done", ["--seed", "1"]) == {"test_top1": 0.25}
    assert calls == []
    (tmp_path / "stopped").mkdir()
    (tmp_path / "stopped" / "config.toml").write_text("")
    assert common.run_vitkit("train", tmp_path / "stopped", ["--seed", "1"]) == {"test_top1": 0.5}
    assert calls == [["train", "--out", str(tmp_path / "stopped"), "--seed", "1", "--resume"]]


def test_a_failed_run_stops_the_experiment(tmp_path, monkeypatch):
    monkeypatch.setattr(common.cli, "main", lambda argv: 2)
    with pytest.raises(RuntimeError, match=r"`vitkit train --out .*/run --seed 1` failed \(exit code 2\)"):
        common.run_vitkit("train", tmp_path / "run", ["--seed", "1"])


def test_seeds_are_reported_as_mean_and_sample_std():
    assert common.percent([0.9]) == "90.00%"
    assert common.percent([0.9, 0.8]) == "85.00 ± 7.07%"
    assert common.markdown_table(["n", "acc"], [[1, "2%"]]) == "| n | acc |\n| ---: | --- |\n| 1 | 2% |"


def test_compute_grows_with_the_square_root_of_the_data_and_scales():
    assert [data_size.steps_for(n, 800) for n in data_size.SIZES] == [800, 1386, 2530, 4382, 6197]
    assert common.scaled(6197, 0.1) == 620 and common.scaled(800, 0.0001) == 2
