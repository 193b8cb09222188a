"""Collapse diagnostics of Persuasion for Good dialogues: the persuaders' strategies, the
persuadees' donations against the humans', and the kinds of reply each persuadee reaches.

    python -m experiments.persuasion_diagnostics --output_dir=runs/p4g/diagnostics \
        --policies='start=runs/p4g/test/transcripts_persuader_bc_vs_persuadee_s1_*.jsonl,...' \
        --simulators='s0=runs/p4g/test/transcripts_persuader_bc_vs_persuadee_s0_seed1000_n102.jsonl,...'

--policies NAME=GLOB[+GLOB...]: the persuader turns of those transcripts
(experiments.evaluate_env output) are that policy's. Per policy: the entropy
(nats) of the strategy labels the classifier (cotraining/strategy_classifier.py,
trained here on the 300 annotated dialogues, its held-out accuracy reported)
gives its sentences, the labels used, and the commonest one. A collapsed
persuader uses few strategies.

--simulators NAME=GLOB[+GLOB...]: the persuadee turns are that simulator's;
give transcripts in which the same persuader met each simulator, so that rows
differ only by the simulator. Per simulator: the stated share, the mean stated
donation, KS and L1 of the stated donations against the real persuadees' of the
same personas; and behaviour-cluster coverage: `--per_simulator` utterances of
every simulator and of the real persuadees are embedded
(cotraining/sentence_embeddings.py), clustered together by k-means
(`--clusters`), and each simulator's coverage is the share of clusters (all, and
the humans') holding at least `--min_count` of its utterances. A collapsed
simulator covers few. The embedding is checked against chance on
`--check_sentences` annotated sentences: how often a sentence's nearest
neighbour carries its strategy label. Writes report.md and report.json.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any, Sequence

import numpy as np

from cotraining import diagnostics, sentence_embeddings, sharpness, strategy_classifier
from data_pipelines import cli
from data_pipelines.persuasion import loader
from domains.persuasion import environment as persuasion_env
from workflows import strategy_classifier as classifier_training

HUMAN = "human"
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
DONATION_BLOCK = re.compile(re.escape(loader.DONATION_OPEN) + ".*?" +
                            re.escape(loader.DONATION_CLOSE), re.S)


def parse_groups(spec: str, flag: str) -> dict[str, list[str]]:
  """'NAME=GLOB+GLOB,...' -> {NAME: sorted files}; a glob matching nothing is an error."""
  groups: dict[str, list[str]] = {}
  for item in filter(None, spec.split(",")):
    name, sep, patterns = item.partition("=")
    if not sep or not name or name in groups or name == HUMAN:
      raise cli.BadInput(f"{flag}: {item!r} is not NAME=GLOB[+GLOB] with a new name "
                         f"(not {HUMAN!r})")
    files = []
    for pattern in patterns.split("+"):
      matched = sorted(glob.glob(pattern))
      if not matched:
        raise cli.BadInput(f"{flag}: {pattern!r} ({name}) matches no file")
      files += matched
    groups[name] = files
  return groups


def read_transcripts(files: Sequence[str]) -> list[dict[str, Any]]:
  records = []
  for path in files:
    with open(path, encoding="utf-8") as f:
      for number, line in enumerate(f, 1):
        try:
          record = json.loads(line)
          key, turns = sharpness.transcript_turns(record)
        except (ValueError, KeyError, TypeError) as e:
          raise cli.BadInput(f"{path}:{number}: not a transcript line ({e})") from e
        records.append({"key": key, "turns": turns, "info": record.get("info", {})})
  return records


def sentences(text: str) -> list[str]:
  return [s for s in SENTENCE_END.split(DONATION_BLOCK.sub(" ", text).strip()) if s]


def strategy_row(classifier, texts: Sequence[str]) -> dict[str, Any]:
  """The strategy labels of `texts`' sentences: entropy, labels used, the commonest."""
  split = [s for t in texts for s in sentences(t)]
  labels = list(classifier.predict(split)) if split else []
  values, counts = np.unique(labels, return_counts=True) if labels else ([], np.zeros(0))
  top = int(np.argmax(counts)) if len(counts) else None
  return {"sentences": len(split), "label_entropy": diagnostics.label_entropy(labels),
          "labels_used": len(values),
          "top_label": None if top is None else str(values[top]),
          "top_share": float("nan") if top is None else float(counts[top] / counts.sum())}


def donation_row(records: Sequence[dict[str, Any]], human_by_key: dict[str, float]
                 ) -> dict[str, Any]:
  """Stated donations (as the reward reads them: clipped to [0, 2] dollars) against the real
  persuadees' of the same personas."""
  stated = [r for r in records if r["info"].get("donation") is not None]
  missing = [r["key"] for r in records if r["key"] not in human_by_key]
  if missing:
    raise cli.BadInput(f"transcript key {missing[0]!r} names no held-out persona (seed:index "
                       f"of the 'eval' split)")
  donations = [float(r["info"]["donation"]) for r in stated]
  humans = [human_by_key[r["key"]] for r in records]
  return {"dialogues": len(records), "stated_share": len(stated) / max(len(records), 1),
          "mean_stated": float(np.mean(donations)) if donations else float("nan"),
          "human_mean": float(np.mean(humans)),
          **diagnostics.donation_distances(donations, humans)}


def persuadee_utterances(records: Sequence[dict[str, Any]]) -> list[str]:
  """Every persuadee turn with its donation block removed; a turn that was only the statement
  is not an utterance here (the donation columns hold it)."""
  texts = [DONATION_BLOCK.sub(" ", t.text).strip() for r in records for t in r["turns"]
           if t.speaker == persuasion_env.PERSUADEE]
  return [t for t in texts if t]


def coverage(utterances: dict[str, list[str]], embed, *, per_simulator: int, clusters: int,
             min_count: int, seed: int) -> dict[str, dict[str, float]]:
  """Per group: its coverage of all clusters and of the humans' (module docstring)."""
  rng = np.random.default_rng(seed)
  picked = {name: [texts[i] for i in sorted(rng.choice(len(texts), min(per_simulator, len(texts)),
                                                        replace=False))]
            for name, texts in utterances.items()}
  names = [name for name, texts in picked.items() for _ in texts]
  vectors_NxD = embed([t for texts in picked.values() for t in texts])
  vectors_NxD = vectors_NxD - vectors_NxD.mean(axis=0)  # Decoder states share one direction.
  vectors_NxD /= np.maximum(np.linalg.norm(vectors_NxD, axis=1, keepdims=True), 1e-6)
  labels_N = diagnostics.behaviour_clusters(vectors_NxD, clusters, seed)
  by_name = {name: labels_N[np.asarray(names) == name].tolist() for name in picked}
  overall = diagnostics.cluster_coverage(by_name, min_count)
  human_clusters = {c for c in set(by_name[HUMAN]) if by_name[HUMAN].count(c) >= min_count}
  out = {}
  for name, labels in by_name.items():
    reached = {c for c in set(labels) if labels.count(c) >= min_count}
    out[name] = {"utterances": len(labels), "coverage": overall[name],
                 "human_coverage": len(reached & human_clusters) / max(len(human_clusters), 1),
                 "cluster_entropy": diagnostics.label_entropy(labels)}
  return out


def nearest_neighbour_agreement(vectors_NxD: np.ndarray, labels: Sequence[str]) -> float:
  """Leave-one-out: the share of rows whose most cosine-similar other row has the same label."""
  unit_NxD = vectors_NxD / np.maximum(np.linalg.norm(vectors_NxD, axis=1, keepdims=True), 1e-9)
  similarity_NxN = unit_NxD @ unit_NxD.T
  np.fill_diagonal(similarity_NxN, -np.inf)
  labels = np.asarray(labels)
  return float(np.mean(labels[similarity_NxN.argmax(axis=1)] == labels))


def check_embeddings(embed, texts: Sequence[str], labels: Sequence[str]) -> dict[str, float]:
  """Do the embeddings group sentences by what they do? 1-NN strategy-label agreement for
  `embed` (centred, as coverage uses it), for hashed word n-gram counts, and chance."""
  vectors_NxD = embed(texts)
  counts_NxF = np.zeros((len(texts), strategy_classifier.NUM_FEATURES), np.float32)
  for i, text in enumerate(texts):
    np.add.at(counts_NxF[i], strategy_classifier.features(text), 1.0)
  _, shares = np.unique(labels, return_counts=True)
  return {"sentences": len(texts),
          "embedding": nearest_neighbour_agreement(vectors_NxD - vectors_NxD.mean(0), labels),
          "ngram_counts": nearest_neighbour_agreement(counts_NxF, labels),
          "chance": float(np.sum((shares / shares.sum()) ** 2))}


def _f(x: float, digits: int = 3) -> str:
  return "–" if x != x else f"{x:.{digits}f}"


def to_markdown(report: dict[str, Any]) -> str:
  c = report["classifier"]
  lines = [f"Strategy classifier: {c['accuracy']:.3f} held-out accuracy on {c['test_sentences']} "
           f"sentences, {c['labels']} labels (majority {c['majority_accuracy']:.3f}).", "",
           "| persuader | sentences | strategy entropy (nats) | labels used | commonest (share) |",
           "|---|---:|---:|---:|---|"]
  for name, row in report["policies"].items():
    lines.append(f"| {name} | {row['sentences']} | {_f(row['label_entropy'])} | "
                 f"{row['labels_used']} | {row['top_label']} ({_f(row['top_share'], 2)}) |")
  e = report["embedding_check"]
  lines += ["", f"Embedding check ({e['sentences']} annotated persuadee sentences): nearest "
            f"neighbour shares the strategy label {e['embedding']:.3f} (hashed n-gram counts "
            f"{e['ngram_counts']:.3f}, chance {e['chance']:.3f})."]
  lines += ["", "| persuadee | dialogues | stated | mean stated $ | real persuadees' mean $ | KS | "
            "L1 | utterances | coverage (all) | coverage (human clusters) | cluster entropy |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for name, cov in report["coverage"].items():
    d = report["simulators"].get(name)
    donation = ("| – " * 6 if d is None else
                f"| {d['dialogues']} | {_f(d['stated_share'], 2)} | {_f(d['mean_stated'], 2)} | "
                f"{_f(d['human_mean'], 2)} | {_f(d['ks'])} | {_f(d['l1'])} ")
    lines.append(f"| {name} {donation}| {cov['utterances']} | {_f(cov['coverage'], 2)} | "
                 f"{_f(cov['human_coverage'], 2)} | {_f(cov['cluster_entropy'], 2)} |")
  return "\n".join(lines) + "\n"


def run(output_dir: str, policy_globs: str = "", simulator_globs: str = "", *, data_dir: str = "",
        seed: int = 1000, per_simulator: int = 400, clusters: int = 24,
        check_sentences: int = 800, min_count: int = 3) -> dict[str, Any]:
  """experiments.persuasion_diagnostics: checks its input (cli.BadInput), writes report.json and
  report.md into `output_dir`; returns the report. The globs are NAME=GLOB[+GLOB],... strings
  (module docstring)."""
  policies = parse_groups(policy_globs, "--policies")
  simulators = parse_groups(simulator_globs, "--simulators")
  os.makedirs(cli.output_dir(output_dir, "--output_dir"), exist_ok=True)
  env = persuasion_env.PersuasionEnv.from_corpus("eval", data_dir or None)
  classifier, classifier_metrics = classifier_training.train_and_evaluate(
      persuasion_env.PERSUADER, 0.2, 0, data_dir or None)
  held_out = env.dialogues
  policy_rows = {HUMAN: strategy_row(classifier, [t.text for d in held_out for t in d.turns
                                                  if t.speaker == persuasion_env.PERSUADER])}
  for name, files in policies.items():
    policy_rows[name] = strategy_row(classifier, [
        t.text for r in read_transcripts(files) for t in r["turns"]
        if t.speaker == persuasion_env.PERSUADER])
  records = {name: read_transcripts(files) for name, files in simulators.items()}
  largest = max((int(r["key"].split(":")[1]) for rs in records.values() for r in rs), default=-1)
  human_by_key = {s.scenario_id: s.donation for s in env.sample(seed, largest + 1)}
  simulator_rows = {name: donation_row(rs, human_by_key) for name, rs in records.items()}
  utterances = {HUMAN: [t.text for d in held_out for t in d.turns
                        if t.speaker == persuasion_env.PERSUADEE]}
  utterances.update({name: persuadee_utterances(rs) for name, rs in records.items()})
  embed = sentence_embeddings.smollm2_embedder()
  annotated = [r for r in loader.load_strategy_labels(data_dir or None)
               if r.speaker == persuasion_env.PERSUADEE]
  annotated = [annotated[i] for i in sorted(np.random.default_rng(seed).choice(
      len(annotated), min(check_sentences, len(annotated)), replace=False))]
  report = {"classifier": classifier_metrics, "policies": policy_rows,
            "simulators": simulator_rows,
            "embedding_check": check_embeddings(embed, [r.text for r in annotated],
                                                [r.labels[0] for r in annotated]),
            "coverage": coverage(utterances, embed,
                                 per_simulator=per_simulator, clusters=clusters,
                                 min_count=min_count, seed=seed),
            "settings": {"per_simulator": per_simulator, "clusters": clusters,
                         "min_count": min_count, "seed": seed,
                         "policies": policies, "simulators": simulators}}
  with open(os.path.join(output_dir, "report.json"), "w") as out:
    json.dump(report, out, indent=1)
  markdown = to_markdown(report)
  with open(os.path.join(output_dir, "report.md"), "w") as out:
    out.write(markdown)
  print(markdown)
  return report

