"""Benchmarks: throughput against timm / transformers / torchvision at identical weights, MFU against a GEMM ceiling
measured in the same run, peak memory and the largest batch for a budget, the resolution sweep of Appendix D.5.

Everything compared is measured side by side in one process (`timing.alternate`); see docs/BENCHMARKS.md.
"""

from vitkit.bench.memory import MemoryFit, fit_memory, peak_allocated_bytes, resident_bytes
from vitkit.bench.peers import PEERS, build_peer, check_same_outputs
from vitkit.bench.timing import Result, alternate, gemm_candidate, paired_ratio, ratio_range, time_call

__all__ = [
    "PEERS",
    "MemoryFit",
    "Result",
    "alternate",
    "build_peer",
    "check_same_outputs",
    "fit_memory",
    "gemm_candidate",
    "paired_ratio",
    "peak_allocated_bytes",
    "ratio_range",
    "resident_bytes",
    "time_call",
]
