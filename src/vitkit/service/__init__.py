"""`vitkit serve`: a model behind an HTTP API with dynamic batching, and a page to try it (FastAPI on uvicorn).

FastAPI and uvicorn come with the extra `serve`; `vitkit.service` imports them.
"""

from vitkit.service.app import ServiceOptions, asgi_app, create_app
from vitkit.service.served_model import ServedModel, load_served_model

__all__ = ["ServedModel", "ServiceOptions", "asgi_app", "create_app", "load_served_model"]
