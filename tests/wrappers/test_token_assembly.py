import pytest

from agent_gym.wrappers.token_assembly import TokenAssembler


def test_prefix_consistent_turns_form_one_segment():
    asm = TokenAssembler()
    asm.add_turn(0, [1, 2, 3], [10, 11], [-1.0, -2.0])
    assert asm.add_turn(1, [1, 2, 3, 10, 11, 20, 21], [12], [-3.0]) is False
    (seg,) = asm.segments()
    assert seg.prompt_tokens.tolist() == [1, 2, 3]
    assert seg.response_tokens.tolist() == [10, 11, 20, 21, 12]
    assert seg.response_masks.tolist() == [1, 1, 0, 0, 1]
    assert seg.response_logprobs.tolist() == [-1.0, -2.0, 0.0, 0.0, -3.0]
    assert (seg.first_step, seg.last_step) == (0, 1)
    assert asm.prefix_breaks == 0


def test_prefix_break_starts_new_segment():
    asm = TokenAssembler()
    asm.add_turn(0, [1, 2], [3], None)
    assert asm.add_turn(1, [1, 9, 3, 4], [5], None) is True
    first, second = asm.segments()
    assert first.response_tokens.tolist() == [3]
    assert second.prompt_tokens.tolist() == [1, 9, 3, 4]
    assert second.response_masks.tolist() == [1]
    assert (second.first_step, second.last_step) == (1, 1)
    assert asm.prefix_breaks == 1


def test_shorter_prompt_breaks_prefix():
    asm = TokenAssembler()
    asm.add_turn(0, [1, 2], [3, 4], None)
    assert asm.add_turn(1, [1, 2, 3], [5], None) is True


def test_only_the_prefix_decides():
    asm = TokenAssembler()
    asm.add_turn(0, [1], [2], None)
    with pytest.raises(TypeError):
        asm.add_turn(1, [1, 2, 3], [4], None, force_new_segment=True)
    assert asm.add_turn(1, [1, 2, 3], [4], None) is False
    assert asm.add_turn(2, [1, 2, 3, 4, 5], [6], None) is False
    assert asm.add_turn(3, [1, 2, 3, 4, 5, 7], [8], None) is True
    assert [len(s.response_tokens) for s in asm.segments()] == [5, 1]
    assert asm.prefix_breaks == 1


def test_logprob_count_checked():
    with pytest.raises(ValueError, match="expected 2 values"):
        TokenAssembler().add_turn(0, [1], [2, 3], [0.0])
