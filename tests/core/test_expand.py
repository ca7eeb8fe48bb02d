from fsdp_skill.index.tokenization import tokenize
from fsdp_skill.search import expand
from fsdp_skill.search.engine import query_terms


def test_every_rule_fires_on_its_own_phrase():
    # Guards the cheap pre-filter in expand(): it must never hide a rule that matches.
    for phrase, words in expand.RULES:
        got = {t for t, _ in expand.expand(phrase, [(t, 1.0) for t in tokenize(phrase)])}
        want = {tokenize(w)[0] for w in words.split()} - set(tokenize(phrase))
        assert want <= got, phrase


def test_expansions_weigh_less_than_the_users_words():
    terms = dict(query_terms("training hangs with uneven inputs"))
    assert terms["hang"] == 1.0 and terms["join"] == expand.WEIGHT < 1.0
    assert (
        dict(query_terms("training hangs with uneven inputs", use_expansion=False)).get("join")
        is None
    )
