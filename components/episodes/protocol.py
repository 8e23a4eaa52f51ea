"""The ColBench backend episode protocol (ALGORITHMS.md, "Episode protocol"): prompts and parsing.

The agent sees only the problem description. Each turn it either asks the human a question or
answers; an answer carries the marker `I WANT TO ANSWER:` followed by the code. At most
`max_turns` (10) agent turns; with no answer by then, the last agent message is the answer. The
simulated human sees the description, the hidden information and the dialogue, answers only from
the hidden information in at most two sentences, and its reply is cut to 400 characters.

Departures, documented: the official prompt re-renders the whole dialogue as one text each turn;
we keep it as a chat (system, then alternating user/assistant messages) so the turn-t prompt
extends the turn-(t-1) token ids and vLLM's prefix cache is reused. The marker is accepted
anywhere in the message (small models often write a preamble); what follows the first marker is
the answer. Prompts are our own wording of the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

ANSWER_MARKER = "I WANT TO ANSWER:"

AGENT_SYSTEM_PROMPT = (
    "You are a programming assistant collaborating with a human who wants a Python function. "
    "Their request may leave out details that only they know. You may ask them one clarifying "
    "question per message, and you have at most {max_turns} messages in total. As soon as you "
    "know enough, reply with '" + ANSWER_MARKER + "' followed by the complete Python function "
    "and nothing else. Keep the function signature the human gave."
)

SIMULATOR_SYSTEM_PROMPT = (
    "You are a human who asked a programming assistant to write a Python function for you. "
    "Your request was:\n{problem}\n\n"
    "Here is the information only you know (never show it as code; describe it in words):\n"
    "{hidden}\n\n"
    "The assistant's messages come to you as user messages. Answer its questions using only the "
    "information above. If it asks something that information does not cover, say you do not know. "
    "Answer in at most two sentences. Do not write code."
)


@dataclass(frozen=True)
class Action:
    """An agent message parsed under the protocol."""

    is_answer: bool
    content: str  # the answer code (marker removed) or the question text


def parse_action(message: str) -> Action:
    """Split an agent message into an answer (after the marker) or a question."""
    at = message.find(ANSWER_MARKER)
    if at < 0:
        return Action(is_answer=False, content=message.strip())
    return Action(is_answer=True, content=message[at + len(ANSWER_MARKER) :].strip())


def final_answer(last_message: str) -> str:
    """The answer taken from the last agent message (marker removed if present)."""
    return parse_action(last_message).content


def cut_reply(reply: str, max_chars: int) -> str:
    """The simulator's reply, stripped and cut to `max_chars` characters."""
    return reply.strip()[:max_chars]


def agent_messages(problem: str, max_turns: int) -> list[dict[str, str]]:
    """The agent's opening conversation: instructions, then the human's request."""
    return [
        {"role": "system", "content": AGENT_SYSTEM_PROMPT.format(max_turns=max_turns)},
        {"role": "user", "content": problem},
    ]


def simulator_messages(problem: str, hidden: str, dialogue: list[tuple[str, str | None]]) -> list[dict[str, str]]:
    """The simulator's conversation: roles swapped, the agent's messages come as `user`.

    `dialogue` holds (agent message, human reply) pairs; the last pair's reply is None (to answer).
    """
    messages = [{"role": "system", "content": SIMULATOR_SYSTEM_PROMPT.format(problem=problem, hidden=hidden)}]
    for agent_msg, human_reply in dialogue:
        messages.append({"role": "user", "content": agent_msg})
        if human_reply is not None:
            messages.append({"role": "assistant", "content": human_reply})
    return messages
