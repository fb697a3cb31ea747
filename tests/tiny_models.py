"""The tiny ViT that unit tests build: 16 px RGB in 4x4 patches, width 32, 2 layers of 2 heads, 3 classes. A plain
module (not a conftest), so that fixtures of any scope and any test package import the same shape."""

TINY_VIT = dict(img_size=16, patch_size=4, hidden_size=32, depth=2, num_heads=2, mlp_dim=32, num_classes=3)
