"""A self-contained report.html: every figure embedded as a base64 data URI, no external resource."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

CAPTIONS = {
    "filters": (
        "Fig. 7 (left): embedding filters",
        (
            "Principal components of the patch-embedding filters (right singular vectors of the centred "
            "[D, C·P·P] filter matrix), each min-max normalised; the percentage is the variance it explains."
        ),
    ),
    "position_similarity": (
        "Fig. 7 (centre): position embedding similarity",
        (
            "Cosine similarity of the position embedding of the patch at each (row, column) with those of all "
            "patches (class and register tokens excluded). Nearby patches with similar embeddings mean the model learned the 2-D "
            "image topology."
        ),
    ),
    "attention_distance": (
        "Fig. 7 (right) / Fig. 11: mean attention distance",
        (
            "For each head and layer, the attention-weighted distance in input pixels between a query patch and the "
            "patches it attends to, averaged over queries and images: the analogue of a CNN's receptive field."
        ),
    ),
    "rollout": (
        "Fig. 6 / D.8: attention rollout",
        (
            "Attention averaged over heads, the identity added for the residual, rows renormalised and multiplied "
            "through all layers, then read on the patches."
        ),
    ),
}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
figure { margin: 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption, .note { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.8em; } td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
pre { background: #f6f6f6; padding: 0.6em; font-size: 0.8em; overflow-x: auto; }
#status { font-size: 0.8em; color: #777; }
"""

# Marks the body once every image has decoded, so a headless browser (and a test) can check them all.
SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-images-loaded', ok + '/' + imgs.length);
  document.getElementById('status').textContent = ok + ' of ' + imgs.length + ' figures loaded';
});
"""


def data_uri(path: str | Path) -> str:
    """A PNG file as a data: URI."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _table(distance: list[list[float]]) -> str:
    if not distance:
        return ""
    heads = len(distance[0])
    head = "".join(f"<th>head {h + 1}</th>" for h in range(heads))
    rows = "".join(
        f"<tr><th>layer {i + 1}</th>"
        + "".join(f"<td>{v:.1f}</td>" for v in row)
        + f"<td><b>{sum(row) / len(row):.1f}</b></td></tr>"
        for i, row in enumerate(distance)
    )
    return f"<table><tr><th></th>{head}<th>mean</th></tr>{rows}</table>"


def render_report(figures: dict[str, Path], summary: dict[str, Any], title: str = "vitkit inspect") -> str:
    """The HTML text of the report for the written figures and the inspect.json summary."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{STYLE}</style><script>{SCRIPT}</script></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    weights = summary.get("weights")
    cfg = summary.get("config", {})
    parts.append(
        "<p>"
        + (f"Weights <code>{e(str(weights))}</code>; " if weights else "")
        + f"classifier <code>{e(str(cfg.get('classifier')))}</code>, position embedding "
        f"<code>{e(str(cfg.get('pos_embed')))}</code>, {summary.get('num_images', 0)} image(s), token grid "
        f"{e(' x '.join(map(str, summary.get('grid_size', []))))}, {summary.get('input_stride')} pixels per token.</p>"
    )
    for key, (heading, caption) in CAPTIONS.items():
        parts.append(f"<h2>{e(heading)}</h2>")
        if key == "filters":
            parts.append(f"<p class='note'>{e(summary.get('filter_components', {}).get('note', ''))}</p>")
        if key == "position_similarity":
            parts.append(f"<p class='note'>{e(summary.get('position_embedding', {}).get('note', ''))}</p>")
        if key in figures:
            parts.append(
                f"<figure><img src='{data_uri(figures[key])}' alt='{e(heading)}'>"
                f"<figcaption>{e(caption)}</figcaption></figure>"
            )
        elif key not in ("filters", "position_similarity"):
            parts.append("<p class='note'>not computed</p>")
        if key == "rollout" and summary.get("rollout_note"):
            parts.append(f"<p class='note'>Shown {e(summary['rollout_note'])}.</p>")
        if key == "attention_distance":
            parts.append(f"<p class='note'>{e(summary.get('mean_attention_distance_notes', ''))}</p>")
            parts.append(_table(summary.get("mean_attention_distance", [])))
    images = summary.get("images", [])
    skipped = summary.get("skipped", [])
    parts.append(f"<h2>Images ({len(images)} used, {len(skipped)} skipped)</h2>")
    if skipped:
        items = "".join(f"<li><code>{e(s['path'])}</code>: {e(s['reason'])}</li>" for s in skipped)
        parts.append(f"<p>Skipped:</p><ul>{items}</ul>")
    if images:
        parts.append("<details><summary>used</summary><pre>" + e("\n".join(images)) + "</pre></details>")
    parts.append("<h2>Model configuration</h2><pre>" + e(json.dumps(cfg, indent=2)) + "</pre>")
    parts.append("<p id='status'></p></body></html>")
    return "\n".join(parts) + "\n"


def write_report(
    path: str | Path, figures: dict[str, Path], summary: dict[str, Any], title: str = "vitkit inspect"
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(figures, summary, title), encoding="utf-8")
    return path
