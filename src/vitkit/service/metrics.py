"""The service's counters for `/metrics`: requests by route and status (499: the client went away before its
body arrived), connections closed by a bound and why, batch sizes, latency percentiles.

Updated from the event loop (requests) and the model thread (batches), hence the lock. Latency percentiles are
over the last `WINDOW` answered requests, so memory stays bounded however long the service runs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from typing import Any

WINDOW = 2048
PERCENTILES = (50, 90, 99)


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile `q` (0-100) of ascending values."""
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n q / 100), at least the first
    return sorted_values[int(rank) - 1]


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._connections: Counter[str] = Counter()
        self._batch_sizes: Counter[int] = Counter()
        self._latencies: deque[float] = deque(maxlen=WINDOW)
        self._images = 0

    def request(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[route, status] += 1
            if status < 400:
                self._latencies.append(seconds)

    def connection(self, event: str) -> None:
        """A connection closed or refused by a bound (vitkit.service.connections names the events)."""
        with self._lock:
            self._connections[event] += 1

    def batch(self, size: int) -> None:
        with self._lock:
            self._batch_sizes[size] += 1
            self._images += size

    def snapshot(self, queued: int, pixels_in_flight: int = 0) -> dict[str, Any]:
        with self._lock:
            batches = sum(self._batch_sizes.values())
            latencies = sorted(self._latencies)
            requests: dict[str, dict[str, int]] = {}
            for (route, status), count in sorted(self._requests.items()):
                requests.setdefault(route, {})[str(status)] = count
            return {
                "uptime_s": round(time.monotonic() - self._started, 3),
                "requests": requests,
                "connections_closed": dict(sorted(self._connections.items())),
                "images_predicted": self._images,
                "batches": batches,
                "mean_batch_size": self._images / batches if batches else None,
                "batch_sizes": {str(size): n for size, n in sorted(self._batch_sizes.items())},
                "queued_images": queued,
                "pixels_in_flight": pixels_in_flight,
                "latency_ms": {
                    "window": len(latencies),
                    **{
                        f"p{q}": round(percentile(latencies, q) * 1e3, 3) if latencies else None
                        for q in PERCENTILES
                    },
                },
            }
