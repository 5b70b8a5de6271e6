import json
import socket
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from agent_gym.envs.rag import RAGEnv, RemoteRetriever
from agent_gym.errors import RetrieverError

POLICY = textwrap.dedent('''
    import json

    class SearchThenGuess:
        """Searches with the question (for questions about births only), then answers."""

        def _next(self, messages):
            if messages[-1]["role"] == "user" and "born" in messages[-1]["content"]:
                call = {"name": "search", "arguments": {"query": messages[-1]["content"], "k": 3}}
                return "<tool_call>" + json.dumps(call) + "</tool_call>"
            return "<answer>unknown</answer>"

        def act(self, messages, *, session_id, tools=None):
            return self._next(messages)

        async def aact(self, messages, *, session_id, tools=None):
            return self._next(messages)

        def close_session(self, session_id):
            pass
''')
ROLLOUT = POLICY + textwrap.dedent('''
    import sys
    from agent_gym import collect
    from agent_gym.envs.rag import RAGEnv
    url, tasks = sys.argv[1], json.loads(sys.argv[2])
    trajectories = collect(lambda: RAGEnv(tasks=tasks, retriever=url), SearchThenGuess(), tasks=tasks, n_parallel=4)
    print(json.dumps([str(t.status.value if hasattr(t.status, "value") else t.status) for t in trajectories]))
''')
namespace: dict = {}
exec(POLICY, namespace)
SearchThenGuess = namespace["SearchThenGuess"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(small_corpus_file, rag_cache):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agent_gym", "serve-retriever", "--corpus", str(small_corpus_file),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"retrieval server did not start: {proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    yield proc, url
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def test_protocol_and_bad_requests(server, small_records):
    _, url = server
    body = httpx.post(url + "/retrieve", json={"queries": [small_records[0]["title"], ""], "topk": 2,
                                               "return_scores": True}).json()
    first = body["result"][0][0]
    assert first["document"]["id"] == small_records[0]["id"] and isinstance(first["score"], float)
    assert first["document"]["contents"].startswith(f'"{small_records[0]["title"]}"\n') and body["result"][1] == []
    plain = httpx.post(url + "/retrieve", json={"queries": [small_records[0]["title"]], "topk": 1}).json()
    assert set(plain["result"][0][0]) >= {"id", "contents"}
    for bad in ({"queries": "x" * 0, "topk": 0}, {"queries": [1], "topk": 1}, {"queries": ["x"], "topk": 10**6}, [1]):
        assert httpx.post(url + "/retrieve", json=bad).status_code == 400
    assert httpx.post(url + "/retrieve", content=b"\xff\x00").status_code == 400
    docs = httpx.post(url + "/documents", json={"ids": [small_records[1]["id"], "nope"]}).json()["documents"]
    assert docs[0]["text"] == small_records[1]["text"] and docs[1] is None


def test_env_through_the_server_matches_the_local_index(server, small_corpus_file, small_tasks):
    _, url = server
    remote = RAGEnv(tasks=small_tasks, retriever=url + "/retrieve")
    local = RAGEnv(tasks=small_tasks, corpus=str(small_corpus_file))
    for task in small_tasks:
        for env in (remote, local):
            env.reset(seed=0, options={"task": task})
        while True:
            action = local.oracle_action()
            out_r, out_l = remote.step(action), local.step(action)
            assert out_r[0] == out_l[0] and out_r[1] == out_l[1]
            if out_l[2] or out_l[3]:
                assert out_r[4]["gold_retrieved"] is out_l[4]["gold_retrieved"] is True
                break
    remote.close()


def test_two_rollout_processes_share_one_server_and_a_dead_server_is_env_error(server, small_tasks):
    proc, url = server
    born = [t for t in small_tasks if "born" in t["question"]]
    other = [t for t in small_tasks if "born" not in t["question"]]
    assert born and other
    tasks = json.dumps(born + other)
    before = httpx.get(url + "/health").json()["queries"]
    rollouts = [subprocess.Popen([sys.executable, "-c", ROLLOUT, url + "/retrieve", tasks], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for rollout in rollouts:
        out, err = rollout.communicate(timeout=300)
        assert rollout.returncode == 0, err[-2000:]
        assert json.loads(out.strip().splitlines()[-1]) == ["ENV_DONE"] * (len(born) + len(other))
    assert httpx.get(url + "/health").json()["queries"] - before == 2 * len(born)

    proc.kill()
    proc.wait(timeout=10)
    from agent_gym import collect

    retriever_url = url + "/retrieve"
    trajectories = collect(lambda: RAGEnv(tasks=born + other, retriever=retriever_url,
                                          retriever_options={"retries": 1, "backoff": 0.01, "timeout": 2}),
                           SearchThenGuess(), tasks=born + other, n_parallel=4)
    statuses = [str(getattr(t.status, "value", t.status)) for t in trajectories]
    assert statuses == ["ENV_ERROR"] * len(born) + ["ENV_DONE"] * len(other)  # only the episodes that searched
    failed = trajectories[0]
    assert retriever_url in json.dumps(failed.steps[-1].info, default=str)


def test_remote_retriever_errors_name_the_server():
    port = _free_port()
    url = f"http://127.0.0.1:{port}/retrieve"
    remote = RemoteRetriever(url, retries=1, backoff=0.01, timeout=1)
    with pytest.raises(RetrieverError, match=f"retrieval server {url} is unavailable after 2 attempts") as info:
        remote.search("anything", 3)
    assert info.value.server == url
    with pytest.raises(ValueError, match="http"):
        RemoteRetriever("localhost:8000")
