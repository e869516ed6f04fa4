"""Ranking adjustments after the blend that lift recall quality (docs/decisions.md, "Recall
quality after the blend"), each a setting of its own (0 turns it off), applied in this order to the scored
candidates of a hybrid recall, after the router's handlers and before MMR.  None loads
anything: they read the candidates the recall already holds.

- ``speakers.prefer``: a question naming a person who speaks in the scope favours what that
  person said (``recall_speaker_weight``);
- ``episodes_context.lift``: a turn gains part of the best candidate score of its episode
  (``recall_episode_weight``);
- ``length_prior.lift``: an event gains in proportion to its words, up to a saturation
  (``recall_length_weight``, ``recall_length_words``);
- ``length_prior.asks``: an event loses in proportion to the share of its words that ask
  (sentences ending with ``?``: ``recall_question_weight``; decisions.md, "Less of the previous
  turn, and a prior against turns that ask");
- ``diversity.spread``: the n-th best event of a session (or episode) loses part of its score
  (``recall_diversity_weight``, ``recall_diversity_by``; off by default).
"""

from __future__ import annotations

from typing import Any

from . import diversity, episodes_context, length_prior, speakers


def adjust(config: Any, query: str, candidates: list[Any]) -> None:
    if config.recall_mode != "hybrid" or not query:
        return
    speakers.prefer(query, candidates, config.recall_speaker_weight)
    episodes_context.lift(candidates, config.recall_episode_weight)
    length_prior.lift(candidates, config.recall_length_weight, config.recall_length_words)
    length_prior.asks(candidates, config.recall_question_weight)
    diversity.spread(candidates, config.recall_diversity_weight, config.recall_diversity_by)
