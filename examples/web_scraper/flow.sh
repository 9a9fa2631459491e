#!/bin/bash
# MAXQ_SPEC_VERSION: 1.0
# web_scraper: fetch a sitemap, scrape its pages in parallel, aggregate
# (spec §9.2), offline: the sitemap and the pages are files under fixtures/.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib/maxq.sh
source "$(dirname "$0")/../lib/maxq.sh"

# A failed stage ends the run. MaxQ calls flow.sh with MAXQ_FAILED_STAGE set
# (and MAXQ_COMPLETED_STAGE still naming the last stage that completed), so
# this check comes before the stage dispatch below.
if [[ -n $MAXQ_FAILED_STAGE ]]; then
  echo "Stage failed: $MAXQ_FAILED_STAGE" >&2
  exit 1
fi

case "$MAXQ_COMPLETED_STAGE" in
  "")
    # Stage 1: read the list of URLs. SOURCE is the sitemap, a path relative
    # to this flow's directory (or absolute).
    maxq_schedule fetch false \
      "$(maxq_step fetch_urls --retries 3 --env SOURCE=fixtures/sitemap.xml)"
    ;;
  fetch)
    # Stage 2: scrape 10 pages in parallel, one per instance.
    maxq_schedule scrape false \
      "$(maxq_step scrape_page --instances 10 --retries 2 --depends-on fetch_urls --timeout 30)"
    ;;
  scrape)
    # Stage 3: aggregate the results; the last stage.
    maxq_schedule aggregate true \
      "$(maxq_step aggregate --retries 1 --depends-on scrape_page)"
    ;;
esac
