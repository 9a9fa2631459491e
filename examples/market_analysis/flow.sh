#!/bin/bash
# MAXQ_SPEC_VERSION: 1.0
# market_analysis: a three-stage DAG (spec §9.3) -- fetch news and prices in
# parallel, analyse them (sentiment in 4 parallel instances), report. Offline:
# the news, the prices and the sentiment lexicon are files under fixtures/.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib/maxq.sh
source "$(dirname "$0")/../lib/maxq.sh"

# Handle failures first: when a stage fails MaxQ calls flow.sh with
# MAXQ_FAILED_STAGE set and MAXQ_COMPLETED_STAGE still naming the last stage
# that completed, which must not schedule the failed stage again.
if [[ -n $MAXQ_FAILED_STAGE ]]; then
  echo "Stage failed: $MAXQ_FAILED_STAGE" >&2
  exit 1
fi

case "$MAXQ_COMPLETED_STAGE" in
  "")
    # Stage 1: fetch data in parallel.
    maxq_schedule data-fetch false \
      "$(maxq_step fetch_news --retries 3 --env SOURCE=reuters)" \
      "$(maxq_step fetch_prices --retries 3 --env SYMBOL=AAPL)"
    ;;
  data-fetch)
    # Stage 2: analyse (4 parallel sentiment analysers, one trend calculator).
    maxq_schedule analysis false \
      "$(maxq_step analyze_sentiment --instances 4 --retries 2 --depends-on fetch_news --env MODEL=sentiment-v2)" \
      "$(maxq_step calculate_trends --retries 2 --depends-on fetch_prices)"
    ;;
  analysis)
    # Stage 3: the report, once both analyses are done; the last stage.
    maxq_schedule reporting true \
      "$(maxq_step generate_report --retries 1 --depends-on analyze_sentiment,calculate_trends)"
    ;;
esac
