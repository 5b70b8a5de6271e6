"""``agent-gym serve-retriever`` with a token, over HTTP: RemoteRetriever sends it; nobody else is served."""

from __future__ import annotations

import httpx
import pytest

from agent_gym.cli.serve_retriever import build_app
from agent_gym.envs.rag.corpus import load_corpus
from agent_gym.envs.rag.env import make_retriever
from agent_gym.envs.rag.remote import RemoteRetriever
from agent_gym.envs.rag.tasks import builtin_corpus_path
from agent_gym.errors import RetrieverError


@pytest.fixture(scope="module")
def retriever_server(serve_app):
    corpus = load_corpus(builtin_corpus_path())
    app = build_app(make_retriever("bm25", corpus, {}), corpus, max_batch=64, token="rag-token",
                    max_body_bytes=2**20)
    return serve_app(app)


def test_the_retriever_serves_only_its_tokens_holders(retriever_server, monkeypatch):
    url = retriever_server.url
    assert httpx.get(url + "/health").status_code == 200
    refused = httpx.post(url + "/retrieve", json={"queries": ["paris"], "topk": 1})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == 401
    big = httpx.post(url + "/retrieve", content=b'{"queries": ["' + b"a" * 2**20 + b'"]}',
                     headers={"Authorization": "Bearer rag-token"})
    assert big.status_code == 413 and big.json()["error"]["type"] == "RequestTooLargeError"
    assert RemoteRetriever(url + "/retrieve", token="rag-token").search("capital", 2)
    with pytest.raises(RetrieverError):
        RemoteRetriever(url + "/retrieve", token="wrong", retries=0).search("capital", 2)
    monkeypatch.setenv("AGENT_GYM_RETRIEVER_TOKEN", "rag-token")  # what an env given only the URL sends
    assert RemoteRetriever(url + "/retrieve").search("capital", 2)
