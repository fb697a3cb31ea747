"""Inside a trained ViT (§4.5, Appendix D.7-D.8): the computations behind Fig. 6, 7 and 11.

Importing this package is light (torch only); the figures (matplotlib) and the HTML report live in
`vitkit.inspect.figures` and `vitkit.inspect.html_report`, imported on use.
"""

from vitkit.inspect.attention import (
    attention_distance,
    attention_maps,
    attention_rollout,
    mean_attention_distance,
    patch_distances,
    rollout_masks,
    rollout_to_patches,
    token_grid,
)
from vitkit.inspect.embeddings import (
    cosine_similarity_grid,
    filter_components,
    position_embedding_table,
    position_similarity,
)
from vitkit.inspect.probe import inspect_model, summary_json

__all__ = [
    "attention_distance",
    "attention_maps",
    "attention_rollout",
    "cosine_similarity_grid",
    "filter_components",
    "inspect_model",
    "mean_attention_distance",
    "patch_distances",
    "position_embedding_table",
    "position_similarity",
    "rollout_masks",
    "rollout_to_patches",
    "summary_json",
    "token_grid",
]
