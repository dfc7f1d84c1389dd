import pytest

from hindsight_server.domain.query import QueryFocus, focus

DIALOGUE = (
    '<Bart>:"我今天拿到了数学考试的满分！"\n'
    '<Assistant>:"哇，那真是太棒了！"\n'
    '<Bart>: "你觉得我应该怎么庆祝一下呢？"\n'
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "When did Caroline go to the support group?",
            QueryFocus("When did Caroline go to the support group?"),
        ),
        ("靠窗", QueryFocus("靠窗")),
        (
            DIALOGUE,
            QueryFocus(
                "我今天拿到了数学考试的满分！\n你觉得我应该怎么庆祝一下呢？",
                ("我今天拿到了数学考试的满分！", "你觉得我应该怎么庆祝一下呢？"),
            ),
        ),
        (
            "User: book the room for Friday\nAssistant: Which building?\nUser: building A",
            QueryFocus("book the room for Friday\nbuilding A", ("book the room for Friday", "building A")),
        ),
        ("用户：以后都订靠窗的位置\n助手：好的，已记住", QueryFocus("以后都订靠窗的位置")),
        # a single "Name: text" line is an ordinary query, not a dialogue
        ("Note: the meeting moved to Friday", QueryFocus("Note: the meeting moved to Friday")),
        # only the assistant spoke: keep the text as it is
        (
            "Assistant: hello\nAssistant: anything else?",
            QueryFocus("Assistant: hello\nAssistant: anything else?"),
        ),
    ],
)
def test_focus(query: str, expected: QueryFocus) -> None:
    assert focus(query) == expected


def test_a_long_dialogue_embeds_only_its_latest_user_turns() -> None:
    query = "\n".join(f"U: turn {index}\nAssistant: ok" for index in range(700))
    focused = focus(query)
    assert focused.turns == tuple(f"turn {index}" for index in range(692, 700))
    assert focused.turns_left_out == 692
    assert focused.text.startswith("turn 0\nturn 1\n")  # the whole text still holds every user turn
