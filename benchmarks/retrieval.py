"""Retrieval benchmark: index build time, query latency, and the retrieval server's throughput.

Rows: BM25 on the shipped 2,024-document corpus and on a synthetic 100k-document corpus,
dense (offline all-MiniLM-L6-v2) on the shipped corpus, and the retrieval server
(``agent-gym serve-retriever``, a separate process) queried by 16 client threads through
``RemoteRetriever`` (one query per request, as RAG-v0 episodes search), compared in the same
run with the same retriever in process, queried by one thread and by 16 threads, plus the
CPU time per query on the client side (this process) and the server side (its process).
Every index is built in a fresh cache folder, so build times include tokenising/embedding.
Also prints the retrieval quality on the shipped questions (recall@1/@5, oracle path success).

    python benchmarks/retrieval.py [--queries 400] [--synthetic 100000] [--skip-dense]
    python benchmarks/retrieval.py --dense-only --torch-threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q))


def latencies(retriever, queries, k=5):
    out = []
    for query in queries:
        start = time.perf_counter()
        retriever.search(query, k)
        out.append(time.perf_counter() - start)
    return out


def synthetic_corpus(path: Path, n: int, seed: int = 0) -> list[str]:
    """n documents of 40-120 words drawn from a Zipf-like vocabulary of 60k made-up words."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(60000)]
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    weights /= weights.sum()
    with path.open("w") as handle:
        for i in range(n):
            words = rng.choice(len(vocab), size=int(rng.integers(40, 120)), p=weights)
            text = " ".join(vocab[w] for w in words)
            title = f"{vocab[words[0]]} {vocab[words[1]]}"
            handle.write(json.dumps({"id": f"s{i}", "title": title, "text": text}) + "\n")
    queries = []
    for _ in range(2000):
        words = rng.choice(len(vocab), size=int(rng.integers(2, 6)), p=weights)
        queries.append(" ".join(vocab[w] for w in words))
    return queries


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (Linux /proc; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def concurrent(search, queries: list[str], clients: int, k: int = 5) -> float:
    """Seconds for ``clients`` threads to run every query once through ``search(query, k)``."""
    todo = list(queries)
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                if not todo:
                    return
                query = todo.pop()
            search(query, k)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def start_server(corpus_path: Path, cache: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "AGENT_GYM_CACHE": cache}
    proc = subprocess.Popen([sys.executable, "-m", "agent_gym", "serve-retriever", "--corpus", str(corpus_path),
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
                if reply.status == 200:
                    return proc, f"http://127.0.0.1:{port}/retrieve"
        except OSError:
            time.sleep(0.2)
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("retrieval server did not start")


def server_vs_in_process(local, corpus_path: Path, cache: str, queries: list[str], clients: int) -> dict:
    """Queries/s in process (1 thread; ``clients`` threads) and through the server (``clients`` threads,
    each a :class:`RemoteRetriever` call of one query per request), runs interleaved, medians of 3;
    plus the CPU per query of the benchmark process and of the server process during the server runs."""
    from agent_gym.envs.rag import RemoteRetriever

    proc, url = start_server(corpus_path, cache)
    try:
        remote = RemoteRetriever(url)
        concurrent(remote.search, queries[:200], clients)  # warm-up: connections, first batches
        concurrent(local.search, queries[:200], clients)
        one, many, served, client_cpu, server_cpu = [], [], [], [], []
        for _ in range(3):
            start = time.perf_counter()
            for query in queries:
                local.search(query, 5)
            one.append(len(queries) / (time.perf_counter() - start))
            many.append(len(queries) / concurrent(local.search, queries, clients))
            cpu, server = time.process_time(), process_cpu(proc.pid)
            served.append(len(queries) / concurrent(remote.search, queries, clients))
            client_cpu.append((time.process_time() - cpu) / len(queries))
            server_cpu.append((process_cpu(proc.pid) - server) / len(queries))
        remote.close()
        with urllib.request.urlopen(url.rsplit("/", 1)[0] + "/health", timeout=10) as reply:
            health = json.loads(reply.read())
        return {"one": statistics.median(one), "many": statistics.median(many), "served": statistics.median(served),
                "client_us": statistics.median(client_cpu) * 1e6, "server_us": statistics.median(server_cpu) * 1e6,
                "per_batch": health["queries"] / max(health["batches"], 1)}
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--synthetic", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--skip-dense", action="store_true")
    parser.add_argument("--dense-only", action="store_true", help="only the dense row (and its quality)")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads before dense")
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)

    cache = tempfile.mkdtemp(prefix="agent-gym-bench-")
    os.environ["AGENT_GYM_CACHE"] = cache
    from agent_gym.envs.rag import builtin_corpus_path, builtin_tasks, load_corpus, make_retriever
    from agent_gym.envs.rag.evaluation import path_success, recall_at_k

    corpus = load_corpus(builtin_corpus_path())
    tasks = builtin_tasks()
    questions = [t["question"] for t in tasks][: args.queries]
    rows = []

    def measure(name, kind, corp, queries, retriever_options=None):
        start = time.perf_counter()
        retriever = make_retriever(kind, corp, retriever_options)
        build = time.perf_counter() - start
        latencies(retriever, queries[:20])  # warm-up
        lat = latencies(retriever, queries)
        rows.append((name, build, statistics.median(lat) * 1e3, percentile(lat, 99) * 1e3, 1 / statistics.mean(lat)))
        print(f"{name}: build {build:.2f} s, median {rows[-1][2]:.2f} ms, p99 {rows[-1][3]:.2f} ms", flush=True)
        return retriever

    retrievers = {}
    if not args.dense_only:
        retrievers["bm25"] = measure("BM25, 2,024 docs", "bm25", corpus, questions)
        synthetic_path = Path(cache) / "synthetic.jsonl"
        synthetic_queries = synthetic_corpus(synthetic_path, args.synthetic)
        big = load_corpus(synthetic_path)
        big_retriever = measure(f"BM25, {args.synthetic:,} docs (synthetic)", "bm25", big,
                                synthetic_queries[: args.queries])
    if not args.skip_dense:
        threads = f", {args.torch_threads} torch thread(s)" if args.torch_threads else ""
        retrievers["dense"] = measure(f"dense MiniLM, 2,024 docs{threads}", "dense", corpus, questions)
        retrievers["hybrid"] = make_retriever("hybrid", corpus)

    print("\n| retriever | index build | median query | p99 query | in-process queries/s |")
    print("|---|---|---|---|---|")
    for name, build, median, p99, qps in rows:
        print(f"| {name} | {build:.2f} s | {median:.2f} ms | {p99:.2f} ms | {qps:.0f} |")

    if args.dense_only:
        rows.clear()
    print(f"\nServer vs in process, BM25, {args.clients} client threads (RemoteRetriever, one query per request),"
          " runs interleaved, medians of 3:")
    print("| corpus | in process, 1 thread | in process, 16 threads | server | server / 1 thread | server / 16 threads "
          "| CPU per query: client side | server side | in process | queries per server batch "
          "| in-process CPU per query, batches of 8 without snippets |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    servers = [] if args.dense_only else [
        ("2,024 docs", builtin_corpus_path(), questions * 3, retrievers["bm25"]),
        (f"{args.synthetic:,} docs", synthetic_path, synthetic_queries[:1000], big_retriever),
    ]
    for label, path, queries, local in servers:
        cpu = time.process_time()
        for query in queries:
            local.search(query, 5)
        local_us = (time.process_time() - cpu) / len(queries) * 1e6
        cpu = time.process_time()
        for start in range(0, len(queries), 8):  # as the server calls it: ~8 queries per batch at 16 clients
            local.search_batch(queries[start:start + 8], 5, snippets=False)
        batch_us = (time.process_time() - cpu) / len(queries) * 1e6
        r = server_vs_in_process(local, Path(path), cache, queries, args.clients)
        print(f"| {label} | {r['one']:.0f} q/s | {r['many']:.0f} q/s | {r['served']:.0f} q/s | "
              f"{r['served'] / r['one']:.2f} | {r['served'] / r['many']:.2f} | {r['client_us']:.0f} µs | "
              f"{r['server_us']:.0f} µs | {local_us:.0f} µs | {r['per_batch']:.1f} | {batch_us:.0f} µs |", flush=True)

    single = [t for t in tasks if t["type"] == "single_hop"]
    two_hop = [t for t in tasks if t["type"] == "two_hop"]
    print("\n| retriever | recall@1 (single-hop) | recall@5 (single-hop) | oracle two-hop path success (k=5) |")
    print("|---|---|---|---|")
    for name, retriever in retrievers.items():
        recall = recall_at_k(retriever, single, ks=(1, 5))
        print(f"| {name} | {recall[1]:.3f} | {recall[5]:.3f} | {path_success(retriever, two_hop):.3f} |", flush=True)


if __name__ == "__main__":
    main()
