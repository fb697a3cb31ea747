"""The precision policy of every entry point: `auto`, `bf16` (bf16 autocast) or `fp32`.

`bf16` runs the forward pass under `torch.autocast(dtype=torch.bfloat16)`: matrix products and convolutions in
bf16, while the weights, gradients, optimizer state, EMA and checkpoints stay float32 and the loss is computed in
float32 (vitkit.training.objectives casts the logits). `fp32` is plain float32 throughout.

How `auto` decides, for one device and one model at one batch size:

- CUDA: bf16 when the GPU supports it (`torch.cuda.is_bf16_supported()`), fp32 otherwise.
- CPU: bf16 only when both hold:
  1. the CPU has native bf16 matrix units: the `amx_bf16` or `avx512_bf16` flag in /proc/cpuinfo (Intel Xeon
     Sapphire Rapids and later, AMD Zen 4 and later). Without them bf16 is emulated and slower, and nothing is
     measured (AMD Zen 3, most laptops, machines without /proc/cpuinfo);
  2. bf16 is faster for this work on this kind of CPU. Where nothing measured it before, the table of measured
     bf16/fp32 speed ratios shipped with vitkit (vitkit.precision_table: per CPU kind, AMX or avx512_bf16
     without AMX, and per mode, width, tokens and batch) decides by its nearest row, named in the reason. The
     gain follows the width of the matrix products, the rows per product and the CPU's units: a narrow model at
     batch 1 is mostly casts and small products and loses, ViT-B at batch 32 gains 2-4x.
  Only where the row is unsure (a ratio within `UNSURE` of 1) and a measurement costs at most `MEASURE_SHARE` of
  the work it decides for (a training run of many steps, an evaluation of many images) does `auto` measure: the
  caller's step (a training step or a forward pass of this model at this batch) runs `WARMUP_CALLS` times in
  each precision (the first calls build oneDNN's kernels), then alternately `MEASURE_ROUNDS` timed calls each,
  and bf16 wins when its median is lower. The timings are kept in the cache directory (vitkit.cache: one small
  JSON per CPU model, thread count, torch version, model configuration, input shape and mode), so the same call
  measures once per machine and every later process, measuring or not, chooses the same. The key leaves out the
  head's class count, a negligible part of the work: a folder of 5 classes reuses the measurement of one of 6.
  A measurement that does run is announced before it starts (`say`), with its cost once the first call has
  timed it.
- any other device: fp32.

Every decision comes with a one-line reason, printed by the commands and recorded in report.json (`precision`,
`precision_reason`, `device`) and in the benchmark tables. A training run keeps the precision it started with when
it resumes (it is saved in each checkpoint's state.json), so `auto` cannot change its mind mid-run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import nn

from vitkit.cache import read_record, record_path, write_record
from vitkit.device import cpu_flags, cpu_model
from vitkit.inference_weights import inference_module, weights_in
from vitkit.precision_table import TableRow, WorkShape, cpu_kind, load_table, model_shape, nearest_row
from vitkit.sizes import check_batch_size

PRECISIONS = ("auto", "bf16", "fp32")
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # CPU flags of native bf16 matrix arithmetic
WARMUP_CALLS = 2
MEASURE_ROUNDS = 3
MEASURE_BATCH = 32  # inference measures at most this batch: a few calls, seconds even for ViT-L
MEASURE_CALLS = 2 * (WARMUP_CALLS + MEASURE_ROUNDS)  # calls of the measured work, both precisions together
MEASURE_SHARE = 0.03  # auto measures only where its calls are at most this share of the work
UNSURE = (0.85, 1.2)  # table ratios (bf16 speed over fp32's) in this band are measured where that pays

Step = Callable[
    [torch.dtype | None], object
]  # one call of the measured work at an autocast dtype (None: fp32)

_measured: dict[str, tuple[float, float]] = {}  # record path -> (fp32 s, bf16 s), in this process


@dataclass(frozen=True)
class Precision:
    """What a run computes in (`name`: 'bf16' or 'fp32') on `device`, and why."""

    name: str
    reason: str
    device: torch.device

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """torch.bfloat16 for bf16 autocast, None for plain float32."""
        return torch.bfloat16 if self.name == "bf16" else None

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """The context to run forward passes in: bf16 autocast on this device, or nothing (`cache`: reuse each
        weight's cast within the region, which a CUDA graph capture must not)."""
        return autocast(self.device, self.autocast_dtype, cache)

    @contextlib.contextmanager
    def inference(self, model: nn.Module, compile: bool = False) -> Iterator[nn.Module]:
        """The context for inference of `model` in this precision: autocast around `weights_held`."""
        with self.autocast(), self.weights_held(model, compile) as m:
            yield m

    @contextlib.contextmanager
    def weights_held(self, model: nn.Module, compile: bool = False) -> Iterator[nn.Module]:
        """`model`'s weights held in bf16 for the block (`weights_in`), without autocast, which the caller takes
        from this precision itself (vitkit.evaluate); it yields the module to call (`inference_module`: compiled
        for inference with `compile`, else with its dense layers packed on a CPU)."""
        with weights_in(model, self.autocast_dtype), inference_module(model, compile) as m:
            yield m

    def record(self) -> dict[str, str]:
        """The report.json fields."""
        return {
            "precision": self.name,
            "precision_reason": self.reason,
            "device": describe_device(self.device),
        }

    def __str__(self) -> str:
        return f"{self.name} ({self.reason})"


def autocast(
    device: torch.device, dtype: torch.dtype | None, cache: bool = True
) -> contextlib.AbstractContextManager:
    """torch.autocast on `device` at `dtype` (`cache`: reuse each weight's cast within the region); a no-op for
    None (float32)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype, cache_enabled=cache)


def native_bf16_units(flags: frozenset[str] | None = None) -> list[str]:
    """The native bf16 matrix-unit flags this CPU has (amx_bf16, avx512_bf16); [] when bf16 is emulated."""
    flags = cpu_flags() if flags is None else flags
    return [flag for flag in NATIVE_BF16_FLAGS if flag in flags]


def describe_device(device: torch.device) -> str:
    """'cpu' or 'cuda:0 (NVIDIA H100 80GB HBM3)': what report.json and the benchmark tables record."""
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return str(device)


def choose_precision(
    precision: str,
    device: torch.device | str,
    *,
    measure: Step | None = None,
    key: Hashable | None = None,
    what: str = "this model",
    say: Callable[[str], None] | None = None,
) -> Precision:
    """Resolve `precision` ('auto' | 'bf16' | 'fp32') for `device`; see the module docstring for `auto`.

    `measure(dtype)` runs the work `auto` compares on a CPU with native bf16 units (a training step, a forward
    pass); `key` identifies it for the per-process cache (no cache without one); `what` names it in the reason.
    Without `measure` such a CPU gets bf16 unmeasured. `say` (default: stderr) announces a measurement.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    device = torch.device(device)
    if precision != "auto":
        return Precision(precision, "asked for" + _emulated_note(precision, device), device)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Precision("bf16", "auto: CUDA device with bf16 support", device)
        return Precision("fp32", "auto: this CUDA device has no bf16 support", device)
    if device.type != "cpu":
        return Precision(
            "fp32", f"auto: bf16 autocast is used on CUDA and CPU only, not {device.type}", device
        )
    units = native_bf16_units()
    if not units:
        return Precision(
            "fp32",
            f"auto: this CPU has no native bf16 matrix units ({' / '.join(NATIVE_BF16_FLAGS)} not in "
            "its flags), so bf16 would be emulated and slower",
            device,
        )
    if measure is None:
        return Precision("bf16", f"auto: CPU with {' and '.join(units)} (not measured)", device)
    earlier = stored_seconds(key) if key is not None else None
    fp32_s, bf16_s = measured_seconds(measure, key, what=what, say=say)
    timing = f"{bf16_s * 1e3:.4g} ms bf16 vs {fp32_s * 1e3:.4g} ms fp32 per call of {what}"
    if earlier is not None:
        timing += f", measured earlier ({earlier[1]})"
    if bf16_s < fp32_s:
        return Precision(
            "bf16", f"auto: CPU with {' and '.join(units)}, bf16 measured faster: {timing}", device
        )
    return Precision(
        "fp32", f"auto: CPU with {' and '.join(units)}, but bf16 measured slower: {timing}", device
    )


def measurement_record(key: Hashable) -> Path:
    """The cache file of a measurement: the caller's key on this CPU model, thread count and torch version."""
    return record_path("precision", [key, cpu_model(), torch.get_num_threads(), torch.__version__])


def stored_seconds(key: Hashable) -> tuple[tuple[float, float], Path] | None:
    """An earlier measurement of `key` on this machine (by this process or another) and its cache file."""
    record = measurement_record(key)
    if str(record) in _measured:
        return _measured[str(record)], record
    stored = read_record(record)
    if stored is None or not {"fp32_s", "bf16_s"} <= stored.keys():
        return None
    _measured[str(record)] = (float(stored["fp32_s"]), float(stored["bf16_s"]))
    return _measured[str(record)], record


def measured_seconds(
    measure: Step,
    key: Hashable | None = None,
    *,
    what: str = "the work",
    say: Callable[[str], None] | None = None,
) -> tuple[float, float]:
    """(fp32, bf16) median seconds per warm call of `measure` (`WARMUP_CALLS` each first, then alternated). With
    a `key` they are kept per process and in the cache directory, together with the CPU model, thread count and
    torch version, and an earlier measurement is returned instead. `say` (default: stderr) is told before the
    measurement starts, and its expected length after the first call."""
    if key is not None and (stored := stored_seconds(key)) is not None:
        return stored[0]
    say = say or _to_stderr
    record = None if key is None else measurement_record(key)
    once = f", once for this machine (kept in {record.parent})" if record is not None else ""
    say(f"precision auto: timing {MEASURE_CALLS} calls of {what} in bf16 and fp32{once}")
    dtypes = {"fp32": None, "bf16": torch.bfloat16}
    samples: dict[str, list[float]] = {name: [] for name in dtypes}
    with torch.random.fork_rng(devices=[]):  # the measurement leaves the caller's random stream alone
        for dtype in dtypes.values():
            for call in range(WARMUP_CALLS):
                start = time.perf_counter()
                measure(dtype)
                if dtype is None and call == 0:
                    first = time.perf_counter() - start  # with building the kernels: an upper bound
                    say(
                        f"precision auto: the first call took {first:.1f} s; at most ~{first * MEASURE_CALLS:.0f} s in all"
                    )
        for _ in range(MEASURE_ROUNDS):
            for name, dtype in dtypes.items():
                start = time.perf_counter()
                measure(dtype)
                samples[name].append(time.perf_counter() - start)
    result = (statistics.median(samples["fp32"]), statistics.median(samples["bf16"]))
    if record is not None:
        _measured[str(record)] = result
        write_record(record, {"fp32_s": result[0], "bf16_s": result[1], "key": repr(key), "cpu": cpu_model(),
                              "threads": torch.get_num_threads(), "torch": torch.__version__})  # fmt: skip
    return result


def inference_precision(
    precision: str,
    model: torch.nn.Module,
    batch_size: int,
    images: int | None = None,
    say: Callable[[str], None] | None = None,
) -> Precision:
    """The precision for inference of `model` (on the device of its parameters) in batches of `batch_size`, over
    `images` images in all when known; where `auto` measures, it times no-grad forward passes of random images at
    min(batch_size, 32), announced to `say` (default: stderr).

        precision = inference_precision("auto", model, 64)
        with torch.no_grad(), precision.inference(model):
            logits = model(images)
    """
    check_batch_size(batch_size)
    device = next(model.parameters()).device
    shape = (min(batch_size, MEASURE_BATCH), *_input_size(model))
    example: list[torch.Tensor] = []  # made on the first call: most decisions never measure

    def forward(dtype: torch.dtype | None) -> None:
        if not example:
            example.append(torch.randn(shape, device=device))
        with torch.inference_mode(), autocast(device, dtype):
            model(example[0])

    key = ("inference", model_signature(model), shape, str(device))
    if precision == "auto":
        work_calls = None if images is None else images / shape[0]
        work = model_shape(model, "inference", batch_size)
        if (rule := unmeasured_rule(device, key, work, work_calls)) is not None:
            return rule
    what = f"a forward pass at batch {shape[0]}"
    return choose_precision(precision, device, measure=forward, key=key, what=what, say=say)


def say_nothing(line: str) -> None:
    """A `say` for quiet runs: a measurement goes unannounced."""


def training_precision(
    precision: str,
    device: torch.device,
    model: nn.Module,
    steps: int,
    batch: int,
    measure: Step,
    key: Hashable,
    what: str,
    say: Callable[[str], None] | None = None,
) -> Precision:
    """The precision of a training run of `steps` steps at `batch`: `choose_precision`, where the table decides
    unless an earlier measurement of `key` does, or a measurement would pay (`unmeasured_rule`)."""
    if precision == "auto":
        work = model_shape(model, "training", batch)
        if (rule := unmeasured_rule(device, key, work, float(steps))) is not None:
            return rule
    return choose_precision(precision, device, measure=measure, key=key, what=what, say=say)


def unmeasured_rule(
    device: torch.device, key: Hashable, work: WorkShape, work_calls: float | None
) -> Precision | None:
    """auto on a CPU with no earlier measurement of `key`: the table's choice for `work`
    (`table_precision`), unless its row is unsure and a measurement costs at most `MEASURE_SHARE` of the work
    (`work_calls`: the work in calls of the measured size; None: unknown, never measured). None: measure (or
    decide by `choose_precision`)."""
    if device.type != "cpu" or stored_seconds(key) is not None:
        return None
    if not native_bf16_units():  # fp32, with the table's row for emulated bf16
        return table_precision(work, device)[0]
    pays = work_calls is not None and MEASURE_CALLS <= MEASURE_SHARE * work_calls
    chosen, row = table_precision(work, device)
    if pays and (row is None or UNSURE[0] <= row.bf16_speedup <= UNSURE[1]):
        return None
    return chosen


def table_precision(work: WorkShape, device: torch.device) -> tuple[Precision, TableRow | None]:
    """What the shipped table says for `work` on this CPU, unmeasured, and the row that decided (None: the table
    has no row for this kind of CPU, and native bf16 units get bf16)."""
    units = native_bf16_units()
    row = nearest_row(load_table(), cpu_kind(frozenset(units)), work)
    if not units:
        emulated = choose_precision("auto", device)
        if row is not None:
            emulated = Precision("fp32", f"{emulated.reason}; {row.describe()}", device)
        return emulated, row
    cpu = f"auto: CPU with {' and '.join(units)}"
    if row is None:
        return Precision("bf16", f"{cpu} (no table row for this CPU kind, not measured)", device), None
    name = "bf16" if row.bf16_speedup >= 1.0 else "fp32"
    return Precision(name, f"{cpu}; {work.describe()}: {row.describe()} (not measured)", device), row


def _input_size(model: nn.Module) -> tuple[int, int, int]:
    """(channels, height, width) of one input image, from the `config` every vitkit model carries: read as a
    value, so this module, which the models sit above, imports none of them."""
    size = getattr(getattr(model, "config", None), "input_size", None)
    if size is None:
        raise TypeError(f"{type(model).__name__} is not a vitkit model (VisionTransformer or ResNetV2)")
    return cast(tuple[int, int, int], tuple(size))


def model_signature(model: torch.nn.Module) -> str:
    """The class and configuration of a model, less the head's class count (a negligible part of the work):
    what the measurement cache tells models apart by."""
    config = getattr(model, "config", None)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = {k: v for k, v in dataclasses.asdict(config).items() if k != "num_classes"}
    return f"{type(model).__name__}:{config!r}"


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _emulated_note(precision: str, device: torch.device) -> str:
    if precision == "bf16" and device.type == "cpu" and not native_bf16_units():
        return "; this CPU has no native bf16 matrix units, so bf16 is emulated and likely slower than fp32"
    return ""
