"""A job function for rq workers in the benchmarks: when did it start?"""

import time


def stamp() -> float:
    return time.time()
