"""A causal LM's forward whose training loss never forms the logits: the LM head and the
cross-entropy as tg.linear_cross_entropy, with transformers' loss semantics (labels shifted by
one inside, or ``shift_labels`` given; ignore_index -100; the mean over the counted tokens, or
the sum divided by ``num_items_in_batch`` when the Trainer passes it).

In training with labels the returned logits are None, as Liger-Kernel's fused forward returns
them; in evaluation, or without labels, the logits are formed as transformers forms them.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...linear_cross_entropy import linear_cross_entropy

IGNORE_INDEX = -100


def fused_loss_fits(hidden: torch.Tensor, head: torch.nn.Linear) -> bool:
    """tg.linear_cross_entropy's domain: float16/bfloat16, no bias, vocabulary and hidden size
    multiples of 8."""
    w = head.weight
    return (head.bias is None and hidden.dtype in (torch.float16, torch.bfloat16) and w.dtype == hidden.dtype
            and w.shape[0] % 8 == 0 and w.shape[1] % 8 == 0)


def causal_lm_loss(hidden: torch.Tensor, head: torch.nn.Linear, labels: Optional[torch.Tensor],
                   shift_labels: Optional[torch.Tensor] = None,
                   num_items_in_batch: Optional[torch.Tensor] = None) -> torch.Tensor:
    """transformers' ForCausalLMLoss(head(hidden), labels, ...) by tg.linear_cross_entropy."""
    if shift_labels is None:
        shift_labels = torch.nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
    target = shift_labels.reshape(-1).to(hidden.device)
    rows = hidden.reshape(-1, hidden.shape[-1])
    if num_items_in_batch is None:
        return linear_cross_entropy(rows, head.weight, target, IGNORE_INDEX, "mean")
    loss = linear_cross_entropy(rows, head.weight, target, IGNORE_INDEX, "sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def fused_causal_lm_forward(self, input_ids=None, attention_mask=None, position_ids=None,
                            past_key_values=None, inputs_embeds=None, labels=None, use_cache=None,
                            logits_to_keep=0, **kwargs):
    """transformers' *ForCausalLM.forward (Llama, Mistral, Qwen2, Qwen3: a base model, then
    lm_head) with the training loss by tg.linear_cross_entropy; bound to a model by
    apply_tilegrid_to_*."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    shift_labels = kwargs.pop("shift_labels", None)
    num_items_in_batch = kwargs.pop("num_items_in_batch", None)
    outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, inputs_embeds=inputs_embeds,
                         use_cache=use_cache, **kwargs)
    hidden = outputs.last_hidden_state
    wants_loss = labels is not None or shift_labels is not None
    if wants_loss and self.training and fused_loss_fits(hidden, self.lm_head):
        loss = causal_lm_loss(hidden, self.lm_head, labels, shift_labels, num_items_in_batch)
        logits = None
    else:
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden[:, keep, :])
        loss = None
        if wants_loss:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size,
                                      shift_labels=shift_labels, num_items_in_batch=num_items_in_batch,
                                      **kwargs)
    return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=outputs.past_key_values,
                                  hidden_states=outputs.hidden_states, attentions=outputs.attentions)
