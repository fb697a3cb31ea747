"""Progress of a run: a tqdm bar (loss, lr, images/s, ETA) on a terminal, plain log lines otherwise (CI)."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    """Shows training progress; `enabled=False` (ranks other than 0) keeps it silent."""

    def __init__(self, total: int, initial: int, log_every: int, enabled: bool = True) -> None:
        self.total, self.log_every, self.enabled = total, log_every, enabled
        on_terminal = enabled and sys.stderr.isatty()
        self.bar = (
            tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True) if on_terminal else None
        )
        self.start_time, self.start_step = time.perf_counter(), initial

    def update(
        self, step: int, loss: float, lr: float, images_per_second: float, data_wait: float = 0.0
    ) -> None:
        """Record completed `step` (1-based count); `data_wait` is the share of the timed steps so far spent on
        their input (waiting for the batch, mixing it)."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            postfix = {
                "loss": f"{loss:.4f}",
                "lr": f"{lr:.2e}",
                "img/s": f"{images_per_second:.0f}",
                "data wait": f"{data_wait:.0%}",
            }
            self.bar.set_postfix(postfix, refresh=False)
        elif step % self.log_every == 0 or step == self.total:
            elapsed = time.perf_counter() - self.start_time
            eta = elapsed / max(step - self.start_step, 1) * (self.total - step)
            self.write(
                f"step {step}/{self.total}  loss {loss:.4f}  lr {lr:.2e}  {images_per_second:.3g} img/s  "
                f"data wait {data_wait:.1%}  eta {_duration(eta)}"
            )

    def write(self, message: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(message)
        else:
            print(message, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"
