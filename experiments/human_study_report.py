"""A human study's results per arm (workflows/study/report.py), and its dialogues as data
(workflows/study/export.py).

    python -m experiments.human_study_report --workdir=DIR [--out=DIR/report --kind=all \
        --export_jsonl=PATH --export_official=DIR]

Writes report.md, report.json and report.png into --out (default DIR/report); with
--export_jsonl the finished dialogues as Dialogue JSON lines, with --export_official
(AirDialogue) as the official data.json + kb.json.
"""

from absl import flags

from data_pipelines import cli
from workflows.study import export, report

_WORKDIR = flags.DEFINE_string("workdir", None, "The study's workdir (experiments.human_study).",
                               required=True)
_OUT = flags.DEFINE_string("out", "", "Where the report goes ('' = WORKDIR/report).")
_KIND = flags.DEFINE_enum("kind", "all", list(report.KINDS), "Which participants: everyone, "
                          "people only (not marked a bot) or bots only.")
_EXPORT_JSONL = flags.DEFINE_string("export_jsonl", "", "Also write the finished dialogues "
                                    "here as Dialogue JSON lines.")
_EXPORT_OFFICIAL = flags.DEFINE_string("export_official", "", "AirDialogue: also write them "
                                       "into this directory as data.json + kb.json.")


def main(argv):
  del argv
  export.check_outputs(_EXPORT_JSONL.value, _EXPORT_OFFICIAL.value)
  report.run(_WORKDIR.value, out=_OUT.value, kind=_KIND.value)
  if _EXPORT_JSONL.value or _EXPORT_OFFICIAL.value:
    written = export.run(_WORKDIR.value, jsonl=_EXPORT_JSONL.value,
                         official_dir=_EXPORT_OFFICIAL.value)
    print(", ".join(f"{name}: {n} dialogues" for name, n in written.items()))


if __name__ == "__main__":
  cli.run(main)
