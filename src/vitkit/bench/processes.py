"""A timing candidate that runs in processes of its own: N spawned workers (data-parallel over gloo when N > 1),
each building its step from a module-level function, stepping when asked. Every candidate thus starts from the
same fresh process state (allocator, threads), and the parent only waits meanwhile: time it on the wall clock."""

from __future__ import annotations

import contextlib
import socket

import torch
import torch.distributed as dist

from vitkit.training.distributed import environment


def _worker(rank: int, processes: int, threads: int, port: int, connection, build: tuple) -> None:
    """One process of a candidate: joins a gloo group when there are several, builds its step with
    `build[0](*build[1:])`, then runs as many steps as each request asks for until asked for 0."""
    torch.set_num_threads(threads)
    if processes > 1:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=processes
        )
    try:
        step = build[0](*build[1:])
        connection.send("ready")
        while (steps := connection.recv()) > 0:
            connection.send([step() for _ in range(steps)][-1])
    finally:
        if processes > 1:
            dist.destroy_process_group()


class StepProcesses:
    """`processes` spawned workers of `threads` threads, each building its step from `build` (a module-level
    function and its arguments); a call runs `steps` steps in every worker and returns the first worker's last
    result (a loss) when all are done."""

    def __init__(self, processes: int, threads: int, steps: int, build: tuple) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        context = torch.multiprocessing.get_context("spawn")
        self.steps, self.connections, self.workers = steps, [], []
        # As the launcher sets it: OpenMP sized at start-up, not only narrowed later by torch.set_num_threads,
        # which ran measurably slower.
        with environment(OMP_NUM_THREADS=str(threads)):
            for rank in range(processes):
                ours, theirs = context.Pipe()
                worker = context.Process(
                    target=_worker, args=(rank, processes, threads, port, theirs, build), daemon=True
                )
                worker.start()
                theirs.close()  # so a worker that dies is an EOFError here, not a hang
                self.connections.append(ours)
                self.workers.append(worker)
        for rank, connection in enumerate(self.connections):
            try:
                connection.recv()
            except EOFError:
                self.close()
                raise RuntimeError(
                    f"benchmark worker {rank} failed to start (its traceback is above)"
                ) from None

    def __call__(self) -> float:
        for connection in self.connections:
            connection.send(self.steps)
        losses = [connection.recv() for connection in self.connections]  # every worker's, so all are done
        return losses[0]

    def close(self) -> None:
        for connection in self.connections:
            with contextlib.suppress(OSError):
                connection.send(0)
        for worker in self.workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
