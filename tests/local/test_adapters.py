"""grpo_helpers.local.adapters: a LoRA on the attention layers only trains only
those layers."""

from __future__ import annotations

import pytrio as trio
from local_engine import encode, new_client


def test_adapter_on_attention_only(svc, tok):
    tc = new_client(svc, rank=4, train_mlp=False, train_unembed=False)
    names = set(tc._host.parameters(tc._adapter))
    assert names and all("self_attn" in n for n in names)
    out = tc.forward_backward(
        [
            trio.Datum(
                model_input=encode(tok, "attn"),
                loss_fn_inputs={"target_tokens": tok.encode("attn")},
            )
        ]
    ).result()
    assert out.metrics["token_count"] == len(tok.encode("attn"))
