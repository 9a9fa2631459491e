#!/bin/bash
# aggregate: reads every page_content artifact and stores artifact "summary"
# {totalPages, totalWords, titles}, which is also the step's output.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

URLS=$(maxq_artifact_get fetch_urls urls | jq length)
PAGES=$(maxq_artifacts scrape_page page_content scraped) # ordered by sequence

SUMMARY=$(jq -c '{totalPages: length, totalWords: (map(.words) | add // 0), titles: map(.title)}' <<<"$PAGES")
TOTAL=$(jq .totalPages <<<"$SUMMARY")
if ((TOTAL != URLS)); then
  maxq_die "scraped $TOTAL pages of $URLS URLs"
fi

echo "Scraped $TOTAL pages, $(jq .totalWords <<<"$SUMMARY") words"
maxq_artifact_put summary "$SUMMARY"
maxq_output "$SUMMARY"
