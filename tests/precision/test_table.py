"""The table `auto` decides by: the shipped rows, the shape of a model's work, the nearest row, and `vitkit bench
precision --table/--check`, which measure it on this machine (a tiny grid here: the timings are not asserted)."""

import json

import pytest
import torch

from vitkit import cli
from vitkit.bench import precision_grid
from vitkit.models import create_model
from vitkit.precision_table import (
    CPU_KINDS,
    MODES,
    TableRow,
    WorkShape,
    cpu_kind,
    load_table,
    model_shape,
    nearest_row,
)


def test_the_shipped_table_has_rows_for_every_cpu_kind_with_their_source():
    rows = load_table()
    assert {row.kind for row in rows} == set(CPU_KINDS)
    assert {row.shape.mode for row in rows if row.kind != "none"} == set(MODES)
    assert all(row.bf16_speedup > 0 and row.source for row in rows)
    assert all(row.bf16_speedup < 1 for row in rows if row.kind == "none")  # emulated bf16 loses


@pytest.mark.parametrize(
    "name, overrides, width, tokens",
    [
        ("ViT-B/16", {}, 768, 197),
        ("ViT-S/16", {"img_size": 384}, 384, 577),
        ("ViT-Mini/4", {"img_size": 28, "classifier": "gap"}, 96, 49),
        ("R50+ViT-B/16", {}, 768, 197),  # 1x1 patches of the stride-16 feature map
        ("R50x1", {}, 2048, 49),
    ],
)
def test_the_shape_of_a_models_work(name, overrides, width, tokens):
    model = create_model(name, device="meta", **overrides)
    assert model_shape(model, "training", 8) == WorkShape("training", width, tokens, 8)


def test_the_cpu_kind_comes_from_its_flags():
    assert cpu_kind(frozenset({"avx512_bf16", "amx_bf16"})) == "amx"
    assert cpu_kind(frozenset({"avx512f", "avx512_bf16"})) == "avx512_bf16"
    assert cpu_kind(frozenset({"avx2"})) == "none"


def test_the_nearest_row_keeps_to_the_kind_and_prefers_the_mode():
    def row(kind, mode, width, batch):
        return TableRow(kind, WorkShape(mode, width, 197, batch), 1.0, f"{kind} {mode} {width} {batch}", "")

    rows = [
        row("amx", "inference", 384, 8),
        row("amx", "inference", 768, 32),
        row("avx512_bf16", "training", 768, 1),
    ]
    assert nearest_row(rows, "amx", WorkShape("inference", 1024, 197, 16)).model == "amx inference 768 32"
    assert nearest_row(rows, "amx", WorkShape("inference", 192, 197, 1)).model == "amx inference 384 8"
    assert (
        nearest_row(rows, "amx", WorkShape("training", 768, 197, 1)).shape.mode == "inference"
    )  # no such mode
    assert nearest_row(rows, "none", WorkShape("training", 768, 197, 1)) is None


def test_a_malformed_table_is_refused_naming_the_file(tmp_path):
    bad = tmp_path / "table.json"
    bad.write_text(json.dumps({"rows": [{"kind": "amx", "mode": "inference"}]}))
    with pytest.raises(ValueError, match=r"table.json: expected \{'rows'.*'width'"):
        load_table(bad)


def test_the_check_exits_non_zero_exactly_where_auto_is_more_than_10_percent_slower():
    assert precision_grid.exit_status([{"ok": "yes"}, {"ok": "yes"}]) == 0
    assert precision_grid.exit_status([{"ok": "yes"}, {"ok": "NO"}]) == 1
    measured = {"mode": "inference", "width": 768, "tokens": 197, "batch": 32}
    cpu = torch.device("cpu")
    chosen = precision_grid.check_row({**measured, "bf16 vs fp32": 1.0}, cpu)["auto"]
    far = "fp32" if chosen == "bf16" else "bf16"  # a measured ratio that makes auto's choice 1.5x slower
    row = precision_grid.check_row({**measured, "bf16 vs fp32": 1.5 if far == "bf16" else 1 / 1.5}, cpu)
    assert row["faster"] == far and row["ok"] == "NO" and row["auto vs faster"] == "1.50x the time"
    close = precision_grid.check_row({**measured, "bf16 vs fp32": 1.08 if far == "bf16" else 1 / 1.08}, cpu)
    assert close["ok"] == "yes"


@pytest.mark.slow
def test_bench_precision_check_and_table_on_a_tiny_grid(tmp_path, capsys, restore_threads):
    tiny = ["--models", "ViT-Ti/16", "--img-size", "32", "--batches", "2", "--rounds", "1", "--quiet"]
    tiny += ["--threads", "1", "--clock", "cpu"]  # two threads of a loaded machine wait on each other
    status = cli.main(["bench", "precision", "--check", *tiny])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| ViT-Ti/16 at 32 |")]
    assert [line.split(" | ")[1] for line in lines] == ["inference", "training"]
    assert status == (1 if any("| NO |" in line for line in lines) else 0)
    assert all("table row" in line or "no native bf16" in line for line in lines)  # the row that decided
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"source": "s", "rows": [{"kind": "other", "mode": "inference", "width": 1,
                                                          "tokens": 1, "batch": 1, "bf16_speedup": 1.0, "model": "m"}]}))  # fmt: skip
    assert cli.main(["bench", "precision", "--table", str(table), "--modes", "inference", *tiny]) == 0
    rows = load_table(table)
    assert [row.kind for row in rows][0] == "other" and len(rows) == 2  # other kinds' rows kept
    assert rows[1].shape == WorkShape("inference", 192, 5, 2) and rows[1].bf16_speedup > 0
