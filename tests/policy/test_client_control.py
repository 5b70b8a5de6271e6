"""VLLMClient's RL control routes (vLLM dev mode): pause, resume, is_paused, weight version labels, clear failures."""

from __future__ import annotations

import asyncio
import socket

import pytest

from agent_gym.errors import ServerError
from agent_gym.policy import VLLMClient


@pytest.fixture(scope="module")
def dev_server(start_server, qwen_tokenizer):
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_SERVER_DEV_MODE", "1")
    try:
        yield str(start_server(fake_tokens=4))
    finally:
        mp.undo()


def test_pause_resume_and_weight_version_labels(dev_server):
    client = VLLMClient([f"http://{dev_server}/v1"])

    async def main() -> list:
        seen = [await client.is_paused(dev_server)]
        await client.pause(dev_server, "keep")
        seen.append(await client.is_paused(dev_server))
        await client.resume(dev_server)
        seen.append(await client.is_paused(dev_server))
        await client.set_weight_version(dev_server, 7)
        seen.append(await client.weight_version(dev_server))
        await client.aclose()
        return seen

    assert asyncio.run(main()) == [False, True, False, "7"]
    assert client.control_url(dev_server, "/pause") == f"http://{dev_server}/pause"  # the base URL, without /v1


def test_an_unreachable_server_is_a_server_error_naming_the_failure(dev_server):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    client = VLLMClient([dev_server])

    async def main() -> None:
        try:
            await client.pause(dead, timeout=5)  # any address, not only the client's servers
        finally:
            await client.aclose()

    with pytest.raises(ServerError, match=f"POST http://{dead}/pause: ConnectError"):
        asyncio.run(main())
