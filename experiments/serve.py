"""Serves a chat model on loopback behind an OpenAI-compatible API (workflows/serve.py).

    python -m experiments.serve --model=gguf:smollm2 [--port=8000 --name=smollm2-135m-instruct]
"""

from absl import flags

from data_pipelines import cli
from workflows import serve

_MODEL = flags.DEFINE_string("model", serve.SMOLLM2, "gguf:smollm2, a .gguf file, or a Hugging "
                             "Face model directory with a chat template.")
_NAME = flags.DEFINE_string("name", "smollm2-135m-instruct", "The model name clients ask for.")
_PORT = flags.DEFINE_integer("port", 8000, "Port on 127.0.0.1.", lower_bound=0)


def main(argv):
  del argv
  serve.serve(_MODEL.value, _NAME.value, _PORT.value)


if __name__ == "__main__":
  cli.run(main)
