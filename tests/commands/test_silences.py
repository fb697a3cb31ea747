"""No command of the own-photos journey is silent for long, and what it prints stays readable on a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitkit
from tiny import build_tiny_vit

ROOT = Path(__file__).parents[2]
SILENCE_LIMIT = 30  # seconds without a line, on a machine shared with other work


@pytest.mark.slow
def test_no_command_of_the_journey_goes_30_s_without_output(tmp_path) -> None:
    """benchmarks/journey_gaps.py runs every command and Python call of docs/start/own-photos.md (a tiny
    checkpoint, random photos) as a process of its own and exits 1 if one of them is silent for the limit."""
    script = ROOT / "benchmarks" / "journey_gaps.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "journey"), "--limit", str(SILENCE_LIMIT)],
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 9 and all(float(row.split("|")[4]) <= SILENCE_LIMIT for row in rows)


@pytest.mark.slow
def test_predict_results_never_share_the_progress_bars_line(tmp_path) -> None:
    """On a terminal (stdout and stderr the same tty), each result starts a line of its own: the bar is cleared
    before a result is printed, never written onto its line."""
    build_tiny_vit(num_classes=3).save_pretrained(tmp_path / "weights")
    for index in range(12):  # more than predict's PROGRESS_MIN: a bar is drawn
        pixels = np.random.default_rng(index).integers(0, 256, (20, 20, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"photo{index:02d}.png")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal's 100 columns
    argv = [sys.executable, "-m", "vitkit.cli", "predict", str(tmp_path), "--weights", str(tmp_path / "weights"),
            "--precision", "fp32"]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(Path(vitkit.__file__).parents[1])}
    process = subprocess.Popen(argv, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other end closed
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=120) == 0
    text = output.decode(errors="replace")
    starts = [text.index(str(tmp_path / f"photo{index:02d}.png")) for index in range(12)]
    assert "image" in text  # the bar was drawn
    assert all(text[start - 1] in "\r\n" for start in starts), [text[start - 40 : start] for start in starts]
