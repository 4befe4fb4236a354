"""The guide docs/guide/reasoning.md: its examples run as written and build what the text says."""

from __future__ import annotations

import pathlib
import re

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "guide" / "reasoning.md"


def test_the_guides_examples_run_and_play_their_protocols():
    blocks = re.findall(r"^<!-- run by tests/test_qa_docs\.py -->\n```python\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    assert len(blocks) == 2
    own: dict = {}
    exec(compile(blocks[0], "own dataset", "exec"), own)
    env = own["env"]
    env.reset(options={"task_index": 1})
    env.step({"agent_0": "<answer>Lima</answer>"})
    _, rewards, _, _, _ = env.step({"agent_1": "I agree. <answer>lima</answer>"})
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0}
    gym: dict = {}
    exec(compile(blocks[1], "reasoning-gym", "exec"), gym)
    env = gym["env"]
    assert env.num_turns == 2 and env.num_tasks == 500
    assert 2 <= env.source[0]["metadata"]["num_terms"] <= 3
