"""README's and the getting-started pages' examples, shell and Python, run as pasted, in page order, from an empty
directory outside the checkout: what a new user's first hour runs.

The directory holds only what the pages presuppose of the user, made here: a photo folder (`photos/train/<class>/`,
`photos/test/<class>/`) and a `photo.jpg`. Published weights are named as the pages name them (`ViT-B/16-i21k`)
and download from a local mirror of Google's bucket (tests/docs/conftest.py: tiny files of the published
resolution, classes and patch size) into a cache of the test's own; recipes are the shipped names. Each shell
line is one `vitkit` command run through `vitkit.cli.main` with the line's arguments; `vitkit serve` binds a port
of the kernel's choice, answers the page and one photo, and stops. Lines that only a checkout can run (`make ...`)
and blocks marked `<!-- skip: next "reason" -->` are passed over; any other command fails the test. A failure names
the page and line.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from docs.conftest import use_mirror, write_photo, write_photos
from docs.documents import (
    ROOT,
    START_PAGES,
    Block,
    blocks,
    command_lines,
    shell_commands,
    simple_commands,
    vitkit_arguments,
    where,
)
from docs.test_python_examples import failing_line
from service.conftest import DEADLINE, wait_ready
from vitkit.cli import main
from vitkit.commands import serve
from vitkit.service.server import address, bind, server

JOURNEYS = {"README": [ROOT / "README.md"], "getting-started": list(START_PAGES)}
CHECKOUT_COMMANDS = {"make"}  # the checkout's own targets: set-up, the main job's 700 steps, the test suite
# three: `data.val_split=3` holds out one photo of each class, as of the sample folder
PHOTO_CLASSES = ("cat", "dog", "bird")


@pytest.fixture
def empty_directory(tmp_path: Path, weights_mirror: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "first-hour"
    directory.mkdir()
    assert not directory.resolve().is_relative_to(ROOT)
    write_photos(directory, PHOTO_CLASSES)
    write_photo(directory / "photo.jpg", 7)
    monkeypatch.chdir(directory)
    use_mirror(monkeypatch, weights_mirror, tmp_path / "cache")  # a new user's: nothing downloaded yet
    yield directory


class ServedOnce:
    """Stands in for the uvicorn server `vitkit serve` builds: serves in a thread until the page and one photo
    are answered, then stops as Ctrl-C would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.real = server(*args, **kwargs)
        self.answers: dict[str, Any] = {}

    def run(self, sockets: list[Any]) -> None:
        thread = threading.Thread(target=self.real.run, kwargs={"sockets": sockets}, daemon=True)
        thread.start()
        url = address(sockets[0])
        try:
            wait_ready(url)
            page = requests.get(f"{url}/", timeout=DEADLINE)
            self.answers["page"] = page.status_code
            photo = Path("photo.jpg").read_bytes()
            reply = requests.post(
                f"{url}/predict", data=photo, headers={"Content-Type": "image/jpeg"}, timeout=DEADLINE
            )
            self.answers["predict"] = reply.status_code
        finally:
            self.real.should_exit = True
            thread.join(DEADLINE)


def serve_once(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """`vitkit serve ...` as pasted, on a free port rather than 8000 (the machine may be serving something)."""
    made: list[ServedOnce] = []

    def record(*args: Any, **kwargs: Any) -> ServedOnce:
        made.append(ServedOnce(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(serve, "bind", lambda host, port: bind(host, 0))
    monkeypatch.setattr(serve, "server", record)
    code = main(argv)
    assert made and made[0].answers == {"page": 200, "predict": 200}, made and made[0].answers
    return code


def run_command(words: list[str], at: str, monkeypatch: pytest.MonkeyPatch, log: list[str]) -> None:
    argv = vitkit_arguments(words)
    if argv is None:
        assert words[0] in CHECKOUT_COMMANDS, f"{at}: `{' '.join(words)}` is not a vitkit command"
        log.append(f"{at}: passed over (a checkout's command): {' '.join(words)}")
        return
    started = time.perf_counter()
    try:
        code = serve_once(argv, monkeypatch) if argv[:1] == ["serve"] else main(argv)
    except SystemExit as exit:  # --help
        code = exit.code if isinstance(exit.code, int) else 1
    assert code == 0, f"{at}: `vitkit {' '.join(argv)}` exits with {code}"
    log.append(f"{at}: {time.perf_counter() - started:5.1f} s  vitkit {' '.join(argv)}")


def run_python(block: Block, path: Path, namespace: dict[str, Any], log: list[str]) -> None:
    started = time.perf_counter()
    source = "\n" * (block.line - 1) + "\n".join(block.lines)
    try:
        exec(compile(source, str(path), "exec"), namespace)
    except Exception as error:
        message = " ".join(f"{type(error).__name__}: {error}".split())
        line = failing_line(error, path, block.line)
        pytest.fail(f"{where(path, line)}: the example fails: {message}", pytrace=False)
    log.append(f"{where(path, block.line)}: {time.perf_counter() - started:5.1f} s  Python block")


def run_page(path: Path, monkeypatch: pytest.MonkeyPatch, log: list[str]) -> int:
    """Every block of `path` in order; the number of blocks that ran."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    ran = 0
    for block in blocks(path):
        if block.skipped is not None:
            log.append(f"{where(path, block.line)}: skipped: {block.skipped}")
        elif block.is_shell:
            for line, text in shell_commands(block):
                for words in simple_commands(text):
                    run_command(words, where(path, line), monkeypatch, log)
            ran += 1
        elif block.language == "python":
            run_python(block, path, namespace, log)
            ran += 1
    return ran


@pytest.mark.slow  # a minute or two: every command of the journey, trial steps of the recipes among them
@pytest.mark.parametrize("journey", JOURNEYS)
def test_every_example_runs_as_pasted_from_an_empty_directory(
    journey: str, empty_directory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log: list[str] = []
    try:
        for path in JOURNEYS[journey]:
            assert run_page(path, monkeypatch, log), f"{where(path, 1)}: nothing ran"
    finally:
        with capsys.disabled():
            print("\n" + "\n".join(log))
    first = json.loads((empty_directory / "runs" / "linear" / "report.json").read_text())
    # the cache keys a photo by its bytes: the first fit computes each distinct photo once
    photos = {hashlib.sha256(p.read_bytes()).digest() for p in (empty_directory / "photos").rglob("*.jpg")}
    assert first["features_computed"] == len(photos)
    if journey == "getting-started":  # the second fit reads the features the first one computed
        again = json.loads((empty_directory / "runs" / "linear-again" / "report.json").read_text())
        assert again["features_computed"] == 0
        assert (empty_directory / "model.onnx").is_file() and (
            empty_directory / "predictions.jsonl"
        ).is_file()


def runs_made(path: Path) -> dict[str, tuple[str, ...]]:
    """--out directory -> the vitkit command that makes it, for the commands of `path` that name one."""
    made = {}
    for command in command_lines(path):
        if "--out" in command.argv[:-1]:
            made[command.argv[command.argv.index("--out") + 1]] = command.argv
    return made


def test_readme_and_own_photos_make_the_same_runs_with_the_same_commands() -> None:
    readme, own_photos = runs_made(ROOT / "README.md"), runs_made(ROOT / "docs" / "start" / "own-photos.md")
    shared = readme.keys() & own_photos.keys()
    assert {"runs/linear", "runs/scratch", "runs/finetuned"} <= shared
    differ = {out: (readme[out], own_photos[out]) for out in shared if readme[out] != own_photos[out]}
    assert not differ, f"README and own-photos.md run these differently (batch sizes, steps, ...): {differ}"
