#!/bin/bash
# analyze_sentiment: instance N of M scores the N-th quarter (1/M-th) of
# fetch_news' articles with the word lexicon $MODEL
# (fixtures/lexicons/$MODEL.json): an article's score is its positive words
# minus its negative words. Stores artifact "sentiment"
# {model, articles: [{id, score, label}], positive, negative, neutral, score}.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

[[ $MODEL =~ ^[A-Za-z0-9_.-]+$ ]] || maxq_die "MODEL must be a lexicon name, not \"$MODEL\""
LEXICON=$(dirname "$0")/../../fixtures/lexicons/$MODEL.json
[[ -r $LEXICON ]] || maxq_die "no sentiment model $MODEL (no $LEXICON)"

ARTICLES=$(maxq_artifact_get fetch_news articles)

# This instance's share: a contiguous slice of ceil(n / instances) articles.
RESULT=$(jq -c --slurpfile lexicon "$LEXICON" --arg model "$MODEL" \
  --argjson seq "$MAXQ_STEP_SEQUENCE" --argjson instances "$MAXQ_STEP_INSTANCES" '
  ($lexicon[0].positive | map({(.): true}) | add) as $pos
  | ($lexicon[0].negative | map({(.): true}) | add) as $neg
  | ((length + $instances - 1) / $instances | floor) as $size
  | .[$seq * $size : ($seq + 1) * $size]
  | map(
      ((.title + " " + .body) | ascii_downcase | [scan("[a-z]+")]) as $words
      | (([$words[] | select($pos[.])] | length) - ([$words[] | select($neg[.])] | length)) as $score
      | {id, score: $score, label: (if $score > 0 then "positive" elif $score < 0 then "negative" else "neutral" end)})
  | {model: $model,
     articles: .,
     positive: (map(select(.label == "positive")) | length),
     negative: (map(select(.label == "negative")) | length),
     neutral: (map(select(.label == "neutral")) | length),
     score: (map(.score) | add // 0)}' <<<"$ARTICLES")

jq -r '"Articles \(.articles | map(.id) | join(", ")): \(.positive) positive, \(.negative) negative, \(.neutral) neutral"' <<<"$RESULT"
maxq_artifact_put sentiment "$RESULT" "sentiment,$MODEL"
