import json
import subprocess
import sys

import pytest

from agent_gym.envs.rag import Corpus, builtin_corpus_path, builtin_tasks, load_corpus, load_tasks
from agent_gym.envs.rag.tasks import DATA_DIR
from agent_gym.envs.rag.world import write_world
from agent_gym.errors import CorpusError, MissingExtraError


def test_jsonl_corpus_and_broken_line_names_file_and_line(tmp_path):
    good = tmp_path / "c.jsonl"
    good.write_text('{"id": "a", "title": "A", "text": "alpha"}\n\n{"id": 2, "title": "B", "text": "beta"}\n')
    corpus = load_corpus(good)
    assert [d.id for d in corpus] == ["a", "2"] and corpus["2"].text == "beta" and "a" in corpus
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "title": "A", "text": "alpha"}\n{"id": "b", "title": \n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: expected a JSON object per line"):
        load_corpus(bad)
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"id": "a", "title": "A"}\n')
    with pytest.raises(CorpusError, match=r"missing\.jsonl:1: expected keys .*missing \['text'\]"):
        load_corpus(missing)
    with pytest.raises(CorpusError, match="unique document ids"):
        load_corpus([{"id": "x", "text": "1"}, {"id": "x", "text": "2"}])
    with pytest.raises(CorpusError, match="at least one document"):
        load_corpus([])
    with pytest.raises(CorpusError, match="cannot read"):
        load_corpus(tmp_path / "nope.jsonl")
    with pytest.raises(TypeError, match="expected a JSONL path"):
        load_corpus(42)


def test_search_r1_contents_and_fingerprint():
    corpus = Corpus.from_records([{"id": "1", "contents": '"Kelmar"\nKelmar is a city.'}])
    assert corpus["1"].title == "Kelmar" and corpus["1"].text == "Kelmar is a city."
    assert corpus["1"].contents == '"Kelmar"\nKelmar is a city.'
    same = Corpus.from_records([{"id": "1", "title": "Kelmar", "text": "Kelmar is a city."}])
    other = Corpus.from_records([{"id": "1", "title": "Kelmar", "text": "Kelmar is a town."}])
    assert corpus.fingerprint == same.fingerprint != other.fingerprint


def test_question_loaders_for_common_formats(tmp_path):
    corpus = Corpus.from_records([{"id": "d1", "title": "Kelmar", "text": "x"},
                                  {"id": "d2", "title": "Osk", "text": "y"}])
    r1 = load_tasks([{"id": "q", "question": "Where?", "golden_answers": ["Kelmar", "kelmar city"]}])
    assert r1[0]["ground_truth"] == "Kelmar" and r1[0]["aliases"] == ["Kelmar", "kelmar city"]
    verl = load_tasks([{"question": "Q?", "reward_model": {"ground_truth": {"target": ["A"]}}}])
    assert verl[0]["ground_truth"] == "A"
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([{"_id": "h1", "question": "Which?", "answer": "Osk",
                                 "supporting_facts": [["Kelmar", 0], ["Osk", 1], ["Nowhere", 0]]}]))
    hotpot = load_tasks(path, corpus)
    assert hotpot[0]["id"] == "h1" and hotpot[0]["gold_ids"] == ["d1", "d2"]
    assert hotpot[0]["gold_titles"] == ["Kelmar", "Osk", "Nowhere"]
    hf = load_tasks([{"id": "h", "question": "Q?", "answer": "A",
                      "supporting_facts": {"title": ["Osk"], "sent_id": [0]}}], corpus)
    assert hf[0]["gold_ids"] == ["d2"]
    with pytest.raises(CorpusError, match=r"tasks\[0\]: expected a task with 'ground_truth'"):
        load_tasks([{"question": "Q?"}])
    broken = tmp_path / "t.jsonl"
    broken.write_text('{"id": 1, "question": "Q?", "ground_truth": "A"}\nnot json\n')
    with pytest.raises(CorpusError, match=r"t\.jsonl:2"):
        load_tasks(broken)


def test_shipped_data_sizes_types_and_support():
    corpus = load_corpus(builtin_corpus_path())
    tasks = builtin_tasks()
    assert len(corpus) >= 2000 and len(tasks) >= 500
    kinds = {t["type"] for t in tasks}
    assert kinds == {"single_hop", "two_hop", "comparison", "date"}
    assert len({t["id"] for t in tasks}) == len(tasks)
    from agent_gym.grading import qa_normalize

    for task in tasks:
        assert task["gold_ids"] and all(g in corpus for g in task["gold_ids"])
        answer = qa_normalize(task["ground_truth"])
        texts = [qa_normalize(corpus[g].title + " " + corpus[g].text) for g in task["gold_ids"]]
        assert any(answer in text for text in texts), task  # every answer is stated by a gold document
        if task["type"] != "comparison":
            assert answer not in qa_normalize(task["question"]), task
        if task["type"] == "two_hop":
            first, second = task["hops"]
            assert answer not in qa_normalize(corpus[first["doc_id"]].text), task  # needs the second document
            assert corpus[second["doc_id"]].title in second["query"]  # the first answer is the second query
            assert corpus[second["doc_id"]].title in corpus[first["doc_id"]].text


def test_generation_is_reproducible(tmp_path):
    corpus_path, questions_path = write_world(tmp_path)
    assert corpus_path.read_bytes() == (DATA_DIR / "corpus.jsonl").read_bytes()
    assert questions_path.read_bytes() == (DATA_DIR / "questions.jsonl").read_bytes()


def test_missing_extra_names_agent_gym_rag(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)
    from agent_gym.envs.rag.retrieval import BM25Retriever

    with pytest.raises(MissingExtraError, match=r"agent-gym\[rag\]"):
        BM25Retriever(Corpus.from_records([{"id": "a", "text": "x"}]))
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    from agent_gym.envs.rag.dense import load_embedder

    monkeypatch.setattr("agent_gym.envs.rag.dense._MODELS", {})
    with pytest.raises(MissingExtraError, match=r"agent-gym\[rag\]"):
        load_embedder("some/model")


def test_world_cli_writes_files(tmp_path):
    out = subprocess.run([sys.executable, "-m", "agent_gym.envs.rag.world", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "corpus.jsonl").stat().st_size > 100_000
