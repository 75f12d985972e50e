"""The prepare hook: run before the job, its output merged into the job ad.

HTCondor's starter runs `<Keyword>_HOOK_PREPARE_JOB` with the job ad and
the slot ad on stdin and waits for it: a non-zero exit means the job does
not run; what it prints is merged into the job ad. The starter serves
control requests meanwhile, so a stop request ends the wait (and kills a
program hook); an in-process hook's timeout and cancellation are watched by
the starter's own loop, so no hook thread is woken for them.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from typing import TYPE_CHECKING

from fetchwork.config import keywords
from fetchwork.config.ads import join_pair, join_texts, parse_ad
from fetchwork.errors import AdError
from fetchwork.hooks.runner import HookResult, resolve_hook, start_hook
from fetchwork.starter.events import LineReader

if TYPE_CHECKING:
    from fetchwork.starter.starter import Starter


def prepare(starter: Starter) -> str | None:
    """Run the prepare hook and merge its output; the failure reason or None.

    Control requests are served meanwhile; a stop request kills the hook
    (no job will run, so there is nothing to prepare).
    """
    spec = resolve_hook(starter.config, starter.keyword, keywords.PREPARE_JOB)
    if spec is None:
        starter.events.emit("prepared")
        return None
    starter._write_ads(spec)
    done_read, done_write = os.pipe()
    cancel = threading.Event()
    box: list[HookResult] = []

    def finished(result: HookResult) -> None:
        box.append(result)
        os.write(done_write, b"x")  # the last use of the pipe: the loop below ends on it

    deadline = time.monotonic() + spec.timeout_s
    # An in-process hook's timeout and cancellation are watched by this loop
    # (no hook thread is woken for it); a program's by the thread running it.
    call = start_hook(spec, _hook_input(starter), env=starter._hook_env(), cwd=starter.sandbox,
                      user=starter.user, on_done=finished, cancel=cancel, watched=False)
    if starter.status.how is not None:  # asked to stop before the hook even started
        cancel.set()
    selector = starter._selector
    selector.register(done_read, selectors.EVENT_READ, "done")
    try:
        # Blocked until the hook's thread wrote: a loop on `box` alone would
        # spin, holding the GIL that thread needs to finish.
        done = False
        while not done:
            wait_s = None if call is None else max(0.0, deadline - time.monotonic())
            for key, _ in selector.select(wait_s):
                if isinstance(key.data, LineReader):
                    starter._serve(selector, key.data)
                done = done or key.data == "done"
            if starter.status.how is not None:
                cancel.set()
            if call is not None:
                call.settle(deadline, cancel)
    finally:
        selector.unregister(done_read)
        os.close(done_read)
        os.close(done_write)
    result = box[0]
    if not result.ok:
        return f"the prepare hook failed: {result.outcome()}"
    if result.stdout.strip():
        try:
            starter.ad.update(parse_ad(result.stdout, "prepare hook output"))
        except AdError as exc:
            return f"the prepare hook printed bad output: {exc}"
        starter._write_ads()
    starter.events.emit("prepared")
    return None


def _hook_input(starter: Starter) -> str:
    """Job ad, `-----`, slot ad. The prepare hook is the first to see the ads,
    before anything here changed them: the texts they were read from serve."""
    if starter._as_read is None:
        return join_pair(starter.ad, starter.slot_ad)
    job_text, slot_text = starter._as_read
    starter._as_read = None
    return join_texts(job_text, slot_text)
