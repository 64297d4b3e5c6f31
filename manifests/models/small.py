"""Small example models: quick to export and lower, real enough to show every step."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvNet(nn.Module):
    """Conv + batch norm + pooling: batch norm must fold into the convolution when lowered."""

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels * 2, 3, padding=1, stride=2), nn.BatchNorm2d(channels * 2), nn.ReLU(),
        )
        self.head = nn.Linear(channels * 2, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(image).mean(dim=(2, 3)))


class TextEncoder(nn.Module):
    """One transformer encoder block over token ids, mean-pooled: a dynamic sequence length."""

    def __init__(self, vocab: int = 1000, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True)
        self.out = nn.Linear(dim, dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.block(self.embed(tokens)).mean(dim=1))


class AttentionBlock(nn.Module):
    """A transformer encoder block written out by hand (projections, softmax attention, layer norms, an
    MLP) over float token features [1, tokens, dim]: the attention pattern of an NPU-friendly encoder."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def attention_block(dim: int = 64, heads: int = 4) -> nn.Module:
    return AttentionBlock(dim, heads)


def mlp(features: int = 64, hidden: int = 256, classes: int = 16) -> nn.Module:
    return MLP(features, hidden, classes)


def convnet(channels: int = 8, classes: int = 10) -> nn.Module:
    model = ConvNet(channels, classes)
    # Non-trivial running statistics, so that folding batch norm is actually exercised.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model


def text_encoder(vocab: int = 1000, dim: int = 64, heads: int = 4) -> nn.Module:
    return TextEncoder(vocab, dim, heads)


class TwoTower(nn.Module):
    """An image tower (forward) and a text tower (encode_text) sharing one projection: two methods of
    one program, sharing weights."""

    def __init__(self, dim: int = 32, vocab: int = 500) -> None:
        super().__init__()
        self.image = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                   nn.Flatten(), nn.Linear(8, dim))
        self.text = nn.Embedding(vocab, dim)
        self.project = nn.Linear(dim, dim)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.project(self.image(image))

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.project(self.text(tokens).mean(dim=1))


def two_tower(dim: int = 32, vocab: int = 500) -> nn.Module:
    return TwoTower(dim, vocab)


class DSCNN(nn.Module):
    """A keyword spotter of MLPerf Tiny's DS-CNN shape: 49x10 MFCC frames in, 12 classes out; a strided
    convolution, then depthwise-separable blocks (depthwise 3x3, pointwise 1x1, each with batch norm and
    ReLU), average pooling and a linear layer. Random weights (seeded): a placeholder of the right shape
    and size for a microcontroller, not a trained spotter."""

    def __init__(self, channels: int, blocks: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(1, channels, (10, 4), stride=(2, 2), padding=(5, 1), bias=False),
                                   nn.BatchNorm2d(channels), nn.ReLU()]
        for _ in range(blocks):
            layers += [nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False),
                       nn.BatchNorm2d(channels), nn.ReLU(),
                       nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, classes)

    def forward(self, mfcc: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(mfcc)), 1))


def ds_cnn(channels: int = 64, blocks: int = 4, classes: int = 12) -> nn.Module:
    torch.manual_seed(0)
    model = DSCNN(channels, blocks, classes)
    # Batch norm statistics of a trained network (random ones would make every layer's range degenerate).
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()
