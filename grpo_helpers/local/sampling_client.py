"""The local engine's ``SamplingClient``: completions and logprobs from frozen weights.

A :class:`LocalSamplingClient` samples from a *frozen snapshot* of an adapter (or
from the base model). ``optim_step`` calls made after the snapshot do not change
it: that is what lets the async loop sample step k+1 while step k trains.

=========================================== ==========================================
``sc.sample(...)``                          returns ``APIFuture[SampleResponse]``
``await sc.sample_async(...)``              returns the ``SampleResponse`` (one await)
``sc.compute_logprobs(prompt)``             ``APIFuture`` of the prompt's logprobs
=========================================== ==========================================

Requests are validated as PyTRIO validates them (empty prompts, ``max_tokens`` > 0,
vocabulary bounds, temperature and top-p) at the call, then queued on the model
host's batching scheduler (:class:`~grpo_helpers.local.host.SamplingScheduler`):
concurrent calls on the same weights are decoded together
(:mod:`grpo_helpers.local.sampling`).

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import math
import uuid
from concurrent.futures import Future
from typing import Any

from pytrio.errors.base import ValidationError
from pytrio.types import APIFuture, ModelInput, SampleResponse, SamplingParams

from grpo_helpers.local.adapters import AdapterSnapshot
from grpo_helpers.local.decoder import SAMPLER_PRECISIONS
from grpo_helpers.local.host import ModelHost
from grpo_helpers.local.sampling import LOGPROBS_OF, GenerationRequest

__all__ = ["LocalSamplingClient"]

_DEFAULT_SAMPLING_PARAMS = SamplingParams()


class LocalSamplingClient:
    """Samples completions, with their logprobs, from frozen weights.

    Attributes:
        sampling_run_cuid: ``local-sampling-<hex>``.
        model_id: the base model name.
        model_path: the checkpoint URI it was opened from (None: base model or an
            in-memory snapshot).
    """

    def __init__(
        self,
        host: ModelHost,
        snapshot: AdapterSnapshot | None,
        model_path: str | None,
        merged: bool = True,
        shared_prefix: bool = True,
        logprobs_of: str = "model",
        precision: str = "float32",
    ) -> None:
        if logprobs_of not in LOGPROBS_OF:
            raise ValueError(
                f"logprobs_of must be one of {', '.join(LOGPROBS_OF)}, got "
                f"{logprobs_of!r}"
            )
        if precision not in SAMPLER_PRECISIONS:
            raise ValueError(
                f"precision must be one of {', '.join(SAMPLER_PRECISIONS)}, got "
                f"{precision!r}"
            )
        self._host = host
        self.logprobs_of = logprobs_of
        self.precision = precision
        self._snapshot = snapshot
        self._merged = merged
        self._shared_prefix = shared_prefix
        self.sampling_run_cuid = f"local-sampling-{uuid.uuid4().hex[:12]}"
        self.model_id = host.base_model
        self.model_path = model_path

    @property
    def is_base(self) -> bool:
        """True for the base model itself: no adapter, no saved weights."""
        return self._snapshot is None and self.model_path is None

    def __repr__(self) -> str:
        what = self.model_path or (self._snapshot.name if self._snapshot else "base")
        return f"LocalSamplingClient(model={self.model_id!r}, weights={what!r})"

    def _request(
        self,
        prompt: ModelInput,
        num_samples: int,
        sampling_params: SamplingParams,
        include_prompt_logprobs: bool,
        topk_prompt_logprobs: int,
        return_text: bool,
    ) -> GenerationRequest:
        """Validate as PyTRIO does, then build the queued request."""
        from pydantic import ValidationError as PydanticValidationError
        from pytrio.client.builders.sampling import build_sample_request

        if prompt.is_empty:
            raise ValidationError(
                "prompt cannot be empty", code="validation.empty_prompt"
            )
        if prompt.has_images:
            raise ValidationError(
                "The local engine samples from text prompts only.",
                code="validation.image_input_unsupported",
            )
        if sampling_params.max_tokens is None or sampling_params.max_tokens <= 0:
            raise ValidationError(
                "sampling_params.max_tokens must be greater than 0",
                code="validation.invalid_sampling_request",
            )
        try:
            build_sample_request(
                prompt,
                sampling_params=sampling_params,
                num_samples=num_samples,
                include_prompt_logprobs=include_prompt_logprobs,
                topk_prompt_logprobs=topk_prompt_logprobs,
                return_text=return_text,
                return_token_logprobs=True,
            )
        except PydanticValidationError as e:
            raise ValidationError(
                "invalid sampling request",
                code="validation.invalid_sampling_request",
                details={"errors": e.errors()},
            ) from None
        tokens = prompt.to_ints()
        bad = [t for t in tokens if not 0 <= t < self._host.vocab_size]
        if bad:
            raise ValidationError(
                "prompt token ID is outside the tokenizer vocabulary",
                code="validation.token_id_out_of_range",
                details={"token_id": bad[0], "vocab_size": self._host.vocab_size},
            )
        t, p = sampling_params.temperature, sampling_params.top_p
        if not (math.isfinite(t) and t >= 0) or not (0 < p <= 1):
            raise ValidationError(
                "temperature must be >= 0 and top_p in (0, 1]",
                code="validation.invalid_sampling_request",
                details={"temperature": t, "top_p": p},
            )
        return GenerationRequest(
            prompt=tokens,
            num_samples=num_samples,
            params=sampling_params,
            include_prompt_logprobs=include_prompt_logprobs,
            topk_prompt_logprobs=topk_prompt_logprobs,
            return_text=return_text,
            weights_key=self._snapshot,
            merged=self._merged,
            share_prefix=self._shared_prefix,
            logprobs_of=self.logprobs_of,
            precision=self.precision,
            future=Future(),
        )

    def sample(
        self,
        prompt: ModelInput,
        num_samples: int = 1,
        sampling_params: SamplingParams = _DEFAULT_SAMPLING_PARAMS,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        return_text: bool = True,
    ) -> APIFuture[SampleResponse]:
        """Sample ``num_samples`` completions of ``prompt`` (a GRPO group).

        The prompt is encoded once and its KV cache shared by the group; concurrent
        calls on the same weights are decoded together in one batch.

        Args:
            prompt: ``ModelInput.from_ints(prompt_tokens)``.
            num_samples: the group size G.
            sampling_params: ``max_tokens`` (required), ``temperature`` (0 = greedy),
                ``top_k``, ``top_p``, ``stop`` (strings or token ids), ``seed``.
                Temperature, top-k and top-p change the distribution tokens are
                *drawn* from. The reported logprobs are the model's own
                (temperature 1, unfiltered: what ``forward_backward`` recomputes
                at temperature 1), unless the client was made to report the
                behaviour policy's (``logprobs_of="behaviour"``: under the
                distribution each token was drawn from).
            include_prompt_logprobs: also fill ``prompt_logprobs`` ([P], None first).
            topk_prompt_logprobs: also fill the top-k alternatives per prompt token.
            return_text: decode each completion (stop strings cut off).

        Returns:
            ``APIFuture[SampleResponse]``: G ``SampleSequence(tokens, logprobs, text,
            stop_reason)``, ``input_tokens`` (prompt length) and ``output_tokens``.

        Raises:
            ValidationError: empty prompt, ``max_tokens`` missing or <= 0,
                ``num_samples`` < 1, token ids outside the vocabulary.
        """
        request = self._request(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            return_text,
        )
        self._host.scheduler.submit(request)
        return APIFuture(request.future)

    async def sample_async(
        self,
        prompt: ModelInput,
        num_samples: int = 1,
        sampling_params: SamplingParams = _DEFAULT_SAMPLING_PARAMS,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        return_text: bool = True,
    ) -> SampleResponse:
        """:meth:`sample`, awaited once: ``response = await sc.sample_async(...)``.

        Gather one call per prompt (``asyncio.gather``) and the engine batches them.
        """
        return await self.sample(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            return_text,
        )

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        """``log p(prompt[t] | prompt[:t])`` for every prompt token; None at t = 0."""
        request = self._request(prompt, 1, SamplingParams(max_tokens=1), True, 0, False)
        request.prompt_only = True  # score the prompt, sample nothing
        self._host.scheduler.submit(request)
        return APIFuture(request.future).map(lambda r: r.prompt_logprobs)

    async def compute_logprobs_async(self, prompt: ModelInput) -> list[float | None]:
        """:meth:`compute_logprobs`, awaited once."""
        return await self.compute_logprobs(prompt)

    def get_tokenizer(self) -> Any:
        """The base model's tokenizer."""
        return self._host.tokenizer
