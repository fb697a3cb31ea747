"""The three experiment commands' plumbing on the embedded subset with tiny models and a few steps: each runs,
writes its table and figure, and the table's numbers are those of the run directories it trained. Not their
results (that takes hours: docs/RESULTS.md). Each run's own figures (the engine's, tested there) are left out
for speed; data_size with all three families (a few seconds more) is marked slow."""

import argparse
import dataclasses
import json
from pathlib import Path

import pytest
from experiments.common import markdown_table, percent

from experiments import data_size, transfer, vit_budget
from vitkit.training import report as report_module
from vitkit.training.report import read_metrics

PNG_MAGIC = b"\x89PNG"


@pytest.fixture(autouse=True)
def no_run_figures(monkeypatch):
    """Each run's own curves and confusion matrix are the engine's (tested there): left out for speed."""
    monkeypatch.setattr(report_module, "write_curves", lambda run_dir: None)
    monkeypatch.setattr(report_module, "plot_confusion", lambda *args: None)


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every body row of the Markdown tables in a text."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines if not line.startswith("| ---")]


def tiny_probed(out: Path) -> list[str]:
    """Options of the budgeted experiments for seconds-long runs: tiny models, 2-step probes, one process."""
    return ["--out", str(out), "--tiny", "--probe-steps", "2", "--processes", "1", "--val-split", "100"]


def report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def check_outputs(md: Path) -> str:
    text = md.read_text()
    assert md.with_suffix(".png").read_bytes()[:4] == PNG_MAGIC
    assert "CPU " in text and "torch " in text  # the machine every number ran on
    bundle = json.loads(md.with_name(f"{md.stem}_reports.json").read_text())
    runs = {r.parent.name: json.loads(r.read_text()) for r in md.parent.glob("*/report.json")}
    assert runs and bundle["runs"] == runs  # every run's report, kept with the table it backs
    assert not [name for name in bundle["files"] if name.endswith("_reports.json")]  # no bundle in a bundle
    return text


@pytest.mark.parametrize("families", ["vit", pytest.param("vit,resnet,hybrid", marks=pytest.mark.slow)])
def test_data_size_trains_each_family_on_the_same_subsets_and_tabulates_their_reports(tmp_path, families):
    md = data_size.main(
        [
            "--out",
            str(tmp_path),
            "--tiny",
            "--sizes",
            "50",
            "--steps-scale",
            "0.001",
            "--processes",
            "1",
            "--families",
            families,
        ]
    )
    chosen = [data_size.FAMILIES[key] for key in families.split(",")]
    rows = {row[1]: row for row in table_rows(check_outputs(md)) if row[0] == "50"}
    assert set(rows) == {f.name for f in chosen}
    for family in chosen:
        run = tmp_path / f"{family.recipe.removesuffix('.toml')}_n50_s0"
        r = report(run)
        assert "class-balanced subset of 50 images (seed 0)" in r["train_data"]
        assert rows[family.name][4:7] == [
            percent([r[k]]) for k in ("test_top1", "fewshot_5shot", "fewshot_25shot")
        ]


def test_data_size_names_the_families_it_knows(capsys):
    with pytest.raises(SystemExit):
        data_size.main(["--families", "vit,vgg"])
    assert "--families: unknown vgg; choose among vit, resnet, hybrid" in capsys.readouterr().err


def test_transfer_fine_tunes_both_sources_and_tabulates_reports_and_few_shot(tmp_path):
    md = transfer.main(
        [
            "--out",
            str(tmp_path),
            "--tiny",
            "--steps-scale",
            "0.001",
            "--processes",
            "1",
            "--seeds",
            "1",
            "--fewshot-seeds",
            "2",
        ]
    )
    rows = {row[0]: row for row in table_rows(check_outputs(md))}
    scratch = report(tmp_path / "scratch_s0")["test_top1"]
    assert "digits" in report(tmp_path / "scratch_s0")["train_data"]
    for arm, label in transfer.ARMS.items():
        top1 = report(tmp_path / f"{arm}_s0")["test_top1"]
        assert rows[label][1] == percent([top1])
        if arm != "scratch":
            assert rows[label][2] == percent([top1 - scratch]).replace("%", " points")
            linear = report(tmp_path / f"{arm}_linear_s0")
            assert linear["fit"] == "linear" and rows[label][3] == percent([linear["test_top1"]])
        shots = json.loads((tmp_path / f"fewshot_{arm}.json").read_text())["shots"]
        assert rows[label][6:] == [percent(shots[str(k)]["runs"]) for k in transfer.SHOTS]


def test_steps_are_sized_from_the_probes_step_time_and_periodic_evaluation(monkeypatch):
    """Probes of a run whose steady steps take 0.1 s after 2 s of warm-up, whose periodic evaluation takes 3 s
    and whose final evaluation 5 s: a 10-minute budget holds the steps that end it at MARGIN, evaluations
    included."""
    step, warmup, periodic, final = 0.1, 2.0, 3.0, 5.0

    def probe(model, args, steps, name="", extra=(), eval_every=0):
        train = warmup + steps * step
        evaluations = (steps - 1) // eval_every if eval_every else 0
        return train + evaluations * periodic + final, train

    monkeypatch.setattr(vit_budget, "probe", probe)
    args = argparse.Namespace(probe_steps=50, budget_minutes=10.0)
    steps = vit_budget.sized_steps(vit_budget.VIT_BUDGET, args)
    run = warmup + steps * step + vit_budget.EVALUATIONS * periodic + final
    assert 600 * vit_budget.MARGIN - step < run <= 600 * vit_budget.MARGIN


def test_probes_too_short_to_differ_size_the_steps_from_the_longer_ones_mean_step(monkeypatch):
    """Noise can make the longer probe's training take no longer than the shorter's: the run is then sized from the
    longer probe's mean step (its warm-up included, so it errs short), never from a zero or negative step."""

    def probe(model, args, steps, name="", extra=(), eval_every=0):
        return 10.0, 4.0  # wall and training seconds, whatever the steps

    monkeypatch.setattr(vit_budget, "probe", probe)
    args = argparse.Namespace(probe_steps=50, budget_minutes=10.0)
    steps = vit_budget.sized_steps(vit_budget.VIT_BUDGET, args)
    run = steps * 4.0 / 100 + (10.0 - 4.0)  # at the longer probe's mean step, its final evaluation once
    # ends before the budget, short of it by less than the short probe's training (whose warm-up it counts twice)
    assert 600 * vit_budget.MARGIN - 4.0 < run <= 600 * vit_budget.MARGIN


def test_vit_budget_sizes_both_runs_from_probes_and_tabulates_their_curves(tmp_path):
    md = vit_budget.main([*tiny_probed(tmp_path), "--budget-minutes", "0.005"])
    text = check_outputs(md)
    rows = {row[0]: row for row in table_rows(text)}
    for model in vit_budget.MODELS:
        run = tmp_path / vit_budget.run_name(model)
        r = report(run)
        assert rows[model.name][2:] == [
            str(r["steps"]),
            f"{r['epochs']:.1f}",
            f"{r['wall_seconds'] / 60:.1f}",
            f"{100 * r['test_top1']:.2f}%",
            f"{100 * r['val_top1']:.2f}%",
            rows[model.name][-1],
        ]
        curve = [
            [f"{x['wall_seconds'] / 60:.1f}", f"{100 * x['val_top1']:.2f}%"]
            for x in read_metrics(run)
            if "val_top1" in x
        ]
        assert len(curve) >= 2 and markdown_table(["m", "a"], curve).split("\n", 2)[2] in text


@pytest.mark.slow
def test_small_data_study_chooses_on_validation_and_compares_the_choices_seed_by_seed(tmp_path, monkeypatch):
    """A 2 x 2 grid with two shapes per family (the full grid's plumbing is the same), its best 2 cells again at
    twice the budget, the shapes there; then the best and its rival of the other augmentation level at the full
    budget, and the better of them at a second seed."""
    from experiments import small_data_study as study

    monkeypatch.setattr(study, "AUGMENTATION", {k: study.AUGMENTATION[k] for k in ("none", "light")})
    monkeypatch.setattr(
        study,
        "REGULARISATION",
        {f: {k: r[k] for k in ("none", "heavy")} for f, r in study.REGULARISATION.items()},
    )
    monkeypatch.setattr(study, "SHAPES", {f: dict(list(s.items())[:2]) for f, s in study.SHAPES.items()})
    common = tiny_probed(tmp_path)
    text = check_outputs(study.main([*common, "--short-minutes", "0.005", "--refine", "2"]))
    choices = json.loads((tmp_path / "choices.json").read_text())
    longer_runs, contenders = 0, {}
    for family in (study.VIT, study.RESNET):
        cells = study.grid(family)
        short = {c: report(tmp_path / c.name)["val_top1"] for c in cells}
        finalists = sorted(cells, key=short.__getitem__, reverse=True)[:2]
        longer = {c: report(tmp_path / study.longer(c))["val_top1"] for c in finalists}
        best = max(finalists, key=longer.__getitem__)
        variants = study.shapes(best)
        longer |= {c: report(tmp_path / study.longer(c))["val_top1"] for c in variants}
        leader = max(variants, key=longer.__getitem__)
        rival = max((c for c in cells if c.augmentation != leader.augmentation), key=short.__getitem__)
        contenders[family.name] = [leader, dataclasses.replace(rival, shape=leader.shape)]
        assert choices[family.name] == [study.described(c) for c in contenders[family.name]]
        longer_runs += len(longer)
    rows = table_rows(text)[1:]  # below the header: one per distinct run
    assert sum(row[0].endswith("(best)") for row in rows) == 2
    assert len(rows) == sum(len(study.grid(f)) for f in (study.VIT, study.RESNET)) + longer_runs
    final_args = [*common, "--budget-minutes", "0.005", "--seeds", "2", "--final"]
    vit_only = check_outputs(study.main([*final_args, "--family", "vit"]))
    assert (
        len(table_rows(vit_only)) == 3 and "McNemar" not in vit_only
    )  # header, the chosen ViT and its rival
    final = check_outputs(study.main(final_args))  # the ViT's runs read, the ResNet's trained
    for family in (study.VIT, study.RESNET):
        first = {c: report(tmp_path / study.final(c, 0)) for c in contenders[family.name]}
        chosen = max(first, key=lambda c: first[c]["val_top1"])
        assert report(tmp_path / study.final(chosen, 1))["val_images"] == 100  # the choice's second seed
        assert f"{family.name} (chosen) | {chosen.augmentation} | {chosen.regularisation} |" in final
        assert sum(1 for c in contenders[family.name] if (tmp_path / study.final(c, 1)).exists()) == 1
    assert final.count("exact McNemar p = ") == 2 and "time to 92% (validation)" in final  # one per seed pair
