"""The JSON API against a real server on a free port: answers match the model's own, batching gathers concurrent
requests without mixing their answers, and every bad request gets a 4xx with one line while the server goes on."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import torch

from service.conftest import CLASSES, Served, photo, running
from vitkit import cli
from vitkit.data.decode import decode_image
from vitkit.data.transforms import eval_transform
from vitkit.service import ServiceOptions, load_served_model
from vitkit.service.app import Service
from vitkit.service.served_model import ServedModel, Session
from vitkit.weights import load_weights

TIMEOUT = 20


def expected_probs(weights_dir: Path, data: bytes) -> torch.Tensor:
    """What the model itself gives the image, with `vitkit predict`'s decoding and preprocessing."""
    model = load_weights(weights_dir)
    with torch.no_grad():
        return model(eval_transform(decode_image(data)[None], 16, 3)).softmax(-1)[0]


def post(url: str, data: bytes, content_type: str = "image/png", **params) -> requests.Response:
    return requests.post(
        f"{url}/predict", data=data, headers={"Content-Type": content_type}, params=params, timeout=TIMEOUT
    )


def test_predict_answers_with_the_model_s_class_names_and_probabilities(
    served: Served, weights_dir: Path
) -> None:
    data = photo(1)
    answer = post(served.url, data).json()
    want = expected_probs(weights_dir, data)
    order = want.argsort(descending=True).tolist()
    assert [p["class"] for p in answer["predictions"]] == [CLASSES[i] for i in order]
    assert [p["index"] for p in answer["predictions"]] == order
    got = torch.tensor([p["probability"] for p in answer["predictions"]])
    torch.testing.assert_close(got, want[order], atol=2e-6, rtol=0)
    model = answer["model"]
    assert model["name"] == "tiny" and model["version"].startswith("sha256:") and model["precision"] == "fp32"
    assert model["input_size"] == [3, 16, 16] and answer["time_ms"] > 0


def test_multipart_file_field_and_top_k(served: Served) -> None:
    data = photo(2, fmt="JPEG")
    raw = post(served.url, data, "image/jpeg").json()["predictions"]
    form = requests.post(
        f"{served.url}/predict",
        files={"file": ("cat.jpg", data, "image/jpeg")},
        params={"top": 2},
        timeout=TIMEOUT,
    ).json()["predictions"]
    assert form == raw[:2]


def test_batch_endpoint_answers_each_image_in_order(served: Served, weights_dir: Path) -> None:
    images = [photo(3), b"not an image", photo(4, size=(30, 90))]
    files = [("files", (f"{i}.png", data, "image/png")) for i, data in enumerate(images)]
    results = requests.post(f"{served.url}/predict/batch", files=files, timeout=TIMEOUT).json()["results"]
    assert [r["file"] for r in results] == ["0.png", "1.png", "2.png"]
    assert results[1]["status"] == 400 and results[1]["error"].startswith("1.png: not an image")
    for result, data in zip([results[0], results[2]], [images[0], images[2]], strict=True):
        want = expected_probs(weights_dir, data)
        assert result["predictions"][0]["index"] == int(want.argmax())


def test_concurrent_requests_share_forward_passes_and_keep_their_own_answers(
    served: Served, weights_dir: Path
) -> None:
    images = [photo(10 + i) for i in range(8)]
    before = served.service.metrics.snapshot(0)["batches"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda data: post(served.url, data).json(), images))
    for data, answer in zip(images, answers, strict=True):
        want = expected_probs(weights_dir, data)
        got = {p["index"]: p["probability"] for p in answer["predictions"]}
        torch.testing.assert_close(torch.tensor([got[i] for i in range(3)]), want, atol=2e-6, rtol=0)
    metrics = requests.get(f"{served.url}/metrics", timeout=TIMEOUT).json()
    assert metrics["batches"] - before < 8  # some of the 8 images shared a forward pass
    assert max(int(size) for size in metrics["batch_sizes"]) > 1
    assert metrics["requests"]["/predict"]["200"] >= 8 and metrics["latency_ms"]["p99"] > 0


def test_decoders_resize_on_one_torch_thread_each_and_leave_the_model_s_threads(served: Served) -> None:
    threads = torch.get_num_threads()
    decoders = served.service.decoders
    assert {decoders.submit(torch.get_num_threads).result() for _ in range(4)} == {1}
    assert torch.get_num_threads() == threads


def test_the_model_thread_keeps_its_threads_after_a_decoder_took_one(weights_dir: Path) -> None:
    """torch sets a new thread's count from the last count set anywhere: a decoder's one must not become the
    model thread's."""
    model = load_served_model(str(weights_dir), device="cpu", precision="fp32")
    seen: list[int] = []
    opened = model.open_session

    @contextlib.contextmanager
    def recording(batch_size: int) -> Iterator[Session]:
        with opened(batch_size) as session:
            yield dataclasses.replace(
                session, probs=lambda x: seen.append(torch.get_num_threads()) or session.probs(x)
            )

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        service = Service(dataclasses.replace(model, open_session=recording), ServiceOptions())
        assert service.decoders.submit(torch.get_num_threads).result() == 1  # before the model thread starts
        service.batcher.start()
        assert service.batcher.submit(torch.zeros(model.input_size)).result(timeout=30).shape == (3,)
        service.batcher.stop(30)
        service.decoders.shutdown()
    finally:
        torch.set_num_threads(threads)
    assert seen and set(seen) == {2}


def test_health_ready_info_and_the_page(served: Served) -> None:
    assert requests.get(f"{served.url}/health", timeout=TIMEOUT).json() == {"status": "alive"}
    assert requests.get(f"{served.url}/ready", timeout=TIMEOUT).json()["ready"] is True
    info = requests.get(f"{served.url}/info", timeout=TIMEOUT).json()
    assert info["class_names"] == CLASSES and info["rollout"] is True
    page = requests.get(served.url, timeout=TIMEOUT)
    assert page.headers["content-type"].startswith("text/html") and 'id="classes"' in page.text


def test_rollout_is_a_distribution_over_the_patch_grid(served: Served) -> None:
    answer = post(served.url, photo(5), rollout="true").json()
    assert answer["rollout"]["grid"] == [4, 4]
    values = torch.tensor(answer["rollout"]["values"])
    assert values.shape == (16,) and (values >= 0).all() and abs(values.sum().item() - 1) < 1e-4


def truncated_jpeg() -> bytes:
    data = photo(6, size=(64, 64), fmt="JPEG")
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    ("body", "content_type", "status", "says"),
    [
        (b"hello, not an image", "image/png", 400, "request body: not an image vitkit can read"),
        (truncated_jpeg(), "image/jpeg", 400, "request body: cannot decode JPEG"),
        (b"", "image/png", 400, "empty request body"),
        (b'{"image": 1}', "application/json", 415, "content type 'application/json'"),
        (b"x" * (2**20 + 1), "image/png", 413, "above the limit of 1,048,576 bytes"),
    ],
    ids=["non-image", "truncated-jpeg", "empty", "wrong-content-type", "too-large"],
)
def test_bad_uploads_get_a_4xx_with_one_line_and_the_server_goes_on(
    served: Served, body: bytes, content_type: str, status: int, says: str
) -> None:
    response = post(served.url, body, content_type)
    assert response.status_code == status
    error = response.json()["error"]
    assert says in error and "\n" not in error
    assert post(served.url, photo(7)).status_code == 200


def test_a_decompression_bomb_is_refused_from_its_header(served: Served) -> None:
    from data.test_decode import png_bomb

    response = post(served.url, png_bomb(20000, 20000))
    assert response.status_code == 400
    assert "pixels, above the limit of 89,478,485" in response.json()["error"]


def test_a_chunked_body_is_cut_at_the_limit(served: Served) -> None:
    chunks = (b"y" * 65536 for _ in range(40))  # 2.5 MiB without a Content-Length
    response = requests.post(
        f"{served.url}/predict", data=chunks, headers={"Content-Type": "image/png"}, timeout=TIMEOUT
    )
    assert response.status_code == 413
    assert post(served.url, photo(8)).status_code == 200


def test_a_stalled_upload_gets_408_and_does_not_block_others(weights_dir: Path) -> None:
    model = load_served_model(str(weights_dir), device="cpu", precision="fp32")
    with running(model, ServiceOptions(read_timeout_s=0.5)) as s:
        host, port = s.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as slow:
            slow.sendall(
                b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 5000\r\n\r\nabc"
            )
            assert post(s.url, photo(9)).status_code == 200  # served while the slow upload waits
            reply = b""
            while b"KiB/s" not in reply and (chunk := slow.recv(4096)):  # headers and body may come apart
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 408") and b"arrived too slowly: 3 bytes" in reply
        assert b"within 0.5 s" in reply


class Blocking:
    """A served model whose forward passes wait for `release`: requests pile up as under load."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def model(self) -> ServedModel:
        def probs(x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] > 1 or x.abs().sum() > 0:  # the warm-up pass (zeros) goes through
                self.release.wait(TIMEOUT)
            return torch.full((x.shape[0], 3), 1 / 3)

        def open_session(batch_size: int):
            import contextlib

            return contextlib.nullcontext(Session(probs, None, "fp32", "test"))

        return ServedModel("blocking", "v", "test", "test", (3, 16, 16), 3, CLASSES, open_session)


def test_a_full_queue_answers_503_at_once_and_then_recovers() -> None:
    blocking = Blocking()
    with running(blocking.model(), ServiceOptions(max_queue=2, max_batch=1, max_wait_ms=0)) as s:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(post, s.url, photo(20 + i)) for i in range(2)]
            while s.service.admitted < 2:
                threading.Event().wait(0.01)
            refused = post(s.url, photo(30))
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
            assert "busy: 2 images in progress (limit 2)" in refused.json()["error"]
            blocking.release.set()
            assert [f.result(TIMEOUT).status_code for f in waiting] == [200, 200]
        assert post(s.url, photo(31)).status_code == 200


def test_bad_weights_and_a_busy_port_are_one_line_errors(
    weights_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", str(weights_dir / "missing")]) == 2
    assert "vitkit serve: error: " in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["serve", str(weights_dir), "--port", str(port), "--precision", "fp32"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error[-1].startswith("vitkit serve: error: ") and f"cannot listen on 127.0.0.1:{port}" in error[-1]


def test_more_connections_than_the_hard_file_limit_allows_is_one_line() -> None:
    import resource

    from vitkit.commands.serve import raise_file_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    with pytest.raises(ValueError, match=rf"--max-connections {hard} needs {hard + 128} open files, above"):
        raise_file_limit(hard)
    low = min(1024, hard - 200)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        raise_file_limit(low)  # within the hard limit: the soft one is raised as far as needed
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low + 128
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
