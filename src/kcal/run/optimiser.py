"""The training step's Adam, whose update of an element does not depend on where the element lies, so a seed
stacked with others (:mod:`kcal.run.stacked`) takes the steps it takes alone, whatever its stack's size.

torch's fused CPU Adam runs a tensor's elements in vector lanes and its last ``numel % lanes`` elements in a scalar
loop, which rounds otherwise. A member alone has all of a 2-element output bias in that
tail; stacked, its bias lies in lanes or in the tail by its position in the stack. So a seed's numbers depended on
its stack's size (adult, 10 seeds to a stack: positions 8 and 9 differed from the same seeds in a 16-seed stack, and
seeds 1, 2, 6 and 7 from the seeds alone; docs/results/full/HISTORY.md, 2026-11-28).

:class:`LaneAdam` hands the fused kernel only tensors whose size is a multiple of :data:`LANE_MULTIPLE`, so every
element of every parameter goes through the lanes, where each is computed alike: a parameter of such a size is
stepped as it is; the others (biases, a small output layer) are laid end to end in one buffer, each from a multiple
of :data:`LANE_MULTIPLE` with zeros between (the parameters become views of it, so the network uses them as
before; their gradients are copied in before each step). The zeros stay zero: zero gradient, zero weight decay,
zero update. torch's single-tensor and ``foreach`` Adam are position-free too (measured), but they pass over memory
once per operation, about ten times a step, where the fused kernel passes once: 1.2x a training epoch of crime's
10- and 50-seed stacks on this project's CPU. ``python -m kcal.bench.adam_step`` measures the cost against
torch's fused Adam over the parameters as they are.
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig

__all__ = ["LANE_MULTIPLE", "LaneAdam", "adam"]

#: the fused kernel steps tensors of a multiple of this many elements: a multiple of the float vector width of
#: every CPU torch vectorises for (AVX2 8, AVX-512 16 floats) and of its parallel chunks (16 floats, a cache line)
LANE_MULTIPLE = 64


def padded(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`LANE_MULTIPLE`."""
    return -(-n // LANE_MULTIPLE) * LANE_MULTIPLE


def torch_adam(tensors: list[torch.Tensor], lr: float, weight_decay: float) -> torch.optim.Adam:
    """torch's Adam over ``tensors``: fused where torch has a fused kernel for their device and dtype (one kernel
    per step), ``foreach`` otherwise (element-wise operations, position-free as well)."""
    try:
        return torch.optim.Adam(tensors, lr=lr, weight_decay=weight_decay, fused=True)
    except RuntimeError:  # no fused kernel for this device or dtype
        return torch.optim.Adam(tensors, lr=lr, weight_decay=weight_decay, foreach=True)


def is_scalar_state(key: str, value: torch.Tensor) -> bool:
    """Whether an Adam state entry is per tensor (the step count) rather than per element."""
    return key == "step" or value.dim() == 0


class LaneAdam:
    """``Adam(lr, weight_decay)`` over ``params`` that updates every element in the fused kernel's vector lanes
    (see the module docstring); ``step``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` as a torch
    optimiser's. The parameters whose size is not a multiple of :data:`LANE_MULTIPLE` become views of one padded
    buffer, allocated here."""

    def __init__(self, params: list[torch.Tensor], lr: float, weight_decay: float):
        self.params = list(params)
        self.lr, self.weight_decay = float(lr), float(weight_decay)
        #: where each parameter of the padded buffer starts in it, by parameter index
        self.offsets: dict[int, int] = {}
        end = 0
        for i, p in enumerate(self.params):
            if p.numel() % LANE_MULTIPLE:
                self.offsets[i] = end
                end += padded(p.numel())
        #: the parameters whose gradients :meth:`step` copies into the buffer's (``grad_views``, in this order)
        self.buffered = [self.params[i] for i in self.offsets]
        self.buffer: torch.Tensor | None = None
        self.grad_views: list[torch.Tensor] = []
        stepped = [p for i, p in enumerate(self.params) if i not in self.offsets]
        if self.offsets:
            self.buffer = torch.zeros(end, dtype=self.buffered[0].dtype, device=self.buffered[0].device)
            self.buffer.grad = torch.zeros_like(self.buffer)
            with torch.no_grad():
                for i in self.offsets:
                    view = self.view(self.buffer, i)
                    view.copy_(self.params[i])
                    self.params[i].data = view
            self.grad_views = [self.view(self.buffer.grad, i) for i in self.offsets]
            stepped.append(self.buffer)
        self.torch_optimizer = torch_adam(stepped, self.lr, self.weight_decay)

    def view(self, buffer: torch.Tensor, i: int) -> torch.Tensor:
        """Parameter ``i``'s part of a tensor laid out as the padded buffer, shaped as the parameter."""
        p = self.params[i]
        start = self.offsets[i]
        return buffer[start : start + p.numel()].view_as(p)

    def zero_grad(self) -> None:
        """Drop the parameters' gradients (as ``torch.optim.Optimizer.zero_grad(set_to_none=True)``)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every parameter from its ``grad`` (each parameter must have one)."""
        if self.buffered:
            torch._foreach_copy_(self.grad_views, [p.grad for p in self.buffered])
        self.torch_optimizer.step()

    def state_dict(self) -> dict:
        """torch's Adam's ``state_dict`` of the tensors it steps (for a training snapshot)."""
        return self.torch_optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` of a :class:`LaneAdam` over parameters of the same shapes."""
        self.torch_optimizer.load_state_dict(state)

    def param_state(self, i: int) -> dict[str, torch.Tensor]:
        """Adam's state of parameter ``i``: the step count, and per-element entries shaped as the parameter
        (views); empty before the first step."""
        if i not in self.offsets:
            return dict(self.torch_optimizer.state.get(self.params[i], {}))
        state = self.torch_optimizer.state.get(self.buffer, {})
        return {k: v if is_scalar_state(k, v) else self.view(v, i) for k, v in state.items()}

    def restricted(self, new_params: list[torch.Tensor], rows: torch.Tensor) -> LaneAdam:
        """A :class:`LaneAdam` over ``new_params`` (the members ``rows`` of this one's stacked parameters, dim 0),
        with their state: a stack's members that go on training keep their moments when others leave."""
        new = LaneAdam(new_params, self.lr, self.weight_decay)
        buffer_state: dict[str, torch.Tensor] = {}
        for i in range(len(self.params)):
            kept = {
                k: v.clone() if is_scalar_state(k, v) else v[rows].clone()
                for k, v in self.param_state(i).items()
            }
            if not kept:
                continue
            if i not in new.offsets:
                new.torch_optimizer.state[new.params[i]] = kept
                continue
            for k, v in kept.items():
                if is_scalar_state(k, v):
                    buffer_state[k] = v
                else:
                    buffer_state.setdefault(k, torch.zeros_like(new.buffer))
                    new.view(buffer_state[k], i).copy_(v)
        if buffer_state:
            new.torch_optimizer.state[new.buffer] = buffer_state
        return new


def adam(params: list[torch.Tensor], cfg: DictConfig) -> LaneAdam:
    """The training step's optimiser: :class:`LaneAdam` with ``trainer.lr`` and ``trainer.weight_decay``."""
    return LaneAdam(params, float(cfg.trainer.lr), float(cfg.trainer.weight_decay))
