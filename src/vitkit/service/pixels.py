"""The decoded pixels admitted at once: what bounds the service's memory, whatever the thread count.

Decoding and preprocessing an image of P pixels takes up to about 17 P bytes at its peak for an 8-bit image
(Pillow's 4-byte pixels, the uint8 array, the float32 copy the resize works on), 19 P with transparency (the
compositing onto white) and 27 P for 16-bit greyscale (its float64 conversion) (SERVING.md, "Memory"). So the
service admits images, by the size their header declares, only while the pixels being decoded stay within
`limit`; the next one waits up to `wait_s` for room, then is answered 503. `limit` is at least the largest image
the service accepts, so every accepted image fits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from PIL import Image

from vitkit.service.limits import RequestRefused

# Pillow allocates a large image in blocks of 16 MiB, which glibc serves from the decoding thread's arena once its
# mmap threshold has grown past them: freed, they stay in that arena, and each decoding thread kept a whole image's
# worth (324 MiB for 9000x9000). Blocks above glibc's largest threshold (32 MiB) are always mapped and unmapped.
PILLOW_BLOCK_BYTES = 64 * 2**20


def return_large_images_to_the_system() -> None:
    """Make Pillow's blocks for large images big enough to be unmapped when freed (see PILLOW_BLOCK_BYTES)."""
    Image.core.set_block_size(PILLOW_BLOCK_BYTES)


class PixelBudget:
    def __init__(self, limit: int, wait_s: float) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self.in_flight = 0
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, pixels: int) -> AsyncIterator[None]:
        """Hold `pixels` of the budget for the block, waiting up to `wait_s` for them; 503 when they stay taken."""
        async with self._changed:
            try:
                async with asyncio.timeout(self.wait_s):
                    await self._changed.wait_for(lambda: self.in_flight + pixels <= self.limit)
            except TimeoutError:
                raise RequestRefused(
                    503,
                    f"busy: {self.in_flight:,} pixels being decoded (limit {self.limit:,}); retry later",
                ) from None
            self.in_flight += pixels
        try:
            yield
        finally:
            async with self._changed:
                self.in_flight -= pixels
                self._changed.notify_all()
