"""Benchmarks: throughput against timm / transformers / torchvision at identical weights, MFU against a GEMM ceiling
measured in the same run, peak memory and the largest batch for a budget, the resolution sweep of Appendix D.5, and
the engine's training step against a plain timm loop.

The machinery: `timing` (side-by-side alternation, paired ratios, the GEMM ceiling), `memory` (peak memory),
`peers` (the same weights in timm / transformers / torchvision), `processes` (candidates in processes of their
own), `table` (the printed results). One module per benchmark (`inference`, `batch`, `resolution`,
`checkpointing`, `training`, ...), whose `vitkit bench` options are vitkit.commands.parsers.bench's; see
docs/BENCHMARKS.md.
"""
