#!/bin/bash
# generate_report: combines the sentiment of every analyze_sentiment
# instance with calculate_trends' trend into artifact "report", which is
# also the step's output:
#   {symbol, articles, analyzers,
#    sentiment: {overall, positive, negative, neutral, score},
#    trend: {direction, change, changePct, first, last}}
# overall sentiment is "positive" or "negative" by which articles are more
# numerous, else "neutral".
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

SENTIMENTS=$(maxq_artifacts analyze_sentiment sentiment) # one per instance
TRENDS=$(maxq_artifact_get calculate_trends trends)
FETCHED=$(maxq_artifact_get fetch_news articles | jq length)

REPORT=$(jq -c --argjson trends "$TRENDS" '
  {positive: (map(.positive) | add), negative: (map(.negative) | add),
   neutral: (map(.neutral) | add), score: (map(.score) | add)} as $s
  | {symbol: $trends.symbol,
     articles: (map(.articles | length) | add),
     analyzers: length,
     sentiment: ({overall: (if $s.positive > $s.negative then "positive"
                            elif $s.positive < $s.negative then "negative"
                            else "neutral" end)} + $s),
     trend: ($trends | {direction, change, changePct, first, last})}' <<<"$SENTIMENTS")

ANALYSED=$(jq .articles <<<"$REPORT")
if ((ANALYSED != FETCHED)); then
  maxq_die "analysed $ANALYSED of $FETCHED articles"
fi

jq -r '
  "Market report: \(.symbol)",
  "Sentiment: \(.sentiment.overall) (\(.sentiment.positive) positive, \(.sentiment.negative) negative, \(.sentiment.neutral) neutral articles of \(.articles); score \(.sentiment.score))",
  "Trend: \(.trend.direction) (\(.trend.first) -> \(.trend.last), \(.trend.changePct)%)"' <<<"$REPORT"
maxq_artifact_put report "$REPORT" report
maxq_output "$REPORT"
