"""Serves a chat model behind an OpenAI-compatible API, batching concurrent requests
(workflows/serve.py).

    python -m experiments.serve --model=gguf:smollm2 [--port=8000 --name=smollm2-135m-instruct]
    # Binds 127.0.0.1 unless --host names another address (e.g. --host=0.0.0.0); with
    # --api_key_file, only requests bearing its key are answered (the openai client's api_key).
"""

from absl import flags

from data_pipelines import cli
from workflows import http_serving, serve

_MODEL = flags.DEFINE_string("model", serve.SMOLLM2, "gguf:smollm2, a .gguf file, or a Hugging "
                             "Face model directory with a chat template.")
_NAME = flags.DEFINE_string("name", "smollm2-135m-instruct", "The model name clients ask for.")
_HOST = flags.DEFINE_string("host", http_serving.LOOPBACK,
                            "Address to bind; loopback unless named.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to bind (0: any free one).", lower_bound=0)
_MAX_BATCH = flags.DEFINE_integer("max_batch", serve.BATCHER_DEFAULTS["max_batch"],
                                  "Most requests decoded in one batch (1: one at a time).",
                                  lower_bound=1)
_WAIT_MS = flags.DEFINE_float("wait_ms", 1000 * serve.BATCHER_DEFAULTS["wait_s"],
                              "How long a batch waits for more requests to arrive.",
                              lower_bound=0)
_API_KEY_FILE = flags.DEFINE_string("api_key_file", "", "A file holding the key every request "
                                   "must bear (Authorization: Bearer KEY); '' = none.")


def main(argv):
  del argv
  serve.serve(_MODEL.value, _NAME.value, _HOST.value, _PORT.value,
              {"max_batch": _MAX_BATCH.value, "wait_s": _WAIT_MS.value / 1000}, _API_KEY_FILE.value)


if __name__ == "__main__":
  cli.run(main)
