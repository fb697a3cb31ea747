"""Dynamic batching: one model thread gathers the images of concurrent requests into one forward pass.

Requests decode and preprocess their image on other threads and hand the model thread a ready tensor, so the
model never waits on a decoder. The model thread takes the first waiting image, then whatever else arrives within
`max_wait_s` (or is already waiting), up to `max_batch` images, and runs them together. The queue holds at most
`max_queue` images: past that `submit` raises Overloaded at once (the API answers 503) instead of letting memory
grow. `stop` refuses new images, answers every one already queued, then ends the thread.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from vitkit.service.metrics import Metrics
from vitkit.service.served_model import Explained, ServedModel, Session

log = logging.getLogger("vitkit.serve")


class Overloaded(RuntimeError):
    """The queue is full: the caller should answer 503 and let the client retry."""


class NotServing(RuntimeError):
    """The service is stopping, or its model thread failed."""


@dataclass
class Job:
    pixels: torch.Tensor  # [C, H, W], preprocessed
    explain: bool = False
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class Batcher:
    def __init__(
        self, model: ServedModel, metrics: Metrics, *, max_batch: int, max_wait_s: float, max_queue: int
    ) -> None:
        self.model = model
        self.metrics = metrics
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._jobs: queue.Queue[Job | None] = queue.Queue(max_queue)
        self._thread = threading.Thread(target=self._serve, name="vitkit-model", daemon=True)
        self.threads = torch.get_num_threads()  # the caller's intra-op threads: the model thread's own count
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self.failure: str | None = None
        self.can_explain = False

    def start(self) -> None:
        self._thread.start()

    @property
    def queued(self) -> int:
        return self._jobs.qsize()

    def state(self) -> str | None:
        """None when ready to answer, else why not."""
        if self.failure is not None:
            return f"the model thread failed: {self.failure}"
        if self._stopping.is_set():
            return "shutting down"
        if not self.ready.is_set():
            return "warming up (choosing the precision, first forward pass)"
        return None

    def submit(self, pixels: torch.Tensor, explain: bool = False) -> concurrent.futures.Future:
        """Queue one preprocessed image; the future gets its probabilities [classes] (an Explained with
        `explain`)."""
        if self._stopping.is_set() or self.failure is not None:
            raise NotServing(self.state() or "not serving")
        job = Job(pixels, explain)
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise Overloaded(f"{self._jobs.maxsize} images are queued already; retry later") from None
        return job.future

    def stop(self, timeout: float | None = None) -> None:
        """Refuse new images, answer the queued ones, end the thread."""
        self._stopping.set()
        if self._thread.is_alive():
            self._jobs.put(
                None
            )  # after every accepted image; the thread drains the queue, so this cannot stall
            self._thread.join(timeout)

    def _serve(self) -> None:
        torch.set_num_threads(self.threads)  # not the one thread a decoder may have set process-wide first
        try:
            with self.model.open_session(self.max_batch) as session:
                self.model.precision = session.precision
                self.model.precision_reason = session.precision_reason
                self.can_explain = session.explain is not None
                channels, height, width = self.model.input_size
                session.probs(torch.zeros(1, channels, height, width))  # the first pass builds the kernels
                self.ready.set()
                log.info("ready: precision %s (%s)", session.precision, session.precision_reason)
                while True:
                    jobs, last = self._gather()
                    self._run(session, jobs)
                    if last:
                        return
        except BaseException as error:  # noqa: B036 - whatever stops the thread must fail the waiting requests
            self.failure = " ".join(f"{type(error).__name__}: {error}".split())
            log.error("model thread failed: %s", self.failure)
            self._fail_waiting()
            raise

    def _gather(self) -> tuple[list[Job], bool]:
        """The next batch, and whether the stop mark came after it."""
        first = self._jobs.get()
        if first is None:
            return [], True
        jobs = [first]
        deadline = time.monotonic() + self.max_wait_s
        while len(jobs) < self.max_batch:
            try:
                job = self._jobs.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def _run(self, session: Session, jobs: list[Job]) -> None:
        plain = [job for job in jobs if not (job.explain and session.explain)]
        if plain:
            self.metrics.batch(len(plain))
            try:
                probs = session.probs(torch.stack([job.pixels for job in plain]))
            except Exception as error:
                for job in plain:
                    job.future.set_exception(error)
            else:
                for job, row in zip(plain, probs, strict=True):
                    job.future.set_result(row)
        for job in jobs:
            if job.explain and session.explain:
                self.metrics.batch(1)
                try:
                    result: Explained = session.explain(job.pixels)
                except Exception as error:
                    job.future.set_exception(error)
                else:
                    job.future.set_result(result)

    def _fail_waiting(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.future.set_exception(NotServing(self.state() or "not serving"))
