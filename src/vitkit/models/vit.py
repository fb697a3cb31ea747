"""The Vision Transformer of §3.1, Eq. 1-4, and nothing else.

    z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos            (1)  PatchEmbed, cls_token, pos_embed
    z'_l = MSA(LN(z_{l-1})) + z_{l-1}                          (2)  Block: norm1, attn
    z_l = MLP(LN(z'_l)) + z'_l                                 (3)  Block: norm2, mlp
    y = LN(z_L^0)                                              (4)  norm, then the class token (or the mean: 'gap')

Later ViTs add small parts, each its own module and each off in the paper's models: register tokens beside the
class token, LayerScale on both residual branches (`ls1`, `ls2`), a LayerNorm on z_0 (`norm_pre`, CLIP), the
gated MLP (SwiGLU), and attention pooling in place of the class token (`attn_pool`, SigLIP).

Module names follow timm, so its state dicts map one-to-one; each official key has exactly one home here
(q, k and v live side by side in the fused `qkv` projection).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from vitkit.models.attention_pool import AttentionPool
from vitkit.models.config import ViTConfig, to_pair
from vitkit.models.init import lecun_normal_, normal_, xavier_uniform_fused_, zero_
from vitkit.models.layer_scale import layer_scale
from vitkit.models.mlp import build_mlp
from vitkit.models.posemb import build_position_embedding
from vitkit.models.resnet import ResNetV1
from vitkit.models.self_attention import Attention
from vitkit.storage import SavePretrainedMixin

Grid = tuple[int, int]


class PatchEmbed(nn.Module):
    """Linear projection E of flattened P x P patches (Eq. 1), one matrix product over all patches.

    E is kept as the official checkpoints, timm and transformers keep it, a convolution's kernel [D, C, P, P]
    (kernel = stride = P); the product computes that convolution, faster forward and backward on a CPU
    (benchmarks/patch_embedding.py). Pixels past the last whole patch are left out, as the convolution leaves them."""

    def __init__(self, in_chans: int, dim: int, patch_size: tuple[int, int], bias: bool = True) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch_size, stride=patch_size, bias=bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Grid]:
        B, C, H, W = x.shape
        ph, pw = self.proj.kernel_size
        grid = (H // ph, W // pw)
        patches = x[..., : grid[0] * ph, : grid[1] * pw].reshape(B, C, grid[0], ph, grid[1], pw)
        # x_p: [B, N, C * P * P], its entries in the order of E's rows
        patches = patches.permute(0, 2, 4, 1, 3, 5).reshape(B, grid[0] * grid[1], C * ph * pw)
        return F.linear(patches, self.proj.weight.flatten(1), self.proj.bias), grid


def stochastic_depth(rate: float) -> nn.Module:
    """torchvision's per-sample StochasticDepth at `rate`; the identity at 0, so that building a model (a
    pretrained one to predict with or fit a head on) never pays the seconds of importing torchvision."""
    if rate == 0:
        return nn.Identity()
    from torchvision.ops import StochasticDepth

    return StochasticDepth(rate, mode="row")


class Block(nn.Module):
    """One encoder layer: Eq. 2 then Eq. 3, pre-norm, residuals (with stochastic depth when training)."""

    def __init__(self, config: ViTConfig, drop_path: float, num_rel_tokens: int) -> None:
        super().__init__()
        dim, eps = config.hidden_size, config.layer_norm_eps
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(
            dim, config.num_heads, config.attention_dropout, config.dropout, num_rel_tokens, config.qkv_bias
        )
        self.ls1 = layer_scale(dim, config.layer_scale)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = build_mlp(dim, config.mlp_dim, config.activation, config.dropout)
        self.ls2 = layer_scale(dim, config.layer_scale)
        self.drop_path = stochastic_depth(drop_path)

    def forward(
        self, x: torch.Tensor, need_weights: bool = False, queries: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """z_l from z_{l-1}; for the first `queries` tokens only when given (rows of Eq. 2-3 are independent
        once attention has read every token)."""
        attended, weights = self.attn(self.norm1(x), need_weights, queries)
        x = x[:, :queries] + self.drop_path(self.ls1(attended))  # Eq. 2
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))  # Eq. 3
        return x, weights


class VisionTransformer(SavePretrainedMixin, nn.Module):
    """ViT (and the hybrid: a ResNet v1 feature map embedded with 1x1 patches) built from a `ViTConfig`."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.hidden_size
        if config.resnet_layers is not None:
            self.backbone: ResNetV1 | None = ResNetV1(
                config.resnet_layers, config.resnet_width, config.in_chans
            )
            embed_in = self.backbone.out_channels
        else:
            self.backbone = None
            embed_in = config.in_chans
        self.patch_embed = PatchEmbed(embed_in, dim, to_pair(config.patch_size), config.patch_bias)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if config.has_class_token else None
        self.reg_token = (
            nn.Parameter(torch.zeros(1, config.num_reg_tokens, dim)) if config.num_reg_tokens else None
        )
        self.pos_embed = build_position_embedding(
            config.pos_embed, config.num_pos_prefix_tokens, config.grid_size, dim
        )
        self.pos_drop = nn.Dropout(config.dropout)
        self.norm_pre = nn.LayerNorm(dim, eps=config.layer_norm_eps) if config.pre_norm else nn.Identity()
        num_rel_tokens = (
            config.num_prefix_tokens + math.prod(config.grid_size) if config.pos_embed == "relative" else 0
        )
        rates = [
            config.drop_path * i / max(config.depth - 1, 1) for i in range(config.depth)
        ]  # stochastic depth, linear
        self.blocks = nn.ModuleList(Block(config, rate, num_rel_tokens) for rate in rates)
        final_norm = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.norm = nn.Identity() if config.fc_norm else final_norm
        self.attn_pool = (
            AttentionPool(dim, config.num_heads, config.mlp_dim, config.activation, config.layer_norm_eps)
            if config.classifier == "map"
            else None
        )
        self.fc_norm = final_norm if config.fc_norm else nn.Identity()
        pooled = 2 * dim if config.classifier == "token_gap" else dim
        self.pre_logits = (
            PreLogits(pooled, config.representation_size) if config.representation_size else nn.Identity()
        )
        self.head = (
            nn.Linear(config.representation_size or pooled, config.num_classes)
            if config.num_classes
            else nn.Identity()
        )
        self.grad_checkpointing = False
        self.init_weights()

    @property
    def num_features(self) -> int:
        """Width of the vector the head reads (pre-logits when present)."""
        pooled = self.config.hidden_size * (2 if self.config.classifier == "token_gap" else 1)
        return self.config.representation_size or pooled

    def patchify(self, x: torch.Tensor) -> tuple[torch.Tensor, Grid]:
        """The patch embeddings x_p E of Eq. 1 (of the ResNet feature map for hybrids) and their grid."""
        self.check_input(x)
        if self.backbone is not None:
            x = self.backbone(x)
        return self.patch_embed(x)

    def add_position(self, patches: torch.Tensor, grid: Grid) -> torch.Tensor:
        """The rest of Eq. 1: class token (and register tokens) prepended, position embeddings added (then
        dropout, B.1, and CLIP's pre-norm). Without `prefix_pos_embed` only the patches get a position."""
        prefix = [
            t.expand(patches.shape[0], -1, -1) for t in (self.cls_token, self.reg_token) if t is not None
        ]
        if self.config.prefix_pos_embed:
            z = self.pos_embed(torch.cat([*prefix, patches], dim=1), grid)
        else:
            z = torch.cat([*prefix, self.pos_embed(patches, grid)], dim=1)
        return self.norm_pre(self.pos_drop(z))

    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, Grid]:
        """Eq. 1: z_0 from images."""
        patches, grid = self.patchify(x)
        return self.add_position(patches, grid), grid

    def encode(self, z: torch.Tensor, queries: int | None = None, first: int = 0) -> torch.Tensor:
        """Eq. 2-3 for every layer, then the LayerNorm of Eq. 4; on every token, or with `queries` the last
        layer and the norm on the first `queries` tokens only. With `first`, `z` is the sequence entering layer
        `first` (`tokens_entering`), and only the layers from there run."""
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            if i < first:
                continue
            rows = queries if i == last else None
            if self.grad_checkpointing:
                z = checkpoint(block, z, False, rows, use_reentrant=False)[0]
            else:
                z = block(z, queries=rows)[0]
        return self.norm(z)

    def tokens_entering(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """z_layer, the token sequence [B, T, D] entering block `layer` (0: Eq. 1's z_0): what layers that stay
        frozen hand to the ones tuned (`encode(z, first=layer)` continues from it)."""
        z = self.embed(x)[0]
        for block in self.blocks[:layer]:
            z = block(z)[0]
        return z

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoded, normalised token sequence [B, T, D]."""
        return self.encode(self.embed(x)[0])

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """The vector Eq. 4 reads from the encoded tokens: the class token, the mean of the patch tokens
        ('gap'), both side by side ('token_gap') or attention pooling over the patches ('map')."""
        kind = self.config.classifier
        if kind == "token":
            return x[:, 0]
        patches = x[:, self.config.num_prefix_tokens :]
        if self.attn_pool is not None:  # 'map'
            return self.attn_pool(patches)
        mean = patches.mean(dim=1)
        return torch.cat([x[:, 0], mean], dim=-1) if kind == "token_gap" else mean

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pool, the norm after pooling (`fc_norm`), pre-logits, head."""
        x = self.pre_logits(self.fc_norm(self.pool(x)))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Logits (with `pre_logits`, the vector the head reads). Eq. 4 reads z_L^0 alone, so with a class token
        the last layer computes that token only: the same result as `forward_head(forward_features(x))` for
        ~1/depth less work."""
        queries = 1 if self.config.classifier == "token" else None
        return self.forward_head(self.encode(self.embed(x)[0], queries), pre_logits)

    def forward_attention(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The same forward through explicit attention: (encoded tokens, one [B, heads, T, T] map per layer)."""
        x, _ = self.embed(x)
        maps = []
        for block in self.blocks:
            x, weights = block(x, need_weights=True)
            maps.append(weights)
        return self.norm(x), maps

    def check_input(self, x: torch.Tensor) -> None:
        """A clear ValueError for inputs the model cannot take, instead of a shape error deep inside torch."""
        cfg = self.config
        if x.ndim != 4 or x.shape[1] != cfg.in_chans:
            raise ValueError(f"expected input [B, {cfg.in_chans}, H, W], got {list(x.shape)}")
        size = tuple(x.shape[-2:])
        stride = cfg.input_stride
        if size[0] % stride or size[1] % stride:
            raise ValueError(f"input size {size} is not divisible by the patch size {stride}")
        if size != cfg.img_size and not cfg.dynamic_img_size:
            raise ValueError(
                f"input size {size} differs from the model's img_size {cfg.img_size}; "
                "set dynamic_img_size=True or create the model with the new img_size"
            )

    def reset_classifier(self, num_classes: int) -> None:
        """A fresh zero-initialised head (§3.2: fine-tuning starts from a zero D x K layer)."""
        self.config.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()
        self.head.to(self.patch_embed.proj.weight.device)
        zero_(self.head)

    def no_weight_decay(self) -> set[str]:
        """Parameters exempt from weight decay: biases, norms, LayerScale, position embeddings, class and
        register tokens, the attention pool's query."""
        return {
            name
            for name, p in self.named_parameters()
            if p.ndim <= 1
            or name.startswith(("pos_embed.", "cls_token", "reg_token", "attn_pool.latent"))
            or ".rel_pos." in name
        }

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block in the backward pass: activation memory for compute."""
        self.grad_checkpointing = enable

    def init_weights(self) -> None:
        """The official (vit_jax) initialisation: lecun-normal patch embedding and pre-logits, xavier-uniform
        attention and MLP kernels, MLP biases N(0, 1e-6), zero class token and head; position tables N(0, 0.02)."""
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                if name.endswith("qkv"):
                    xavier_uniform_fused_(module.weight, parts=3)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)
                elif name.endswith(("attn.proj", "mlp.fc1", "mlp.fc2")):
                    nn.init.xavier_uniform_(module.weight)
                    if "mlp" in name:
                        normal_(module.bias, 1e-6)
                    else:
                        nn.init.zeros_(module.bias)
        lecun_normal_(self.patch_embed.proj.weight)
        if self.patch_embed.proj.bias is not None:
            nn.init.zeros_(self.patch_embed.proj.bias)
        if self.reg_token is not None:
            normal_(self.reg_token, 1e-6)  # as timm and DINOv2 draw them
        if self.attn_pool is not None:
            normal_(self.attn_pool.latent, self.config.hidden_size**-0.5)
        if isinstance(self.pre_logits, PreLogits):
            lecun_normal_(self.pre_logits.fc.weight)
            nn.init.zeros_(self.pre_logits.fc.bias)
        zero_(self.head)


class PreLogits(nn.Module):
    """The pre-training representation layer of §3.1 / B.1: Dense + tanh in front of the head."""

    def __init__(self, dim: int, representation_size: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, representation_size)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))
