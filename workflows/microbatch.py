"""Concurrent requests into one batched call: a server's requests meet on one worker thread.

A web server answers many clients at once, but a learned model decodes best
as one batch. `MicroBatcher` takes each request (a group key and an item),
waits `wait_s` for others to arrive, then calls `fn(key, items)` once per
group on its single worker thread (so JAX runs on one thread, and requests
of different groups, e.g. study arms, never mix in a batch). Callers get a
`concurrent.futures.Future`, or await `call`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time
from typing import Any, Callable, Hashable, Sequence

BatchFn = Callable[[Hashable, Sequence[Any]], Sequence[Any]]


class MicroBatcher:
  """Groups waiting requests by key and answers each group with one `fn(key, items)`.

  `fn` returns one result per item, in order; an exception fails that group's
  requests only. At most `max_batch` items of a group go into one call.
  """

  def __init__(self, fn: BatchFn, *, max_batch: int = 32, wait_s: float = 0.005,
               name: str = "microbatch"):
    if max_batch < 1 or wait_s < 0:
      raise ValueError(f"MicroBatcher: max_batch={max_batch} >= 1 and wait_s={wait_s} >= 0")
    self._fn, self.max_batch, self.wait_s = fn, max_batch, wait_s
    self._pending: collections.OrderedDict[Hashable, list[tuple[Any, concurrent.futures.Future]]]
    self._pending = collections.OrderedDict()
    self._cv = threading.Condition()
    self._closed = False
    self.batch_sizes: list[int] = []  # Items per call, for measuring how well requests batch.
    self._thread = threading.Thread(target=self._run, name=name, daemon=True)
    self._thread.start()

  def submit(self, key: Hashable, item: Any) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    with self._cv:
      if self._closed:
        raise RuntimeError("MicroBatcher: closed")
      self._pending.setdefault(key, []).append((item, future))
      self._cv.notify()
    return future

  async def call(self, key: Hashable, item: Any) -> Any:
    """`submit` for an event loop: awaits the item's result without blocking the loop."""
    return await asyncio.wrap_future(self.submit(key, item))

  def close(self) -> None:
    with self._cv:
      self._closed = True
      self._cv.notify()
    self._thread.join()

  def _take(self) -> tuple[Hashable, list[tuple[Any, concurrent.futures.Future]]] | None:
    with self._cv:
      while not self._pending and not self._closed:
        self._cv.wait()
      if not self._pending:
        return None
    if self.wait_s:
      time.sleep(self.wait_s)  # Let the requests of this moment arrive.
    with self._cv:
      key, queue = next(iter(self._pending.items()))
      group, rest = queue[:self.max_batch], queue[self.max_batch:]
      if rest:
        self._pending[key] = rest
        self._pending.move_to_end(key)  # Other groups go next: no group starves.
      else:
        del self._pending[key]
      return key, group

  def _run(self) -> None:
    while (taken := self._take()) is not None:
      key, group = taken
      items = [item for item, _ in group]
      self.batch_sizes.append(len(items))
      try:
        results = list(self._fn(key, items))
        if len(results) != len(items):
          raise ValueError(f"MicroBatcher: {len(results)} results for {len(items)} items")
      except BaseException as error:  # noqa: BLE001 (handed to every waiting caller)
        for _, future in group:
          future.set_exception(error)
        continue
      for (_, future), result in zip(group, results):
        future.set_result(result)
