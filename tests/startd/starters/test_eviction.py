"""The eviction deadlines as a pure step function: no Redis, no processes."""

from __future__ import annotations

from fetchwork.startd.starters.eviction import Deadlines, Effect, Kill, Released, Tick, Vacate, step


def tick(has_starter: bool = True, vacating: bool = True, killing_timeout_s: float = 30.0) -> Tick:
    return Tick(has_starter=has_starter, vacating=vacating, killing_timeout_s=killing_timeout_s)


def test_vacate_sends_vacate_and_sets_the_vacate_deadline():
    state, effects = step(Deadlines(), Vacate(max_vacate_s=600.0), now=100.0)
    assert effects == (Effect.SEND_VACATE,)
    assert state == Deadlines(vacate_at=700.0)
    assert state.next_at() == 700.0


def test_nothing_happens_before_the_vacate_deadline():
    state = Deadlines(vacate_at=700.0)
    assert step(state, tick(), now=699.9) == (state, ())


def test_a_vacate_that_takes_too_long_turns_into_a_kill():
    state, effects = step(Deadlines(vacate_at=700.0), tick(killing_timeout_s=30.0), now=700.0)
    assert effects == (Effect.VACATE_TIMED_OUT, Effect.SEND_KILL)
    assert state == Deadlines(kill_at=730.0)


def test_the_vacate_deadline_is_dropped_when_the_slot_no_longer_vacates():
    state, effects = step(Deadlines(vacate_at=700.0), tick(vacating=False), now=701.0)
    assert effects == ()
    assert state == Deadlines()


def test_kill_sets_the_kill_deadline_and_forgets_the_vacate_one():
    state, effects = step(Deadlines(vacate_at=700.0), Kill(killing_timeout_s=5.0), now=100.0)
    assert effects == (Effect.SEND_KILL,)
    assert state == Deadlines(kill_at=105.0)


def test_a_starter_that_outlives_the_kill_deadline_gets_sigkill_once():
    state, effects = step(Deadlines(kill_at=105.0), tick(vacating=False), now=105.0)
    assert effects == (Effect.KILL_STARTER,)
    assert state == Deadlines()
    assert step(state, tick(vacating=False), now=200.0) == (Deadlines(), ())


def test_no_sigkill_when_the_starter_is_gone():
    assert step(Deadlines(kill_at=105.0), tick(has_starter=False), now=106.0) == (Deadlines(), ())


def test_a_zero_killing_timeout_kills_in_the_same_step():
    state, effects = step(Deadlines(vacate_at=10.0), tick(killing_timeout_s=0.0), now=10.0)
    assert effects == (Effect.VACATE_TIMED_OUT, Effect.SEND_KILL, Effect.KILL_STARTER)
    assert state == Deadlines()


def test_release_clears_every_deadline():
    state, effects = step(Deadlines(vacate_at=1.0, kill_at=2.0), Released(), now=0.0)
    assert (state, effects) == (Deadlines(), ())
    assert state.next_at() is None
