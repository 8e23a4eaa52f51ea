"""A scripted dialogue as a scored trajectory: fixed agent turns, the human's replies to them and a
final answer, with the chat-template token ids the rollout driver would build for them
(components/episodes/tokens.py), so the critic and actor read it as they read a sampled one.

For scored demonstrations (components/tasks/elicitation/demonstrations.py) and the tests' controlled
worlds. Nothing was sampled, so every response log-prob is recorded as 0.0.
"""

from __future__ import annotations

from typing import Sequence

from components.data.model_prepare import EOS_TOKEN
from components.data.records import Trajectory, Turn
from components.episodes.tokens import DialogueTokens


def scripted_trajectory(
    tokenizer, task_id: str, index: int, opening: Sequence[str], actions: Sequence[str], replies: Sequence[str],
    answer: str, score: float, sample: int,
) -> Trajectory:  # fmt: skip
    """A trajectory of `actions` (each answered by its reply), then `answer`, with `score`: its turns
    carry the chat-template token ids the rollout driver would build from (system, request) `opening`."""
    tokens = DialogueTokens(tokenizer)
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    messages = [{"role": "system", "content": opening[0]}, {"role": "user", "content": opening[1]}]
    prompt = tokens.start(messages)
    turns = []
    for k, (action, reply) in enumerate(zip([*actions, answer], [*replies, None])):
        response = tokenizer.encode(action, add_special_tokens=False) + [eos]
        turns.append(
            Turn(
                index=k,
                action=action,
                prompt_ids=prompt,
                response_ids=response,
                response_logprobs=[0.0] * len(response),
                observation=reply,
            )
        )
        messages.append({"role": "assistant", "content": action})
        if reply is not None:
            messages.append({"role": "user", "content": reply})
            prompt, _ = tokens.extend(prompt + response, messages)
    return Trajectory(
        task_id=task_id,
        task_index=index,
        run_seed=0,
        sample=sample,
        seed=sample,
        messages=messages,
        turns=turns,
        answer=answer,
        answered=True,
        score=score,
        passed=int(score == 1.0),
        total=1,
        success=score == 1.0,
    )
