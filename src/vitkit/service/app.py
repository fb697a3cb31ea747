"""The HTTP API and the page, on FastAPI: `/predict`, `/predict/batch`, `/health`, `/ready`, `/metrics`, `/info`.

Every refusal is a 4xx or 503 with {"error": "<one line>"}, and nothing a request sends can stop the service:
connections are bounded (vitkit.service.connections) and bodies too (vitkit.service.limits), both before a
request takes any of the service's room; images are decoded by vitkit's decoder with its pixel limit (a
decompression bomb is refused from its header), a truncated PNG is refused (vitkit.service.truncation), the pixels
being decoded at once are bounded (vitkit.service.pixels), and at most `max_queue` images whose body has arrived
are admitted at once (decoded or waiting for the model); past that the answer is 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from vitkit.data.decode import decode_image, image_size, max_pixels_limit
from vitkit.service.batcher import Batcher, NotServing, Overloaded
from vitkit.service.connections import ConnectionLimits
from vitkit.service.limits import GONE, ASGIApp, BodyBounds, BodyLimits, Message, RequestRefused
from vitkit.service.metrics import Metrics
from vitkit.service.pixels import PixelBudget, return_large_images_to_the_system
from vitkit.service.served_model import Explained, ServedModel
from vitkit.service.server import MODEL_STOP_SECONDS
from vitkit.service.truncation import png_shortfall

RAW_TYPES = ("application/octet-stream",)  # besides image/*
BODIES_HELD = 8
UNREAD_BODY = (408, 413)
log = logging.getLogger("vitkit.serve")
ROUTES = ("/", "/info", "/health", "/ready", "/metrics", "/predict", "/predict/batch")


@dataclass(frozen=True)
class ServiceOptions:
    """How the service batches and what it accepts (the `vitkit serve` flags)."""

    max_batch: int = 16
    max_wait_ms: float = 10.0
    max_queue: int = 64
    max_upload_bytes: int = 16 * 2**20
    max_pixels: int | None = (
        None  # None: vitkit.data.decode's limit ($VITKIT_MAX_IMAGE_PIXELS or ~89.5 Mpixel)
    )
    max_pixels_in_flight: int | None = None  # None: the pixel limit in force (one largest image at a time)
    decode_threads: int = 2
    read_timeout_s: float = 30.0
    min_body_rate: float = 1024.0  # bytes/s, after the body's first body_grace_s
    body_grace_s: float = 5.0
    pixel_wait_s: float = 10.0  # how long an image waits for room among the pixels in flight, then 503
    top: int = 5
    connections: ConnectionLimits = ConnectionLimits()

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "max_upload_bytes", "decode_threads", "top"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.read_timeout_s <= 0 or self.min_body_rate <= 0:
            raise ValueError("max_wait_ms must be >= 0, read_timeout_s and min_body_rate > 0")
        if self.pixels_in_flight < max_pixels_limit(self.max_pixels):
            raise ValueError(
                f"max_pixels_in_flight ({self.pixels_in_flight:,}) must be at least the pixel limit "
                f"({max_pixels_limit(self.max_pixels):,}): a largest image would never be admitted"
            )

    @property
    def pixels_in_flight(self) -> int:
        return self.max_pixels_in_flight or max_pixels_limit(self.max_pixels)

    @property
    def body_budget_bytes(self) -> int:
        """Bytes of request bodies held at once: room for BODIES_HELD bodies of the largest size."""
        return BODIES_HELD * self.max_upload_bytes


def one_torch_thread_of_its_own() -> None:
    """Resize on one torch intra-op thread in the calling thread (a decoder), never on the model's pool. torch
    keeps the count per thread, set from the process-wide value at the thread's first use: that use comes first
    here, so that the model thread's count stays its own (vitkit.service.batcher sets it explicitly)."""
    torch.get_num_threads()
    torch.set_num_threads(1)


class Service:
    """The model thread, the decoders and the admission count behind the routes."""

    def __init__(self, model: ServedModel, options: ServiceOptions) -> None:
        self.model = model
        self.options = options
        self.metrics = Metrics()
        self.batcher = Batcher(
            model,
            self.metrics,
            max_batch=options.max_batch,
            max_wait_s=options.max_wait_ms / 1e3,
            max_queue=options.max_queue,
        )
        self.decoders = ThreadPoolExecutor(
            options.decode_threads, "vitkit-decode", initializer=one_torch_thread_of_its_own
        )
        self.pixels = PixelBudget(options.pixels_in_flight, options.pixel_wait_s)
        return_large_images_to_the_system()
        self.admitted = 0  # images decoded or queued now; touched on the event loop only

    @contextlib.contextmanager
    def admission(self, images: int) -> Iterator[None]:
        """Hold `images` of the `max_queue` slots for the block; 503 when they are not free."""
        if self.admitted + images > self.options.max_queue:
            raise RequestRefused(
                503, f"busy: {self.admitted} images in progress (limit {self.options.max_queue}); retry later"
            )
        self.admitted += images
        try:
            yield
        finally:
            self.admitted -= images

    async def classify(self, data: bytes, name: str, explain: bool = False) -> torch.Tensor | Explained:
        """Decode and preprocess off the event loop and off the model thread, within the pixel budget, then wait
        for the model."""
        loop = asyncio.get_running_loop()
        try:
            width, height = image_size(data, name=name, max_pixels=self.options.max_pixels)
        except ValueError as error:  # not an image, too many pixels
            raise RequestRefused(400, " ".join(str(error).split())) from None
        async with self.pixels.hold(width * height):
            pixels = await loop.run_in_executor(self.decoders, self.decode, data, name)
        try:
            future = self.batcher.submit(pixels, explain)
        except (Overloaded, NotServing) as error:
            raise RequestRefused(503, str(error)) from None
        return await asyncio.wrap_future(future)

    def decode(self, data: bytes, name: str) -> torch.Tensor:
        shortfall = png_shortfall(data, name)
        if shortfall is not None:
            raise RequestRefused(400, shortfall)
        try:
            return self.model.preprocess(decode_image(data, name=name, max_pixels=self.options.max_pixels))
        except ValueError as error:  # ImageDecodeError: not an image, truncated, too many pixels, ...
            raise RequestRefused(400, " ".join(str(error).split())) from None

    def answer(self, probs: torch.Tensor, top: int) -> list[dict[str, Any]]:
        values, indices = probs.topk(min(top, self.model.num_classes))
        return [
            {"class": self.model.label(i), "index": i, "probability": round(p, 6)}
            for p, i in zip(values.tolist(), indices.tolist(), strict=True)
        ]


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_upload(request: Request) -> tuple[bytes, str]:
    """(image bytes, name for messages) of a raw image body or of the multipart field `file`."""
    kind = media_type(request)
    if kind == "multipart/form-data":
        async with request.form(max_files=1, max_fields=4) as form:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise RequestRefused(400, "multipart body without a file field named 'file'")
            return await upload.read(), upload.filename or "file"
    if kind and not kind.startswith("image/") and kind not in RAW_TYPES:
        raise RequestRefused(
            415,
            f"content type {kind!r}: expected an image body (image/*, application/octet-stream) "
            "or multipart/form-data with the image in a field 'file'",
        )
    data = await request.body()
    if not data:
        raise RequestRefused(400, "empty request body: expected an image")
    return data, "request body"


def create_app(model: ServedModel, options: ServiceOptions | None = None) -> tuple[FastAPI, Service]:
    """The FastAPI app (the model thread starts and stops with its lifespan) and the service behind it."""
    options = options or ServiceOptions()
    service = Service(model, options)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.batcher.start()
        try:
            yield
        finally:  # uvicorn has answered every request it accepted: the queue is empty or drains here
            await asyncio.to_thread(service.batcher.stop, MODEL_STOP_SECONDS)
            service.decoders.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="vitkit serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(RequestRefused)
    async def refused(request: Request, error: RequestRefused) -> JSONResponse:
        if error.status == GONE:
            client = request.client.host if request.client else "a client"
            log.warning("%s %s from %s: %s", request.method, request.url.path, client, error.reason)
        headers = {"Retry-After": "1"} if error.status == 503 else {}
        if error.status in UNREAD_BODY:  # the rest of the body is not read: the connection closes after this
            headers["Connection"] = "close"
        return JSONResponse({"error": error.reason}, status_code=error.status, headers=headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse({"error": " ".join(str(error.detail).split())}, status_code=error.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        return JSONResponse({"error": problems}, status_code=422)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return resources.files("vitkit.service").joinpath("page.html").read_text()

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return {
            "model": model.info(),
            "class_names": model.class_names,
            "rollout": service.batcher.can_explain,
            "limits": {"max_upload_bytes": options.max_upload_bytes, "max_batch": options.max_batch},
        }

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "alive"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        state = service.batcher.state()
        if state is None:
            return JSONResponse({"ready": True, "model": model.info()})
        return JSONResponse({"ready": False, "reason": state}, status_code=503)

    @app.get("/metrics")
    async def metrics() -> dict[str, Any]:
        return service.metrics.snapshot(service.batcher.queued, service.pixels.in_flight)

    @app.post("/predict")
    async def predict(
        request: Request,
        top: int = Query(options.top, ge=1, description="classes to return"),
        rollout: bool = Query(False, description="also the attention rollout (PyTorch ViTs)"),
    ) -> dict[str, Any]:
        start = time.perf_counter()
        data, name = await read_upload(request)
        with service.admission(1):
            result = await service.classify(data, name, explain=rollout)
        body: dict[str, Any] = {"model": model.info()}
        if isinstance(result, Explained):
            body["predictions"] = service.answer(result.probs, top)
            body["rollout"] = {
                "grid": list(result.rollout.shape),
                "values": result.rollout.flatten().tolist(),
            }
        else:
            body["predictions"] = service.answer(result, top)
        body["time_ms"] = round((time.perf_counter() - start) * 1e3, 3)
        return body

    @app.post("/predict/batch")
    async def predict_batch(request: Request, top: int = Query(options.top, ge=1)) -> dict[str, Any]:
        """Several images in one multipart request (fields `files`); one result or error per image, in order."""
        start = time.perf_counter()
        if media_type(request) != "multipart/form-data":
            raise RequestRefused(415, "expected multipart/form-data with the images in fields named 'files'")
        async with request.form(max_files=options.max_queue, max_fields=options.max_queue) as form:
            uploads = [u for u in form.getlist("files") if isinstance(u, UploadFile)]
            if not uploads:
                raise RequestRefused(400, "multipart body without any file field named 'files'")
            with service.admission(len(uploads)):
                named = [(await u.read(), u.filename or f"files[{i}]") for i, u in enumerate(uploads)]
                outcomes = await asyncio.gather(
                    *(service.classify(data, name) for data, name in named), return_exceptions=True
                )
        results: list[dict[str, Any]] = []
        for (_, name), outcome in zip(named, outcomes, strict=True):
            if isinstance(outcome, RequestRefused):
                results.append({"file": name, "error": outcome.reason, "status": outcome.status})
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                assert isinstance(outcome, torch.Tensor)
                results.append({"file": name, "predictions": service.answer(outcome, top)})
        return {
            "model": model.info(),
            "results": results,
            "time_ms": round((time.perf_counter() - start) * 1e3, 3),
        }

    return app, service


def recorded(app: ASGIApp, metrics: Metrics) -> ASGIApp:
    """`app` with each HTTP request's route, status and duration counted in `metrics` (unknown paths as 'other',
    so random URLs cannot grow the counters)."""

    async def call(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await app(scope, receive, sending)
        finally:
            route = scope["path"] if scope["path"] in ROUTES else "other"
            metrics.request(route, status, time.perf_counter() - start)

    return call


def asgi_app(model: ServedModel, options: ServiceOptions | None = None) -> tuple[ASGIApp, Service]:
    """What the server runs: the app behind the body limits, every request counted."""
    options = options or ServiceOptions()
    app, service = create_app(model, options)
    bounds = BodyBounds(
        options.max_upload_bytes,
        options.read_timeout_s,
        options.min_body_rate,
        options.body_budget_bytes,
        options.body_grace_s,
    )
    limited = BodyLimits(app, bounds)
    return recorded(limited, service.metrics), service
