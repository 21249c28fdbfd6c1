"""The chapter-9 Llama served tensor-parallel over ``torch.distributed`` (Megatron-style).

Each of ``world`` ranks holds a slice of every layer and computes on it with the same kernels as
the whole model; two all-reduces per layer put the slices back together:

- attention: ``W_q, W_k, W_v`` are split by columns, whole heads to a rank (column-parallel), so a
  rank computes its own heads' rotary, KV cache and attention with no communication; ``W_o`` is
  split by rows (row-parallel): each rank's heads give a partial sum of the projection, and one
  ``all_reduce`` adds the partial sums before the residual add;
- MLP: ``W_gate, W_up`` column-parallel (the fused front, :func:`tritonforge.swiglu_mlp_front`,
  runs on the rank's columns: SwiGLU is elementwise, so a column slice of its input is all it
  needs), ``W_down`` row-parallel, then one ``all_reduce``;
- RMSNorm reads the whole residual stream, which every rank holds after each all-reduce: the
  norms and the embedding are replicated; the LM head is split by vocabulary columns and its
  logits gathered once per call (``all_gather``), so that no rank reads the whole
  ``hidden x vocab`` matrix in a decode step.

The sharding rule (:func:`shard_plan`) for ``Hq`` query heads over ``Hkv`` key/value heads: the
world size must divide ``Hq``, the MLP width and the vocabulary; rank ``r`` holds query heads
``[r Hq/world, (r+1) Hq/world)``. Key/value heads follow the query heads that read them
(query head ``h`` reads KV head ``h // (Hq/Hkv)``): when ``world`` divides ``Hkv`` each rank
holds ``Hkv/world`` of them, its own; when ``Hkv`` divides ``world`` each rank holds the one KV
head its query heads share, the same head on ``world/Hkv`` ranks (replicated: its projection and
cache are computed on each). Any other world size would give a rank KV heads that its query heads
read unevenly, which grouped-query attention cannot express: a ValueError.

Shards are cut from a full :class:`~tritonforge.models.llama.Llama` (:class:`TensorParallelLlama`),
so that a test compares the served model with the one-rank model of the same weights. The model
*is* a Llama whose ``config`` gives this rank's sizes: :meth:`~Llama.forward` (prefill),
:meth:`~Llama.decode_step` (split-KV decode over a fixed-shape cache),
:func:`~tritonforge.models.llama.generate` and :class:`~tritonforge.models.llama.GraphedDecoder`
run on it unchanged, with a per-rank :class:`~tritonforge.models.llama.KVCache` of the rank's KV
heads; every rank calls them in the same order with the same token ids (the collectives pair up
call by call).

The communication is PyTorch's own: ``torch.distributed.all_reduce`` and ``all_gather`` over the
process group given (the default group when None). The backend follows the tensors: gloo for CPU
tensors (the tests: kernels through the interpreter), NCCL for tensors on each rank's GPU. NCCL
collectives can be captured in a CUDA graph, so ``GraphedDecoder(tp_model, cache)`` replays a decode
step with its ``2 x num_layers + 1`` collectives inside.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.distributed as dist

from tritonforge.models.llama import Llama, LlamaConfig, rotary_tables


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """What each of ``world`` ranks holds: ``heads`` query heads, ``kv_heads`` key/value heads
    (each held by ``kv_copies`` ranks: 1 when divided, more when replicated), ``intermediate``
    MLP columns and ``vocab`` LM-head columns."""

    world: int
    heads: int
    kv_heads: int
    kv_copies: int
    intermediate: int
    vocab: int

    def query_heads(self, rank: int) -> range:
        return range(rank * self.heads, (rank + 1) * self.heads)

    def key_value_heads(self, rank: int) -> range:
        """The KV heads rank ``rank``'s query heads read (those it holds)."""
        first = rank // self.kv_copies * self.kv_heads
        return range(first, first + self.kv_heads)


def shard_plan(config: LlamaConfig, world: int) -> ShardPlan:
    """The sharding rule of the module docstring for ``world`` ranks; a ValueError naming the
    size that ``world`` does not fit."""
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be a positive int, got {world!r}")
    for name in ("num_heads", "intermediate_size", "vocab_size"):
        if getattr(config, name) % world:
            raise ValueError(f"the world size {world} must divide config.{name} = {getattr(config, name)}")
    kv = config.num_kv_heads
    if kv % world == 0:
        kv_heads, kv_copies = kv // world, 1  # divided: each rank its own
    elif world % kv == 0:
        kv_heads, kv_copies = 1, world // kv  # replicated: one head on world / kv ranks
    else:
        raise ValueError(f"config.num_kv_heads = {kv} and the world size {world} must divide one another (fewer ranks: each "
                         f"holds num_kv_heads / world; more ranks: each KV head on world / num_kv_heads)")  # fmt: skip
    return ShardPlan(world, config.num_heads // world, kv_heads, kv_copies, config.intermediate_size // world, config.vocab_size // world)


def shard_config(config: LlamaConfig, plan: ShardPlan) -> LlamaConfig:
    """The rank's sizes as :class:`~tritonforge.models.llama.KVCache` and
    :func:`~tritonforge.models.llama.rotary_tables` read them: the rank's heads and KV heads, the
    same ``head_dim`` (so ``hidden_size`` is the rank's query width, ``heads x head_dim``; the
    residual stream keeps the full width), the rank's MLP columns."""
    return dataclasses.replace(config, hidden_size=plan.heads * config.head_dim, num_heads=plan.heads,
                               num_kv_heads=plan.kv_heads, intermediate_size=plan.intermediate)  # fmt: skip


class TensorParallelLlama(Llama):
    """This rank's shard of ``model``'s weights (copies, on ``device``: the model's when None),
    run as a Llama over the process group ``group`` (None: the default group; it must be
    initialised). ``config`` gives the rank's sizes (:func:`shard_config`), ``full_config`` the
    model's, ``plan`` the rule that cut the shard."""

    def __init__(self, model: Llama, group: Optional[dist.ProcessGroup] = None, device=None):
        torch.nn.Module.__init__(self)  # not Llama.__init__: the weights come from ``model``
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("a TensorParallelLlama needs torch.distributed initialised (init_process_group) before it is built")
        self.group = group
        self.rank, world = dist.get_rank(group), dist.get_world_size(group)
        self.full_config = full = model.config
        self.plan = plan = shard_plan(full, world)
        self.config = shard_config(full, plan)
        D = full.head_dim
        q = _columns(plan.query_heads(self.rank), D)
        kv = _columns(plan.key_value_heads(self.rank), D)
        f = slice(self.rank * plan.intermediate, (self.rank + 1) * plan.intermediate)
        vocab = slice(self.rank * plan.vocab, (self.rank + 1) * plan.vocab)

        def own(w):  # a copy of the slice in its own contiguous storage: the full model can be freed
            return torch.nn.Parameter(w.detach().to(device=device, copy=True, memory_format=torch.contiguous_format), requires_grad=False)

        self.embed, self.norm, self.lm_head = own(model.embed), own(model.norm), own(model.lm_head[:, vocab])
        self.layers = torch.nn.ModuleList()
        for full_layer in model.layers:
            layer = torch.nn.Module()
            layer.attn_norm, layer.mlp_norm = own(full_layer.attn_norm), own(full_layer.mlp_norm)
            layer.wq, layer.wo = own(full_layer.wq[:, q]), own(full_layer.wo[q, :])
            layer.wk, layer.wv = own(full_layer.wk[:, kv]), own(full_layer.wv[:, kv])
            layer.w_gate, layer.w_up, layer.w_down = own(full_layer.w_gate[:, f]), own(full_layer.w_up[:, f]), own(full_layer.w_down[f, :])
            self.layers.append(layer)

    def _decoder(self, ids, positions, attend, backend):
        """:meth:`Llama._decoder` on the rank's heads and columns, with the two all-reduces."""
        cfg = self.config
        B, n = ids.shape
        cos, sin = rotary_tables(cfg, positions, self.embed.dtype)
        x = self.embed[ids]  # [B, n, H], the whole residual stream on every rank
        for index, layer in enumerate(self.layers):
            h = self._norm(x, layer.attn_norm, backend)
            q = (h @ layer.wq).view(B, n, cfg.num_heads, cfg.head_dim).transpose(1, 2)  # this rank's heads
            k = (h @ layer.wk).view(B, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
            v = (h @ layer.wv).view(B, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
            q, k = self._rotary(q, k, cos, sin, backend)
            a = attend(index, q, k, v)
            x = x + self._all_reduce(a.transpose(1, 2).reshape(B, n, -1) @ layer.wo)  # partial sums over heads
            m = self._norm(x, layer.mlp_norm, backend)
            x = x + self._all_reduce(self._mlp_front(m, layer.w_gate, layer.w_up, backend) @ layer.w_down)  # over columns
        return self._all_gather(self._norm(x, self.norm, backend) @ self.lm_head)

    def _all_reduce(self, partial: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(partial, group=self.group)  # in place: the sum over ranks
        return partial

    def _all_gather(self, logits: torch.Tensor) -> torch.Tensor:
        """``[B, n, vocab / world]`` from each rank -> ``[B, n, vocab]``, the ranks' columns in order."""
        pieces = [torch.empty_like(logits) for _ in range(self.plan.world)]
        dist.all_gather(pieces, logits.contiguous(), group=self.group)
        return torch.cat(pieces, dim=-1)


def _columns(heads: range, head_dim: int) -> slice:
    """The projection columns of consecutive ``heads`` (heads are ``head_dim`` columns each)."""
    return slice(heads.start * head_dim, heads.stop * head_dim)
