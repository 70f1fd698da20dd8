"""A paged KV cache for transformers' generate(), whose attention is tg.flash_attn_with_kvcache.

    tgt.register()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="tilegrid")
    out = model.generate(ids, attention_mask=mask, past_key_values=PagedKVCache(model, page_size=16))

Each layer keeps its keys and values in a page pool [num_pages, page_size, kv_heads, head_dim],
a block table [batch, max_pages] (int32) and each row's number of stored keys (cache_seqlens).
Pages are taken from the pool as rows grow; the pool itself grows (doubling) when it runs out.
Page 0 is a scratch page: table entries past a row's own pages point there (see below).

Call order. A transformers attention module calls ``past_key_values.update(k, v, layer_idx)``
and passes what it returns to the attention function; the padding mask reaches only the
attention function. So update() writes nothing: it counts the new positions (transformers'
sequence length, padding included) and returns the new k and v tagged with their layer.
tilegrid's attention function (attention.py) sees the tag and hands the call to
PagedLayer.attend, where the new keys are appended in place by tg.flash_attn_with_kvcache
(block_table, cache_seqlens, causal) and attended in the same call, prefill (q_len > 1) and
decode (q_len = 1) alike. A model whose attention is not tilegrid's never attends the tagged
keys; the layer's next update() then raises instead of decoding over a cache that holds nothing.

Padding. Only valid tokens (attention mask 1) are stored, so padded positions are never
attended and need no cache_leftpad (which FlashAttention does not take with a block table). A
row's valid new tokens are moved to the front of the step (a stable sort of the mask); the
call appends all q_len tokens, each row at its own cache_seqlens, and a valid query i sees keys
up to cache_seqlens + i: the row's cache and its valid new tokens up to itself. The trailing
filler tokens land past the row's length (in its last page, or in the scratch page) and are
overwritten by the next append; their outputs are discarded (zeros, as transformers' flash
attention leaves padded queries). RoPE positions come from transformers (position_ids from the
mask), so they agree with the compacted cache.

Not supported (NotImplementedError): beam search (reorder_cache), batch_repeat_interleave and
batch_select_indices (rows would share pages: copy-on-write is not written), offloading, and
cropping past a row's generated tokens into its prompt's padding. crop() of generated tokens
(assisted decoding) and reset() are supported.
"""

from __future__ import annotations

from typing import Optional

import torch
from ...flash_attn_kvcache import flash_attn_with_kvcache
from ...paged_kv import gather_paged_kv

try:
    from transformers.cache_utils import Cache, CacheLayerMixin
except ImportError as e:  # pragma: no cover - the package's extra
    raise ImportError("tilegrid.integrations.transformers needs Hugging Face transformers "
                      "(pip install 'tilegrid[transformers]')") from e

_TAG = "_tilegrid_paged_layer"
_SCRATCH = 0


def paged_layer_of(key: torch.Tensor) -> Optional["PagedLayer"]:
    """The PagedLayer whose update() returned `key`, or None for keys of any other cache."""
    return getattr(key, _TAG, None)


def _unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(f"PagedKVCache: {what} is not supported (rows would have to share or copy "
                               "pages); use num_beams=1, or transformers' DynamicCache")


class PagedLayer(CacheLayerMixin):
    """One layer's page pools, block table and row lengths (see the module's text)."""

    is_compileable = False
    is_croppable = True
    is_sliding = False
    supports_early_init = False

    def __init__(self, layer_idx: int, page_size: int, initial_pages: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.page_size = page_size
        self.initial_pages = initial_pages
        self.seen = 0  # positions fed so far, padding included: transformers' sequence length
        self.awaits_attention = False

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, kv_heads, _, head_dim = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        shape = (1 + self.initial_pages, self.page_size, kv_heads, head_dim)
        self.k_pool = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v_pool = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.next_page = _SCRATCH + 1
        # Host copies of the table and lengths: allocation decisions need no device sync.
        self.table_host = torch.zeros(batch, 0, dtype=torch.int32, device="cpu")
        self.pages_of_row = torch.zeros(batch, dtype=torch.int64, device="cpu")
        self.lengths = torch.zeros(batch, dtype=torch.int64, device="cpu")
        self.block_table = self.table_host.to(self.device)
        self._upload_lengths()
        self.is_initialized = True

    def _upload_lengths(self) -> None:
        """The device copy of the host's row lengths, which the attention call reads."""
        self.cache_seqlens = self.lengths.to(self.device, torch.int32)

    @property
    def pages_in_use(self) -> int:
        """Pages handed to rows (the scratch page not counted)."""
        return self.next_page - 1 if self.is_initialized else 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.awaits_attention:
            raise RuntimeError(
                f"PagedKVCache layer {self.layer_idx}: the previous step's keys never reached tilegrid's attention, "
                "so the cache holds none of them; the model must run attn_implementation='tilegrid' "
                "(tilegrid.integrations.transformers.register())")
        if key_states.shape[0] != self.lengths.shape[0]:
            raise ValueError(f"PagedKVCache layer {self.layer_idx}: batch {key_states.shape[0]} differs from the "
                             f"cache's {self.lengths.shape[0]}")
        self.seen += key_states.shape[-2]
        self.awaits_attention = True
        keys, values = key_states.view_as(key_states), value_states.view_as(value_states)
        setattr(keys, _TAG, self)
        return keys, values

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: Optional[torch.Tensor], scaling: Optional[float], window: tuple[int, int],
               softcap: float) -> torch.Tensor:
        """Appends this step's valid keys and values and returns the attention output
        [batch, q_len, heads, head_dim] (zeros at padded queries). Inputs in transformers'
        layout [batch, heads, q_len, head_dim]; attention_mask the [batch, kv_len] padding mask
        or None."""
        self.awaits_attention = False
        q_len = query.shape[2]
        q, k, v = (t.transpose(1, 2).to(self.dtype) for t in (query, key, value))
        valid = None if attention_mask is None else attention_mask[:, -q_len:].bool()
        if valid is not None and bool(valid.all()):
            valid = None
        if valid is None:
            new = torch.full_like(self.lengths, q_len)
        else:
            order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
            q, k, v = (t.gather(1, order[:, :, None, None].expand_as(t)) for t in (q, k, v))
            new = valid.sum(dim=1).cpu()
        self._reserve(new, q_len)
        out = flash_attn_with_kvcache(q, self.k_pool, self.v_pool, k, v, cache_seqlens=self.cache_seqlens,
                                      block_table=self.block_table, softmax_scale=scaling, causal=True,
                                      window_size=window, softcap=softcap)
        self.lengths += new
        self._upload_lengths()
        if valid is None:
            return out
        back = torch.empty_like(out).scatter_(1, order[:, :, None, None].expand_as(out), out)
        return back.masked_fill(~valid[:, :, None, None], 0)

    def _reserve(self, new: torch.Tensor, q_len: int) -> None:
        """Pages for each row's stored keys plus its `new` valid ones, and table columns for
        cache_seqlens + q_len (flash_attn_with_kvcache appends q_len a row; columns past a
        row's pages name the scratch page)."""
        page = self.page_size
        need = (self.lengths + new + page - 1) // page
        extra = (need - self.pages_of_row).clamp(min=0)
        width = max(int(((self.lengths + q_len + page - 1) // page).max()), int(need.max()))
        changed = width > self.table_host.shape[1] or bool(extra.any())
        if width > self.table_host.shape[1]:
            pad = self.table_host.new_full((self.table_host.shape[0], width - self.table_host.shape[1]), _SCRATCH)
            self.table_host = torch.cat([self.table_host, pad], dim=1)
        self._grow_pool(self.next_page + int(extra.sum()))
        for row in extra.nonzero().flatten().tolist():
            first, count = int(self.pages_of_row[row]), int(extra[row])
            self.table_host[row, first:first + count] = torch.arange(
                self.next_page, self.next_page + count, device="cpu")
            self.next_page += count
        self.pages_of_row += extra
        if changed:
            self.block_table = self.table_host.to(self.device)

    def _grow_pool(self, pages: int) -> None:
        """At least `pages` pages in each pool, doubling so that growth costs O(1) a token."""
        have = self.k_pool.shape[0]
        if pages <= have:
            return
        more = max(pages, 2 * have) - have
        fresh = self.k_pool.new_zeros(more, *self.k_pool.shape[1:])
        self.k_pool = torch.cat([self.k_pool, fresh])
        self.v_pool = torch.cat([self.v_pool, torch.zeros_like(fresh)])

    def gather(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(keys, values, cu_seqlens): every row's stored keys and values [total, kv_heads,
        head_dim], packed in row order through the block table, and the int32 row offsets."""
        cu = torch.nn.functional.pad(torch.cumsum(self.cache_seqlens, 0, dtype=torch.int32), (1, 0))
        keys, values = gather_paged_kv("PagedKVCache.gather", self.k_pool, self.v_pool, self.block_table, cu)
        return keys, values, cu

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seen + query_length, 0

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        """Forgets the last `tokens_to_remove` positions (negative, or the legacy absolute
        length when positive, as DynamicLayer.crop takes it); their pages stay with the rows."""
        remove = -tokens_to_remove if tokens_to_remove <= 0 else max(self.seen - tokens_to_remove, 0)
        if remove == 0 or not self.is_initialized:
            return
        if remove > int(self.lengths.min()):
            raise NotImplementedError(
                f"PagedKVCache: cropping {remove} positions reaches into a row's prompt padding (stored keys "
                f"{self.lengths.tolist()}); only generated or unpadded tokens can be cropped")
        self.seen -= remove
        self.lengths -= remove
        self._upload_lengths()

    def reset(self) -> None:
        if not self.is_initialized:
            return
        self.seen, self.next_page, self.awaits_attention = 0, _SCRATCH + 1, False
        self.table_host.fill_(_SCRATCH)
        self.pages_of_row.zero_()
        self.lengths.zero_()
        self.block_table = self.table_host.to(self.device)
        self._upload_lengths()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise _unsupported("beam search (reorder_cache)")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise _unsupported("batch_repeat_interleave")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise _unsupported("batch_select_indices")

    def offload(self):
        raise NotImplementedError("PagedKVCache: offloading is not supported")

    def prefetch(self):
        raise NotImplementedError("PagedKVCache: offloading is not supported")


class PagedKVCache(Cache):
    """A transformers Cache of paged layers, one a decoder layer, for a model that runs
    tilegrid's attention (attn_implementation="tilegrid"); see the module's text.

    Args:
        config_or_model: The model, or its config (a text config is taken from a multimodal
            one): its number of layers, and its attention implementation when set.
        page_size: Tokens a page.
        initial_pages: Pages each layer's pool starts with (it grows when they run out).

    Raises:
        ValueError: page_size or initial_pages below 1, or a model whose attention
            implementation is set to one that is not tilegrid's.
    """

    def __init__(self, config_or_model, page_size: int = 16, initial_pages: int = 16):
        from .attention import tilegrid_attention_forward
        from transformers import AttentionInterface

        if page_size < 1 or initial_pages < 1:
            raise ValueError(f"PagedKVCache: page_size and initial_pages must be >= 1, got {page_size} and "
                             f"{initial_pages}")
        config = getattr(config_or_model, "config", config_or_model)
        if hasattr(config, "get_text_config"):
            config = config.get_text_config(decoder=True)
        impl = getattr(config, "_attn_implementation", None)
        if impl is not None and AttentionInterface._global_mapping.get(impl) is not tilegrid_attention_forward:
            raise ValueError(f"PagedKVCache: the model's attention implementation is {impl!r}; the paged cache "
                             "is attended only by tilegrid's (register(), then attn_implementation='tilegrid')")
        self.page_size = page_size
        super().__init__(layers=[PagedLayer(i, page_size, initial_pages) for i in range(config.num_hidden_layers)])

    @property
    def pages_in_use(self) -> int:
        """Pages handed to rows, summed over the layers."""
        return sum(layer.pages_in_use for layer in self.layers)

    def gather(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer `layer_idx`'s stored keys and values, packed (PagedLayer.gather)."""
        return self.layers[layer_idx].gather()
