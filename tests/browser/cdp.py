"""Headless Chromium driven over the DevTools protocol, for checking pages as a browser shows them.

Chromium is Debian's package (``make tools`` installs it when missing). It is started with a fresh
profile, no network side traffic and ``--remote-debugging-port=0``; the port it picked is read from
the ``DevToolsActivePort`` file it writes into the profile. The page is then driven through one
WebSocket (aiohttp's client): console messages, uncaught exceptions and browser log entries (failed
loads, bad images) are collected from the moment the page starts loading.

Why the protocol rather than ``--dump-dom``: the DOM dump cannot say whether an image decoded or
what the console printed; the protocol reports both and takes the screenshot too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def chromium_binary() -> str:
    """The chromium on PATH; a clear failure (not a skip) when `make tools` has not installed it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError("chromium is not installed: run `make tools` (installs Debian's chromium package)")
    return found


@dataclass
class PageResult:
    """What the browser saw."""

    console: list[dict[str, Any]] = field(default_factory=list)
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)

    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and browser log errors, as text."""
        out = [
            f"console.{m.get('type')}: "
            + " ".join(str(a.get("value", a.get("description"))) for a in m.get("args", []))
            for m in self.console
            if m.get("type") in ("error", "warning", "assert")
        ]
        out += [f"exception: {e.get('exceptionDetails', {}).get('text')}" for e in self.exceptions]
        out += [
            f"log.{e['entry'].get('level')}: {e['entry'].get('text')}"
            for e in self.log
            if e["entry"].get("level") in ("error", "warning")
        ]
        return out


class Page:
    """One tab, driven over its DevTools WebSocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._waiters: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []
        self.result = PageResult()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    if "error" in data:
                        future.set_exception(RuntimeError(f"DevTools error: {data['error']}"))
                    else:
                        future.set_result(data.get("result", {}))
                continue
            method, params = data.get("method"), data.get("params", {})
            if method == "Runtime.consoleAPICalled":
                self.result.console.append(params)
            elif method == "Runtime.exceptionThrown":
                self.result.exceptions.append(params)
            elif method == "Log.entryAdded":
                self.result.log.append(params)
            for name, waiter in list(self._waiters):
                if name == method and not waiter.done():
                    waiter.set_result(params)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call one DevTools method and return its result."""
        message_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        await self._ws.send_str(json.dumps({"id": message_id, "method": method, "params": params}))
        return await asyncio.wait_for(future, timeout=60)

    async def goto(self, url: str) -> None:
        """Navigate and wait for the load event."""
        loaded: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append(("Page.loadEventFired", loaded))
        await self.send("Page.navigate", url=url)
        await asyncio.wait_for(loaded, timeout=60)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluation failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, width: int, height: int) -> bytes:
        """A PNG of the top ``width`` x ``height`` CSS pixels of the page."""
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = await self.send(
            "Page.captureScreenshot",
            format="png",
            clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        )
        return base64.b64decode(shot["data"])

    async def close(self) -> None:
        """Close the socket and stop reading."""
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


def _read_port(port_file: Path) -> int | None:
    try:
        first = port_file.read_text().splitlines()
    except FileNotFoundError:
        return None
    return int(first[0]) if first and first[0].strip() else None


@contextlib.asynccontextmanager
async def chromium_page() -> AsyncIterator[Page]:
    """A fresh headless Chromium with one page; the browser is stopped (by pid) on exit, even on failure."""
    binary = chromium_binary()
    profile = Path(tempfile.mkdtemp(prefix="flashrl-chromium-"))
    proc = await asyncio.create_subprocess_exec(
        binary,
        *FLAGS,
        f"--user-data-dir={profile}",
        "about:blank",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (port := await asyncio.to_thread(_read_port, profile / "DevToolsActivePort")) is None:
            if proc.returncode is not None:
                raise RuntimeError(f"chromium exited with status {proc.returncode} before listening")
            if time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port within 60 s")
            await asyncio.sleep(0.1)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            async with session.ws_connect(url, max_msg_size=0) as ws:
                page = Page(ws)
                try:
                    for domain in ("Page", "Runtime", "Log"):
                        await page.send(f"{domain}.enable")
                    yield page
                finally:
                    await page.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


#: What the report page looks like to the browser: every figure, whether its image decoded.
FIGURES_JS = """JSON.stringify({
  title: document.title,
  figures: Array.from(document.querySelectorAll('figure.plot')).map(f => {
    const img = f.querySelector('img');
    return {id: f.id, unavailable: f.classList.contains('unavailable'),
            img: img ? {complete: img.complete, width: img.naturalWidth, height: img.naturalHeight,
                        shown: img.getBoundingClientRect().width} : null,
            text: f.innerText};
  }),
  rows: Array.from(document.querySelectorAll('#summary tbody tr')).map(r => r.cells[0].innerText),
  headers: Array.from(document.querySelectorAll('#summary thead th')).map(th => th.innerText),
  cells: Array.from(document.querySelectorAll('#summary tbody tr'))
    .map(r => Array.from(r.cells).map(c => c.innerText)),
  swatches: Array.from(document.querySelectorAll('#summary tbody tr')).map(r => {
    const swatch = r.querySelector('.swatch');
    return swatch ? getComputedStyle(swatch).backgroundColor : null;
  }),
  goodput: Array.from(document.querySelectorAll('#goodput tbody tr')).map(r =>
    Array.from(r.cells).map(c => c.innerText)),
  goodputText: (document.querySelector('#goodput') || {innerText: ''}).innerText,
  paired: Array.from(document.querySelectorAll('#paired tbody tr[data-variant]')).map(r =>
    Array.from(r.cells).map(c => c.innerText)),
  pairedText: (document.querySelector('#paired') || {innerText: ''}).innerText,
  notes: Array.from(document.querySelectorAll('#notes li')).map(li => li.innerText),
  external: Array.from(document.querySelectorAll('[src],[href]'))
    .map(e => e.getAttribute('src') || e.getAttribute('href')).filter(u => !u.startsWith('data:')),
  scripts: document.scripts.length,
})"""


async def inspect_report(uri: str, *, screenshot: bool = False) -> tuple[dict[str, Any], PageResult, bytes]:
    """Open a report (a file: URI) in headless Chromium: what it shows, what the console said, and a
    1360x1500 screenshot of its top when asked for."""
    async with chromium_page() as page:
        await page.goto(uri)
        seen = json.loads(await page.evaluate(FIGURES_JS))
        shot = await page.screenshot(1360, 1500) if screenshot else b""
        return seen, page.result, shot
