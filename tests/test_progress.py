"""``paw_gym.progress``: plain progress lines outside a terminal, none silent for long."""

from __future__ import annotations

import io
import time

import pytest

from paw_gym.progress import progress_bar


def test_a_log_file_gets_plain_lines_at_each_tenth_and_at_close():
    stream = io.StringIO()
    bar = progress_bar(total=100, desc="rollout", unit="episode", file=stream)
    for _ in range(100):
        bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in stream.getvalue()
    assert lines[0].startswith("rollout: 10/100 episode (") and lines[-1].startswith(
        "rollout: 100/100 episode (")


def test_a_slow_phase_prints_before_its_next_tenth():
    """A step every 0.06 s with a 0.05 s interval: each step prints, though 1 of 1000 steps is
    far from a tenth."""
    stream = io.StringIO()
    bar = progress_bar(total=1000, desc="update", file=stream, min_interval=0.05)
    for _ in range(3):
        time.sleep(0.06)
        bar.update(1)
    bar.close()
    shown = [line.split(" (")[0] for line in stream.getvalue().splitlines()]
    assert {"update: 1/1000 it", "update: 2/1000 it", "update: 3/1000 it"} <= set(shown)


def test_a_phase_without_updates_still_prints_a_line_and_stops_at_close():
    stream = io.StringIO()
    bar = progress_bar(total=48, desc="rollout", unit="episode", file=stream, min_interval=0.3)
    bar.set_postfix(step=2)
    time.sleep(1.6)  # no episode finished yet (a batched rollout)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert 1 <= len(lines) - 1 and all(line.startswith("rollout: 0/48 episode (")
                                       and line.endswith(", step=2)") for line in lines)
    time.sleep(0.7)
    assert stream.getvalue().splitlines() == lines  # closed: no more lines


def test_a_heartbeat_bar_prints_only_after_silence():
    """``progress="heartbeat"`` (a phase whose end another line reports): no line at tenths or at
    close, one line once ``min_interval`` passed without one."""
    stream = io.StringIO()
    bar = progress_bar(total=10, desc="update", file=stream, min_interval=0.3,
                       progress="heartbeat")
    for _ in range(10):
        bar.update(1)
    assert stream.getvalue() == ""
    time.sleep(0.8)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines and all(line.startswith("update: 10/10 it (") for line in lines)
    quiet = io.StringIO()
    progress_bar(total=10, desc="update", file=quiet, progress=False).update(10)
    assert quiet.getvalue() == ""


def test_a_progress_setting_outside_the_three_is_refused():
    import pytest

    with pytest.raises(ValueError, match=r"progress='yes': use True, False or 'heartbeat'"):
        progress_bar(total=1, progress="yes")


def test_a_batched_rollouts_lines_show_the_tokens_sampled_while_no_episode_ends(
        tiny_model_dir):
    """A real policy decoding inside a bar: while no episode has finished (the count stays 0),
    each line gives the tokens sampled since the bar began, growing from line to line."""
    import threading

    from agents.hf_policy import HFPolicy

    policy = HFPolicy(str(tiny_model_dir), device="cpu", seed=0)
    stream = io.StringIO()
    bar = progress_bar(total=8, desc="rollout", unit="episode", file=stream, min_interval=0.2,
                       progress="heartbeat")
    stop = threading.Event()

    def decode():
        while not stop.is_set():
            policy.act(["guess a number"] * 8, temperature=1.0, max_new_tokens=16, stop=())

    worker = threading.Thread(target=decode)
    worker.start()
    time.sleep(1.5)
    stop.set()
    worker.join()
    bar.close()
    sampled = [int(line.split(" s, ")[1].split(" tokens")[0].replace(",", ""))
               for line in stream.getvalue().splitlines() if " tokens sampled" in line]
    assert all(line.startswith("rollout: 0/8 episode (")
               for line in stream.getvalue().splitlines())
    assert len(sampled) >= 2 and sampled == sorted(sampled) and sampled[-1] > sampled[0] > 0


def test_a_training_pass_moves_the_line_by_the_tokens_it_runs_and_leaves_the_numbers_alone(
        tiny_model_dir):
    """training.models.count_layer_passes: a forward pass of a [2, 5] batch adds 10 tokens
    forward (each layer its share), its backward 10 backward, a no-grad pass nothing backward;
    the hooked model's logits and gradients are the unhooked model's bit for bit; a bar's line
    gives the tokens while no row is done."""
    import copy

    import torch

    from agents.hf_policy import HFPolicy
    from paw_gym.progress import passed_tokens
    from training.models import count_layer_passes

    model = HFPolicy(str(tiny_model_dir), device="cpu", seed=0).model
    plain = copy.deepcopy(model)
    count_layer_passes(model)
    count_layer_passes(model)  # once per model: a second call adds no hooks
    ids = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    stream = io.StringIO()
    bar = progress_bar(total=2, desc="SFT", unit="row", file=stream, progress="heartbeat")
    before = passed_tokens()
    logits = model(input_ids=ids).logits
    middle = passed_tokens()
    logits.float().logsumexp(-1).sum().backward()
    after = passed_tokens()
    with torch.no_grad():
        model(input_ids=ids)
    last = passed_tokens()
    bar._print()
    bar.close()
    assert middle[0] - before[0] == pytest.approx(10) and middle[1] == before[1]
    assert after[1] - middle[1] == pytest.approx(10)
    assert last[0] - after[0] == pytest.approx(10) and last[1] == after[1]
    assert stream.getvalue().startswith("SFT: 0/2 row (") and \
        "20 tokens forward, 10 backward" in stream.getvalue()
    reference = plain(input_ids=ids).logits
    reference.float().logsumexp(-1).sum().backward()
    assert torch.equal(logits, reference)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), plain.parameters())
               if a.grad is not None)
