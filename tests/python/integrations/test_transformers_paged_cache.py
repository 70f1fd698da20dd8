"""tilegrid.integrations.transformers.PagedKVCache: generate() through tg.flash_attn_with_kvcache
on page pools, against transformers' eager attention and its DynamicCache, for batches of
left-padded prompts of different lengths.

float32 on the CPU is compared tightly (1e-5: the same products, another summation order);
bfloat16 (CPU, and CUDA where there is a GPU) by test_transformers.assert_within_noise: within
twice the unpatched bfloat16 model's error of the float32 model plus 2 bfloat16 ulps.
"""

import copy

import pytest
import torch

from conftest import DEVICES

transformers = pytest.importorskip("transformers")
import tilegrid.integrations.transformers as tgt  # noqa: E402
from test_transformers import MODEL_TYPES, VOCAB, assert_within_noise, tiny_model  # noqa: E402
from transformers import AutoConfig, DynamicCache, LogitsProcessor, LogitsProcessorList  # noqa: E402

PAGE = 4
PROMPT = 12
PADDING = (0, 4, 9)  # prompts of 12, 8 and 3 tokens


def left_padded_prompts(device):
    ids = torch.randint(1, VOCAB, (len(PADDING), PROMPT), device=device)
    mask = torch.ones_like(ids)
    for row, pad in enumerate(PADDING):
        mask[row, :pad] = 0
        ids[row, :pad] = 0
    return ids, mask


def tilegrid_copy(model):
    tgt.register()
    copied = copy.deepcopy(model)
    copied.set_attn_implementation("tilegrid")
    return copied


class RecordPages(LogitsProcessor):
    """Records the cache's pages in use at every step (called after each forward)."""

    def __init__(self, cache):
        self.cache, self.pages = cache, []

    def __call__(self, input_ids, scores):
        self.pages.append(self.cache.pages_in_use)
        return scores


def forward_steps(model, cache, ids, mask, tokens):
    """The last position's logits after the prompt and after each of `tokens` [batch, n] fed
    one at a time through `cache`, positions from the mask as generate() makes them."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
    logits = [out.logits[:, -1]]
    for t in range(tokens.shape[1]):
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
        out = model(tokens[:, t:t + 1], attention_mask=mask, position_ids=positions, past_key_values=cache,
                    use_cache=True)
        logits.append(out.logits[:, -1])
    return torch.stack(logits, dim=1), mask


def pages_for(lengths, layers):
    return layers * sum((n + PAGE - 1) // PAGE for n in lengths)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_greedy_tokens_match_eager_attention_and_the_pool_grows(model_type):
    reference = tiny_model(model_type, "cpu").eval()
    model = tilegrid_copy(reference)
    ids, mask = left_padded_prompts("cpu")
    new_tokens = 20
    kw = dict(attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    want = reference.generate(ids, **kw)
    cache = tgt.PagedKVCache(model, page_size=PAGE, initial_pages=2)
    record = RecordPages(cache)
    got = model.generate(ids, past_key_values=cache, logits_processor=LogitsProcessorList([record]), **kw)
    assert torch.equal(got, want)
    layers = model.config.num_hidden_layers
    prompt_lengths = [PROMPT - pad for pad in PADDING]
    assert record.pages[0] == pages_for(prompt_lengths, layers)  # after the prefill
    # The last token is sampled, never fed: each row stores new_tokens - 1 generated keys.
    stored = [n + new_tokens - 1 for n in prompt_lengths]
    assert cache.pages_in_use == pages_for(stored, layers) > record.pages[0]
    assert cache.layers[0].k_pool.shape[0] > 1 + 2  # the pool grew past its initial pages
    assert cache.get_seq_length() == PROMPT + new_tokens - 1


@pytest.mark.parametrize("device", DEVICES)
def test_stored_keys_and_values_are_the_dynamic_caches_valid_ones(device):
    """The same forward steps through a DynamicCache and a PagedKVCache: each row's keys and
    values gathered through the block table equal the DynamicCache's at the row's unpadded
    positions, and the logits agree."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    model = tilegrid_copy(tiny_model("llama", device, dtype)).eval()
    ids, mask = left_padded_prompts(device)
    tokens = torch.randint(1, VOCAB, (len(PADDING), 9), device=device)
    paged, dynamic = tgt.PagedKVCache(model, page_size=PAGE), DynamicCache(config=model.config)
    with torch.no_grad():
        want_logits, full_mask = forward_steps(model, dynamic, ids, mask, tokens)
        got_logits, _ = forward_steps(model, paged, ids, mask, tokens)
    torch.testing.assert_close(got_logits, want_logits, **tol)
    for layer_idx in range(model.config.num_hidden_layers):
        keys, values, cu = paged.gather(layer_idx)
        want_k, want_v = dynamic.layers[layer_idx].keys, dynamic.layers[layer_idx].values
        for row in range(len(PADDING)):
            valid = full_mask[row].bool()
            rows = slice(int(cu[row]), int(cu[row + 1]))
            torch.testing.assert_close(keys[rows].transpose(0, 1), want_k[row][:, valid], **tol)
            torch.testing.assert_close(values[rows].transpose(0, 1), want_v[row][:, valid], **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_generated_logits_within_bfloat16_noise(device):
    """bfloat16 generation through the paged cache; each step's logits against the float32
    eager model's on the same tokens (teacher-forced), within bfloat16 noise."""
    exact = tiny_model("llama", device).eval()
    unpatched = copy.deepcopy(exact).to(torch.bfloat16)
    model = tilegrid_copy(unpatched)
    ids, mask = left_padded_prompts(device)
    new_tokens = 12
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                             past_key_values=tgt.PagedKVCache(model, page_size=PAGE), output_logits=True,
                             return_dict_in_generate=True)
        got = torch.stack(out.logits, dim=1)
        full_mask = torch.cat([mask, torch.ones_like(out.sequences[:, PROMPT:])], dim=1)
        positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
        steps = slice(PROMPT - 1, PROMPT - 1 + new_tokens)
        forced = dict(attention_mask=full_mask, position_ids=positions)
        want = exact(out.sequences, **forced).logits[:, steps]
        bf16 = unpatched(out.sequences, **forced).logits[:, steps]
    assert_within_noise(got, bf16, want, "generated logits")


def test_sliding_window_reaches_the_kernel():
    """Mistral with a 5-token window, shorter than the prompts: eager's greedy tokens."""
    reference = tiny_model("mistral", "cpu", sliding_window=5).eval()
    model = tilegrid_copy(reference)
    ids, mask = left_padded_prompts("cpu")
    kw = dict(attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0)
    want = reference.generate(ids, **kw)
    assert torch.equal(model.generate(ids, past_key_values=tgt.PagedKVCache(model, page_size=PAGE), **kw), want)


def test_steps_of_several_tokens_and_crop_agree_with_one_token_steps():
    """Cropping the last generated positions and feeding them again in one step (assisted
    decoding's pattern) gives the logits of feeding them one at a time."""
    model = tilegrid_copy(tiny_model("qwen2", "cpu")).eval()
    ids, mask = left_padded_prompts("cpu")
    tokens = torch.randint(1, VOCAB, (len(PADDING), 6), device="cpu")
    cache = tgt.PagedKVCache(model, page_size=PAGE)
    with torch.no_grad():
        one_by_one, full_mask = forward_steps(model, cache, ids, mask, tokens)
        cache.crop(-3)
        assert cache.get_seq_length() == PROMPT + 3
        positions = (full_mask.cumsum(-1) - 1)[:, -3:]
        again = model(tokens[:, 3:], attention_mask=full_mask, position_ids=positions, past_key_values=cache,
                      use_cache=True).logits
    torch.testing.assert_close(again, one_by_one[:, 4:], rtol=1e-5, atol=1e-5)


def test_chunked_prefill_with_padding_in_a_chunk_matches_eager():
    """Prefill in chunks of 4: some chunks hold a row's padding and valid tokens, after keys
    of that row were already stored (or none were)."""
    reference = tiny_model("llama", "cpu").eval()
    model = tilegrid_copy(reference)
    ids, mask = left_padded_prompts("cpu")
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    want = reference.generate(ids, **kw)
    got = model.generate(ids, past_key_values=tgt.PagedKVCache(model, page_size=PAGE), prefill_chunk_size=4, **kw)
    assert torch.equal(got, want)


def test_unsupported_requests_get_clear_errors():
    reference = tiny_model("llama", "cpu").eval()
    model = tilegrid_copy(reference)
    ids, mask = left_padded_prompts("cpu")
    kw = dict(attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    with pytest.raises(ValueError, match="attended only by tilegrid's"):
        tgt.PagedKVCache(reference)
    with pytest.raises(ValueError, match="page_size"):
        tgt.PagedKVCache(model, page_size=0)
    with pytest.raises(NotImplementedError, match="beam search"):
        model.generate(ids, past_key_values=tgt.PagedKVCache(model), num_beams=2, **kw)
    cache = tgt.PagedKVCache(model)
    model.generate(ids, past_key_values=cache, **kw)
    with pytest.raises(NotImplementedError, match="prompt padding"):
        cache.crop(-(PROMPT - max(PADDING) + 4))
    # A fresh config names no attention implementation: a model that is not tilegrid's is
    # caught at its first decoding step, the cache having stored nothing.
    config = AutoConfig.for_model("llama", num_hidden_layers=reference.config.num_hidden_layers)
    with pytest.raises(RuntimeError, match="never reached tilegrid's attention"):
        reference.generate(ids, past_key_values=tgt.PagedKVCache(config), **kw)
