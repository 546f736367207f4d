"""Headless Chromium driven over the DevTools protocol (aiohttp's websocket client), for UI tests.

No browser package: Debian's ``chromium`` (``/usr/bin/chromium``) started with
``--remote-debugging-port``; tests skip, saying why, where it is not installed.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

#: Flags for a closed network: without the background ones, Chromium keeps trying to reach Google.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--autoplay-policy=no-user-gesture-required", "--mute-audio", "--window-size=1400,900"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One tab: ``evaluate`` JavaScript (awaiting promises), ``navigate``, ``screenshot``."""

    def __init__(self, websocket: Any) -> None:
        self.websocket = websocket
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.websocket.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads((await self.websocket.receive()).data)
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    async def navigate(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 60) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.25)
        raise TimeoutError(f"not true within {timeout_s} s: {expression}")

    async def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode((await self.call("Page.captureScreenshot", format="png"))["data"]))


async def _with_page(script: Any) -> Any:
    import aiohttp

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(  # noqa: ASYNC220 - started once, before the page is awaited
            [chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            port = None
            for line in process.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
                if match := re.search(r"ws://127\.0\.0\.1:(\d+)/", line):
                    port = match.group(1)
                    break
            assert port is not None, "Chromium printed no DevTools address"
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json") as response:
                    targets = await response.json()
                page_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
                async with session.ws_connect(page_url, max_msg_size=0) as websocket:
                    page = Page(websocket)
                    await page.call("Page.enable")
                    return await script(page)
        finally:
            os.killpg(process.pid, signal.SIGTERM)  # the browser and its helper processes
            process.wait(timeout=30)
            process.stderr.close()


def run_in_chromium(script: Any) -> Any:
    """Run ``async script(page)`` in a fresh headless Chromium; return its result."""
    return asyncio.run(_with_page(script))
