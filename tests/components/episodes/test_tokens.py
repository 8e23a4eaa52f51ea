from components.episodes.tokens import DialogueTokens

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write f."}]


def test_extend_reuses_the_exact_history_ids(tokenizer):
    tok = DialogueTokens(tokenizer)
    prompt = tok.start(MESSAGES)
    response = tokenizer.encode("What is f for?", add_special_tokens=False) + [tokenizer.eos_token_id]
    messages = MESSAGES + [{"role": "assistant", "content": "What is f for?"}, {"role": "user", "content": "Fun."}]
    ids, reused = tok.extend(prompt + response, messages)
    assert reused and ids[: len(prompt) + len(response)] == prompt + response
    assert tokenizer.decode(ids) == tok.render(messages)


def test_extend_without_eos_still_reuses(tokenizer):
    tok = DialogueTokens(tokenizer)
    prompt = tok.start(MESSAGES)
    response = tokenizer.encode("Cut short", add_special_tokens=False)  # stopped by max_tokens
    messages = MESSAGES + [{"role": "assistant", "content": "Cut short"}, {"role": "user", "content": "Go on."}]
    ids, reused = tok.extend(prompt + response, messages)
    assert reused and tokenizer.decode(ids) == tok.render(messages)


def test_extend_falls_back_when_the_history_was_rewritten(tokenizer):
    tok = DialogueTokens(tokenizer)
    prompt = tok.start(MESSAGES)
    response = tokenizer.encode("Original text", add_special_tokens=False)
    messages = MESSAGES + [{"role": "assistant", "content": "Edited text"}, {"role": "user", "content": "Ok."}]
    ids, reused = tok.extend(prompt + response, messages)
    assert not reused and ids == tok.encode(tok.render(messages))
