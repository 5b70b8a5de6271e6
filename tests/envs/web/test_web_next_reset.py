"""ResetPredictor: the next reset's task from a hint, the generator's next draw or the same task again (no browser)."""

from __future__ import annotations

import copy

from gymnasium.utils import seeding
from web_helpers import task

from agent_gym.env.tasks import validate_task
from agent_gym.envs.web.next_reset import ResetPredictor, task_of_reset

TASKS = [task(page, seed) for page in ("click-button", "enter-text") for seed in range(4)]


def _validate(tasks):
    """What WebEnv's checks need here: task dicts with a page (the env's own checks are tested with the env)."""
    checked = [validate_task(t) for t in tasks]
    if any("page" not in t or "seed" not in t for t in checked):
        raise ValueError("tasks[0]: expected 'page' and 'seed'")
    return checked


def _predict(predictor, current, rng, *, drew=False, unseeded=False):
    return predictor.predict(current, tasks=TASKS, np_random=rng, validate=_validate, owner="WebEnv", drew=drew,
                             unseeded=unseeded)


def test_task_of_reset_is_the_task_the_reset_runs_and_leaves_the_generator_alone():
    rng = seeding.np_random(3)[0]
    state = copy.deepcopy(rng.bit_generator.state)
    assert task_of_reset(TASKS, 7, None, rng, _validate) == TASKS[int(seeding.np_random(7)[0].integers(len(TASKS)))]
    assert task_of_reset(TASKS, None, None, rng, _validate) == TASKS[int(copy.deepcopy(rng).integers(len(TASKS)))]
    assert task_of_reset(TASKS, 7, {"task_index": 2}, rng, _validate) == TASKS[2]
    assert task_of_reset(TASKS, None, {"task": TASKS[5]}, rng, _validate) == TASKS[5]
    assert task_of_reset(TASKS, None, {"task": {"page": "x"}}, rng, _validate) is None
    assert task_of_reset(TASKS, None, {"task_index": 99}, rng, _validate) is None
    assert rng.bit_generator.state == state


def test_the_guess_order_hint_then_draw_then_the_same_task():
    predictor, rng = ResetPredictor(), seeding.np_random(0)[0]
    predictor.expect(5, {"task": TASKS[6]})
    assert _predict(predictor, TASKS[0], rng) == (TASKS[6], True, "hint")
    assert _predict(predictor, TASKS[0], rng) == (TASKS[0], True, "same")  # a hint serves one guess
    predictor.expect(None, {"task": {"page": "x"}})  # invalid: ignored
    assert _predict(predictor, TASKS[1], rng, drew=True, unseeded=True)[2] == "draw"
    assert _predict(predictor, TASKS[1], rng, drew=True, unseeded=False)[2] == "same"  # the same seed again
    assert _predict(predictor, TASKS[2], rng, drew=True, unseeded=False)[2] == "draw"  # a new seed: seed once


def test_page_only_guesses_load_the_page_until_one_is_exact():
    predictor, rng = ResetPredictor(), seeding.np_random(0)[0]
    starts = []
    for current in (TASKS[0], TASKS[1], TASKS[2], TASKS[3], TASKS[3], TASKS[4], TASKS[5]):
        predictor.score(current)
        starts.append(_predict(predictor, current, rng)[1])
    # exact guesses start; after two page-only misses (1, 2) the page is only loaded; exact again (3): started;
    # another page (4) changes nothing
    assert starts == [True, True, False, False, True, True, True]
