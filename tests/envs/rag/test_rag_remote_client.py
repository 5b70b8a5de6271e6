"""RemoteRetriever's HTTP client against a minimal standard-library server (no index needed)."""

import http.server
import json
import threading

import pytest

from agent_gym.envs.rag import RemoteRetriever
from agent_gym.errors import RetrieverError


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - the standard library's name
        state = self.server.state
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with state["lock"]:
            state["requests"] += 1
            state["connections"].add(self.client_address)
            fail = state["fail"] > 0
            state["fail"] -= fail
        if fail:
            status, body = 503, b'{"error": "busy"}'
        elif self.path == "/retrieve":
            result = [[{"document": {"id": f"d-{q}", "contents": f'"T {q}"\nabout {q}'}, "score": 2.5}]
                      for q in payload["queries"]]
            status, body = 200, json.dumps({"result": result}).encode()
        else:
            status, body = 404, b"{}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        # Drops the connection after each answer without saying so, as a server's idle timeout would.
        self.close_connection = state["drop"]


@pytest.fixture
def fake_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.state = {"lock": threading.Lock(), "requests": 0, "connections": set(), "fail": 0, "drop": False}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}/retrieve"
    server.shutdown()
    server.server_close()


def test_one_keep_alive_connection_per_thread(fake_server):
    server, url = fake_server
    remote = RemoteRetriever(url)
    found: list = []

    def client(i):
        for j in range(5):
            found.append(remote.search(f"q{i}-{j}", 3)[0])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 20 and server.state["requests"] == 20
    assert len(server.state["connections"]) == 4
    hit = found[0]
    assert hit.doc_id.startswith("d-q") and hit.title.startswith("T q") and hit.score == 2.5
    assert remote.document(hit.doc_id).text.startswith("about q")  # remembered from the result
    remote.close()
    assert remote.search("again", 1)[0].doc_id == "d-again"  # a closed client opens a new connection


def test_a_connection_closed_by_the_server_is_reopened_without_a_retry(fake_server):
    server, url = fake_server
    server.state["drop"] = True
    remote = RemoteRetriever(url, retries=0)
    assert [remote.search(f"q{i}", 1)[0].doc_id for i in range(3)] == ["d-q0", "d-q1", "d-q2"]
    assert server.state["requests"] == 3 and len(server.state["connections"]) == 3


def test_5xx_answers_are_retried_then_reported_with_the_server(fake_server):
    server, url = fake_server
    server.state["fail"] = 1
    remote = RemoteRetriever(url, retries=1, backoff=0.01)
    assert remote.search("q", 1)[0].doc_id == "d-q" and server.state["requests"] == 2
    server.state["fail"] = 5
    with pytest.raises(RetrieverError, match=rf"retrieval server {url} is unavailable after 2 attempts \(HTTP 503"):
        remote.search("q", 1)
    server.state["fail"] = 0
    assert remote.document("unknown") is None  # /documents answers 404: the server has no such endpoint
