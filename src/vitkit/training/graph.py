"""The update of a training step captured once as a CUDA graph and replayed every step (train.cuda_graph).

A small model's step on a GPU is bound by launching its kernels, not by running them: the forward and backward
passes, clipping and the optimizer of the default Fashion-MNIST model are hundreds of kernels that take longer
to launch from Python than to run. Captured once (torch.cuda.graph), the whole update is a single launch.

What the graph holds is fixed at capture: the input buffers (each step's images and labels are copied into
them), the learning rate (a tensor on the GPU, filled each step), the parameters, gradients and optimizer state
(updated in place). Capture needs warm-up updates first (cuBLAS workspaces, the optimizer's lazily made state);
they run on the first batch and are then undone (parameters, buffers, optimizer state and random number
generators restored), so every step of a run is a replay of the same graph from the same state: a resumed run
stays bitwise equal to an uninterrupted one. A batch of another size (images skipped as unreadable) is updated eagerly by the same code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

WARMUP_UPDATES = 2  # PyTorch's guide warms up a few iterations on a side stream before capturing

Update = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (images, labels) -> loss, gradients applied


class GraphedUpdate:
    """`update(x, y)` (forward, backward, clip, optimizer step; returns the loss) replayed as one CUDA graph."""

    def __init__(self, update: Update, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.update, self.model, self.optimizer = update, model, optimizer
        self.graph: torch.cuda.CUDAGraph | None = None
        self.x = self.y = self.loss = torch.empty(0)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
        """One step's update at learning rate `lr`; returns its loss (a 0-d tensor of its own)."""
        if self.graph is None:
            self._capture(x, y)
        for group in self.optimizer.param_groups:
            group["lr"].fill_(lr)
        if x.shape != self.x.shape or y.shape != self.y.shape:
            loss = self.update(x, y)
            self.optimizer.zero_grad(set_to_none=True)
            return loss
        self.x.copy_(x)
        self.y.copy_(y)
        assert self.graph is not None
        self.graph.replay()
        return self.loss.clone()

    def _capture(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Warm up on a side stream, undo the warm-up, then record the update on copies of `x` and `y`."""
        for group in self.optimizer.param_groups:  # read by the captured kernels, so on the GPU
            group["lr"] = torch.tensor(float(group["lr"]), device=x.device)
            if "capturable" in group:
                group["capturable"] = True
        saved = self._snapshot()
        generators = torch.get_rng_state(), torch.cuda.get_rng_state(x.device)  # dropout in the warm-up draws
        self.optimizer.zero_grad(set_to_none=True)
        side = torch.cuda.Stream(x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_UPDATES):
                self.update(x, y)
                self.optimizer.zero_grad(set_to_none=True)
        torch.cuda.current_stream(x.device).wait_stream(side)
        self._restore(saved)
        self.x, self.y = x.clone(), y.clone()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss = self.update(self.x, self.y)
        torch.set_rng_state(generators[0])
        torch.cuda.set_rng_state(generators[1], x.device)

    def _snapshot(self) -> dict[int, torch.Tensor]:
        """Copies of every parameter, buffer and optimizer-state tensor, keyed by the tensor's id."""
        tensors = [*self.model.parameters(), *self.model.buffers(), *self._optimizer_tensors()]
        return {id(t): t.detach().clone() for t in tensors}

    def _restore(self, saved: dict[int, torch.Tensor]) -> None:
        """Put back what `_snapshot` copied, in place; optimizer state made by the warm-up (a fresh run's moments
        and step counts) goes back to zero, the value the optimizer starts it from."""
        with torch.no_grad():
            for t in [*self.model.parameters(), *self.model.buffers()]:
                t.copy_(saved[id(t)])
            for t in self._optimizer_tensors():
                t.copy_(saved[id(t)]) if id(t) in saved else t.zero_()

    def _optimizer_tensors(self) -> list[torch.Tensor]:
        return [v for state in self.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
