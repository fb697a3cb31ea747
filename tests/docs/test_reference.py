"""The generated reference pages list what the code has, and the root pages' links point into the site."""

from __future__ import annotations

import argparse
import dataclasses

from docs.hooks.examples import on_page_markdown
from docs.hooks.reference import cli_page, field_default, recipe_page, subcommands, toml_value
from docs.hooks.root_pages import site_markdown

from vitkit.cli import build_parser
from vitkit.recipe.run_config import RunConfig


def test_every_recipe_field_is_listed_with_its_default() -> None:
    page = recipe_page()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `")}
    expected = set()
    for section in dataclasses.fields(RunConfig):
        for spec in dataclasses.fields(field_default(section)):
            key = f"`{section.name}.{spec.name}`"
            expected.add(key)
            assert f"`{toml_value(field_default(spec))}`".replace("|", "\\|") in rows[key], key
            assert not rows[key].rstrip().endswith("|  |"), (
                f"{key} has no help line (`option(default, help)`)"
            )
    assert set(rows) == expected


def test_a_field_help_line_is_shown(monkeypatch) -> None:
    @dataclasses.dataclass
    class Section:
        size: int = dataclasses.field(default=3, metadata={"help": "how many | at most"})

    @dataclasses.dataclass
    class Config:
        extra: Section = dataclasses.field(default_factory=Section)

    monkeypatch.setattr("vitkit.recipe.run_config.RunConfig", Config)
    assert "| `extra.size` | int | `3` | how many \\| at most |" in recipe_page()


def test_every_command_and_option_is_in_the_cli_page() -> None:
    page = cli_page()
    parser = build_parser()
    for command in [parser, *subcommands(parser)]:
        assert f"## `{command.prog}`" in page
        for action in command._actions:
            if action.option_strings and action.help is not argparse.SUPPRESS:
                assert action.option_strings[-1] in page, (command.prog, action.option_strings)
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert {f"## `vitkit {name}`" for name in commands.choices} <= set(page.splitlines())
    assert "## `vitkit bench inference`" in page  # a sub-command's sub-command


def test_root_links_point_into_the_site() -> None:
    text = (
        "[p](docs/PRECISION.md#on-a-gpu) [c](CONTRIBUTING.md) [l](LICENSE) [LICENSE](LICENSE) "
        "[`configs/x.toml`](configs/x.toml) "
        "[w](https://example.org/a.md) [a](#set-up)"
    )
    assert site_markdown(text) == (
        "[p](PRECISION.md#on-a-gpu) [c](contributing.md) l (`LICENSE`) `LICENSE` `configs/x.toml` "
        "[w](https://example.org/a.md) [a](#set-up)"
    )


def test_a_block_not_run_shows_its_reason_on_the_site() -> None:
    page = 'Text.\n\n<!-- skip: next "needs a GPU" -->\n```python\nx = 1\n```\n'
    shown = on_page_markdown(page)
    assert '!!! note "Not run by the tests"\n    needs a GPU\n' in shown and "<!--" not in shown
