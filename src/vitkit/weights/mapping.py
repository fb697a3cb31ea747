"""Name tables between vitkit and foreign weight layouts, one table per format, used in both directions.

A `Rule` pairs vitkit key pattern(s) with foreign key pattern(s) and a `Transform` that turns the tensors of
one side into the tensors of the other. Patterns hold integer placeholders such as `{i}` (same number on both
sides) or `{s-1}` (the foreign side counts from 0 where vitkit counts from 1). `Table.to_vitkit` and
`Table.from_vitkit` run the same rules through the same code, with the sides swapped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

Tensors = list[torch.Tensor]
Context = Mapping[str, Any]
Convert = Callable[[Tensors, Context], Tensors]

_PLACEHOLDER = re.compile(r"\{(\w+)([+-]\d+)?\}")


class Transform(NamedTuple):
    """Tensor conversion both ways: `to_vitkit(foreign tensors)` and `to_foreign(vitkit tensors)`."""

    to_vitkit: Convert
    to_foreign: Convert


def _same(tensors: Tensors, ctx: Context) -> Tensors:
    return list(tensors)


def _transpose(tensors: Tensors, ctx: Context) -> Tensors:
    return [t.T for t in tensors]


IDENTITY = Transform(_same, _same)
LINEAR = Transform(_transpose, _transpose)  # flax Dense kernel [in, out] <-> torch Linear weight [out, in]
CONV = Transform(  # flax HWIO <-> torch OIHW
    lambda ts, ctx: [t.permute(3, 2, 0, 1) for t in ts],
    lambda ts, ctx: [t.permute(2, 3, 1, 0) for t in ts],
)
# Three separate q, k, v projections <-> one fused qkv Linear (q, k, v stacked along the output axis).
SPLIT_QKV = Transform(lambda ts, ctx: [torch.cat(ts, dim=0)], lambda ts, ctx: list(ts[0].chunk(3, dim=0)))


class _Pattern:
    """A key pattern with integer placeholders, matched against keys and formatted from bindings."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.fields: list[tuple[str, int]] = []
        regex, pos = "", 0
        for m in _PLACEHOLDER.finditer(text):
            regex += re.escape(text[pos : m.start()]) + r"(\d+)"
            self.fields.append((m.group(1), int(m.group(2) or 0)))
            pos = m.end()
        self.regex = re.compile(regex + re.escape(text[pos:]) + "$")

    def match(self, key: str) -> dict[str, int] | None:
        m = self.regex.match(key)
        if m is None:
            return None
        bindings: dict[str, int] = {}
        for (name, offset), value in zip(self.fields, m.groups(), strict=True):
            number = int(value) - offset
            if bindings.setdefault(name, number) != number:
                return None
        return bindings

    def format(self, bindings: Mapping[str, int]) -> str:
        return _PLACEHOLDER.sub(lambda m: str(bindings[m.group(1)] + int(m.group(2) or 0)), self.text)


def _as_tuple(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class Rule:
    """vitkit key(s) <-> foreign key(s); the first pattern of each side carries every placeholder."""

    vitkit: tuple[str, ...]
    foreign: tuple[str, ...]
    transform: Transform = IDENTITY

    @classmethod
    def of(
        cls, vitkit: str | Sequence[str], foreign: str | Sequence[str], transform: Transform = IDENTITY
    ) -> Rule:
        return cls(_as_tuple(vitkit), _as_tuple(foreign), transform)


@dataclass
class Converted:
    """Converted tensors plus, for every output key, the input keys it came from (for error messages)."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    origins: dict[str, tuple[str, ...]] = field(default_factory=dict)


class Table:
    """A format's rules; converts whole state dicts and reports what does not fit."""

    def __init__(self, name: str, rules: Iterable[Rule]) -> None:
        self.name = name
        self.rules = [
            (tuple(map(_Pattern, r.vitkit)), tuple(map(_Pattern, r.foreign)), r.transform) for r in rules
        ]

    def to_vitkit(
        self, tensors: Mapping[str, torch.Tensor], source: str, ctx: Context | None = None
    ) -> Converted:
        """Foreign state -> vitkit state; unknown or incomplete foreign keys: a ValueError naming `source`."""
        return self._apply(tensors, source, ctx or {}, reverse=False)

    def from_vitkit(
        self, tensors: Mapping[str, torch.Tensor], target: str, ctx: Context | None = None
    ) -> Converted:
        """vitkit state -> foreign state; vitkit keys the format has no place for are a ValueError."""
        return self._apply(tensors, target, ctx or {}, reverse=True)

    def _apply(
        self, tensors: Mapping[str, torch.Tensor], where: str, ctx: Context, reverse: bool
    ) -> Converted:
        out = Converted()
        used: set[str] = set()
        incomplete: list[str] = []
        for ours, theirs, transform in self.rules:
            src, dst, convert = (
                (ours, theirs, transform.to_foreign) if reverse else (theirs, ours, transform.to_vitkit)
            )
            for key in tensors:
                bindings = src[0].match(key)
                if bindings is None:
                    continue
                src_keys = [p.format(bindings) for p in src]
                absent = [k for k in src_keys if k not in tensors]
                if absent:
                    incomplete.append(f"{key} needs {absent}")
                    continue
                dst_keys = [p.format(bindings) for p in dst]
                inputs = [tensors[k] for k in src_keys]
                try:
                    outputs = convert(inputs, ctx)
                except (RuntimeError, ValueError, IndexError) as error:
                    shapes = {k: tuple(t.shape) for k, t in zip(src_keys, inputs, strict=True)}
                    raise ValueError(
                        f"{where}: cannot convert {shapes} to {dst_keys} for the {self.name} layout ({error})"
                    ) from None
                for k, v in zip(dst_keys, outputs, strict=True):
                    out.tensors[k] = v.contiguous()
                    out.origins[k] = tuple(src_keys)
                used.update(src_keys)
        unknown = sorted(set(tensors) - used)
        if unknown or incomplete:
            side = "vitkit" if reverse else self.name
            parts = []
            if unknown:
                parts.append(
                    f"{len(unknown)} {side} key(s) with no {self.name if reverse else 'vitkit'} "
                    f"counterpart: {_preview(unknown)}"
                )
            if incomplete:
                parts.append(f"incomplete key groups: {_preview(incomplete)}")
            raise ValueError(f"{where}: " + "; ".join(parts))
        return out


def _preview(items: Sequence[str], limit: int = 8) -> str:
    """A bounded list for error messages: the first `limit` items and how many more."""
    shown = ", ".join(items[:limit])
    return f"[{shown}{f', ... ({len(items) - limit} more)' if len(items) > limit else ''}]"


def linear(
    vitkit: str, foreign: str, weight: str = "weight", bias: str = "bias", transform: Transform = IDENTITY
) -> list[Rule]:
    """The weight and bias of one affine layer (Linear, LayerNorm, GroupNorm, conv with bias)."""
    return [
        Rule.of(f"{vitkit}.weight", f"{foreign}{weight}", transform),
        Rule.of(f"{vitkit}.bias", f"{foreign}{bias}"),
    ]


def check_fits(
    model: torch.nn.Module,
    state: Mapping[str, torch.Tensor],
    source: str,
    origins: Mapping[str, tuple[str, ...]] | None = None,
    ignore: Iterable[str] = (),
) -> None:
    """A ValueError naming `source`, each missing/unexpected key and shape mismatch, before any copying."""
    skip = set(ignore)
    expected = {k: v for k, v in model.state_dict().items() if k not in skip}
    origins = origins or {}

    def name(key: str) -> str:
        src = origins.get(key)
        return f"{key} (from {', '.join(src)})" if src and src != (key,) else key

    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [
        f"{name(k)}: file {list(state[k].shape)}, model expects {list(expected[k].shape)}"
        for k in sorted(set(state) & set(expected))
        if tuple(state[k].shape) != tuple(expected[k].shape)
    ]
    problems = []
    if missing:
        problems.append(f"missing key(s) {_preview(missing)}")
    if unexpected:
        problems.append(f"unexpected key(s) {_preview([name(k) for k in unexpected])}")
    if wrong:
        problems.append(f"shape mismatch {_preview(wrong)}")
    if problems:
        config = getattr(model, "config", None)
        what = type(model).__name__ + (f" {describe(config)}" if config is not None else "")
        raise ValueError(f"{source}: weights do not fit {what}: " + "; ".join(problems))


def describe(config: Any) -> str:
    """A short config summary for messages: the fields that decide parameter shapes."""
    keys = (
        "hidden_size",
        "depth",
        "num_heads",
        "mlp_dim",
        "patch_size",
        "img_size",
        "num_classes",
        "representation_size",
        "classifier",
        "resnet_layers",
        "layers",
        "width_factor",
    )
    data = config.to_dict() if hasattr(config, "to_dict") else {}
    return "(" + ", ".join(f"{k}={data[k]}" for k in keys if k in data and data[k] is not None) + ")"
