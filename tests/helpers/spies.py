"""A spy on the engine: what the training loop *sent*, not what it computed.

``EngineSpy(service)`` wraps a ServiceClient; the training clients it makes record
every ``forward_backward`` (its Datums, ``loss_fn``, ``loss_fn_config`` and the
future of its output) and every ``optim_step`` (its ``AdamParams``), in the order
the loop submitted them, sync or async, then pass the call on unchanged. A test
asserts on those calls, so it fails when the loop computes the right numbers but
sends others. ``wrap_sampler`` wraps every sampler the training clients hand out
(``save_weights_and_get_sampling_client``): a test can change what the loop
*receives* from the sampler, as ``tests/core/test_training_safeguards.py`` does with
stop reasons.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    """One call a training client received."""

    name: str  # "forward_backward" or "optim_step"
    datums: list[Any] = field(default_factory=list)
    loss_fn: str | None = None
    loss_fn_config: dict[str, Any] | None = None
    future: Any = None  # APIFuture of the output
    adam_params: Any = None  # optim_step's AdamParams

    def output(self) -> Any:
        return self.future.result()


class _SpyTrainingClient:
    def __init__(
        self, inner: Any, calls: list[Call], wrap_sampler: Callable[[Any], Any]
    ) -> None:
        self._inner = inner
        self._calls = calls
        self._wrap_sampler = wrap_sampler

    def _record(self, data, loss_fn, loss_fn_config, future) -> Any:  # noqa: ANN001
        self._calls.append(
            Call("forward_backward", list(data), loss_fn, loss_fn_config, future)
        )
        return future

    def forward_backward(
        self, data, loss_fn="cross_entropy", loss_fn_config=None, **kwargs
    ):  # noqa: ANN001, ANN201
        future = self._inner.forward_backward(data, loss_fn, loss_fn_config, **kwargs)
        return self._record(data, loss_fn, loss_fn_config, future)

    async def forward_backward_async(
        self, data, loss_fn="cross_entropy", loss_fn_config=None, **kwargs
    ):  # noqa: ANN001, ANN201
        future = await self._inner.forward_backward_async(
            data, loss_fn, loss_fn_config, **kwargs
        )
        return self._record(data, loss_fn, loss_fn_config, future)

    def optim_step(self, adam_params):  # noqa: ANN001, ANN201
        future = self._inner.optim_step(adam_params)
        self._calls.append(Call("optim_step", future=future, adam_params=adam_params))
        return future

    async def optim_step_async(self, adam_params):  # noqa: ANN001, ANN201
        future = await self._inner.optim_step_async(adam_params)
        self._calls.append(Call("optim_step", future=future, adam_params=adam_params))
        return future

    def save_weights_and_get_sampling_client(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        sampler = self._inner.save_weights_and_get_sampling_client(*args, **kwargs)
        return self._wrap_sampler(sampler)

    async def save_weights_and_get_sampling_client_async(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        inner = self._inner
        sampler = await inner.save_weights_and_get_sampling_client_async(
            *args, **kwargs
        )
        return self._wrap_sampler(sampler)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class EngineSpy:
    """Wraps a ServiceClient; ``calls`` lists what its training clients received."""

    def __init__(
        self, inner: Any, wrap_sampler: Callable[[Any], Any] = lambda sampler: sampler
    ) -> None:
        self.inner = inner
        self.calls: list[Call] = []
        self.wrap_sampler = wrap_sampler

    def create_lora_training_client(self, *args: Any, **kwargs: Any) -> Any:
        client = self.inner.create_lora_training_client(*args, **kwargs)
        return _SpyTrainingClient(client, self.calls, self.wrap_sampler)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def updates(self) -> list[list[Call]]:
        """The calls grouped per update: ``[forward_backward, optim_step]`` pairs."""
        names = [c.name for c in self.calls]
        assert names == ["forward_backward", "optim_step"] * (len(names) // 2), names
        return [self.calls[i : i + 2] for i in range(0, len(self.calls), 2)]
