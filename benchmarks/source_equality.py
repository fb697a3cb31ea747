"""Fashion-MNIST in every source vitkit reads, in one sample order, and a bitwise comparison of the runs' losses.

`prepare OUT` writes, from the IDX files:
  OUT/memory/   the IDX files with the samples stably sorted by class: the in-memory source (data.data_dir)
  OUT/folder/   the same images as PNG in an ImageFolder, OUT/folder/{train,test}/<label>_<name>/<position>.png
An ImageFolder's sample i is the i-th file in (class folder, file name) order, so a folder cannot hold the IDX
order; sorting the in-memory copy by class gives both sources the same index -> image map (training draws its
batches by a seeded permutation, so storage order does not change what training sees, only which index holds an
image). `vitkit data pack fashion_mnist --data-dir OUT/memory` then writes the WebDataset and HF copies in the
same order.

`resumed RUN` checks a run killed and resumed in place: the losses each attempt logged (TensorBoard) before
it was killed, the steps past its last checkpoint included, against the finished run's.

`compare RUN_A RUN_B ... [--step S]` prints, for each run against the first, whether every training loss in
metrics.jsonl is bitwise equal (else the first differing step and the largest difference), whether the final
weights (or those of the step-S checkpoints, for a killed and resumed run) are, and the final test accuracy.

    python benchmarks/source_equality.py prepare /work/big/fm
    python benchmarks/source_equality.py compare runs/memory runs/folder runs/hf runs/wds
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch
from PIL import Image
from safetensors.torch import load_file
from tqdm import tqdm

from vitkit.data.builtin import FASHION_FILES, load_fashion_mnist, write_idx


def folder_name(label: int, name: str) -> str:
    """'<label>_<name>' with path-unsafe characters replaced: sorted folder order is label order."""
    return f"{label}_{re.sub(r'[^A-Za-z0-9]+', '_', name).strip('_')}"


def prepare(out: Path, data_dir: str | None) -> None:
    for split in ("train", "test"):
        dataset = load_fashion_mnist(split, data_dir, subset="full")
        order = torch.sort(dataset.labels, stable=True).indices
        images, labels = dataset.images[order], dataset.labels[order]
        image_file, label_file = FASHION_FILES[split]
        (out / "memory").mkdir(parents=True, exist_ok=True)
        write_idx(out / "memory" / image_file, images[:, 0].numpy())
        write_idx(out / "memory" / label_file, labels.numpy().astype("uint8"))
        folders = [out / "folder" / split / folder_name(i, c) for i, c in enumerate(dataset.classes)]
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
        for position in tqdm(range(len(labels)), desc=f"{split} PNGs", unit="img", mininterval=2.0):
            pixels = images[position, 0].numpy()
            Image.fromarray(pixels, "L").save(folders[int(labels[position])] / f"{position:05d}.png")
        print(
            f"{split}: {len(labels)} images from {dataset.description}, sorted by class, in {out}/memory and {out}/folder"
        )


def losses(run: Path, last: int | None = None) -> dict[int, float]:
    """Training loss of each step in metrics.jsonl (up to step `last`); a resumed step's loss is its last record."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    found = {r["step"]: r["train_loss"] for r in records if "train_loss" in r}
    return {step: loss for step, loss in found.items() if last is None or step <= last}


def weights(run: Path, step: int | None) -> dict[str, torch.Tensor]:
    """The model weights of the run's end (RUN/final) or of its checkpoint at `step`."""
    directory = run / "final" if step is None else run / "checkpoints" / f"step_{step:08d}"
    return load_file(directory / "model.safetensors")


def compare(runs: list[Path], step: int | None = None) -> None:
    reference, reference_weights = losses(runs[0], step), weights(runs[0], step)
    for run in runs:
        found, found_weights = losses(run, step), weights(run, step)
        steps = sorted(set(reference) & set(found))
        differing = [s for s in steps if found[s] != reference[s]]
        largest = max((abs(found[s] - reference[s]) for s in steps), default=0.0)
        verdict = "bitwise equal" if not differing and steps else f"first difference at step {differing[0]}"
        same_weights = found_weights.keys() == reference_weights.keys() and all(
            torch.equal(found_weights[k], reference_weights[k]) for k in reference_weights
        )
        at = "final" if step is None else f"step {step}"
        line = (
            f"{run}: {len(steps)} losses vs {runs[0].name}: {verdict}, largest difference {largest:.3g}; "
            f"{at} weights {'bitwise equal' if same_weights else 'differ'}"
        )
        report = run / "report.json"
        if step is None and report.is_file():
            summary = json.loads(report.read_text())
            line += f"; test top-1 {100 * summary['test_top1']:.2f}% ({summary['train_data']})"
        print(line)


def resumed(run: Path) -> None:
    """A run killed and resumed in place: the losses each attempt logged to TensorBoard (float32, as computed)
    against the finished run's metrics.jsonl, which keeps the last record of each step, for all the steps the
    attempt logged; those past the checkpoint the next attempt resumed from were computed twice."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    final = losses(run)
    attempts = []
    for events in sorted((run / "tensorboard").glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        attempts.append({e.step: e.value for e in accumulator.Scalars("train_loss")})
    for logged, following in zip(attempts, attempts[1:], strict=False):
        resumed_at = min(following) - 1
        redone = [step for step in sorted(logged) if step > resumed_at]
        differing = [step for step in sorted(logged) if logged[step] != final.get(step)]
        verdict = "all bitwise equal" if not differing else f"first difference at step {differing[0]}"
        print(
            f"attempt logged steps {min(logged)}-{max(logged)}, the next resumed at step {resumed_at} and "
            f"computed steps {redone[0] if redone else '-'}-{redone[-1] if redone else '-'} again: {verdict} "
            "to the finished run's losses"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("prepare", help="write the class-sorted IDX copy and the PNG ImageFolder")
    p.add_argument("out", type=Path)
    p.add_argument(
        "--data-dir", default=None, help="where the Fashion-MNIST IDX files are (default: vitkit's search)"
    )
    c = sub.add_parser("compare", help="compare the training losses and weights of runs against the first")
    c.add_argument("runs", type=Path, nargs="+")
    c.add_argument(
        "--step", type=int, default=None, help="compare up to this step's checkpoint (default: the end)"
    )
    r = sub.add_parser(
        "resumed", help="a killed and resumed run: the losses logged before each kill against the final ones"
    )
    r.add_argument("run", type=Path)
    args = parser.parse_args()
    if args.action == "prepare":
        prepare(args.out, args.data_dir)
    elif args.action == "resumed":
        resumed(args.run)
    else:
        compare(args.runs, args.step)


if __name__ == "__main__":
    main()
