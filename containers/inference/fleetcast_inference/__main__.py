"""``python -m fleetcast_inference serve``: what SageMaker runs (the image's CMD is ``serve``)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType

from fleetcast_contracts.inference import LOG_LEVEL_ENV, MULTI_MODEL_ENV
from fleetcast_inference.server import InferenceServer
from fleetcast_inference.settings import InferenceSettings, SettingsError

logger = logging.getLogger("fleetcast_inference")


def serve(settings: InferenceSettings) -> None:
    server = InferenceServer(settings)

    def stop(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: stopping", signum)
        # shutdown() waits for serve_forever, which runs on this (the main) thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if not settings.multi_model:
        logger.warning("%s is not 'true': serving the multi-model API anyway", MULTI_MODEL_ENV)
    logger.info(
        "listening on %s:%d; models under %s; memory budget %.1f MiB",
        settings.host,
        server.port,
        settings.models_root,
        settings.memory_budget_bytes / 2**20,
    )
    with server:
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetcast_inference")
    parser.add_argument("command", choices=["serve"], help="start the multi-model endpoint server")
    parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get(LOG_LEVEL_ENV, "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = InferenceSettings.from_environ()
    except SettingsError as error:
        logger.error("cannot start: %s", error)
        return 2
    serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
