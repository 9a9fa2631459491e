#!/bin/bash
# fetch_urls: reads the sitemap at $SOURCE and stores the first 10 URLs it
# lists as artifact "urls" (a JSON array of strings).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

FLOW_DIR=$(cd "$(dirname "$0")/../.." && pwd)
case "$SOURCE" in
  /*) SITEMAP=$SOURCE ;;
  *) SITEMAP=$FLOW_DIR/$SOURCE ;;
esac
[[ -r $SITEMAP ]] || maxq_die "cannot read the sitemap $SITEMAP (SOURCE=$SOURCE)"

# One <loc> per line in a sitemap; keep the first 10.
URLS=$(sed -n 's:.*<loc>[[:space:]]*\([^<]*[^<[:space:]]\)[[:space:]]*</loc>.*:\1:p' "$SITEMAP" | head -n 10)
[[ -n $URLS ]] || maxq_die "the sitemap $SITEMAP lists no URLs"

maxq_log "Found $(wc -l <<<"$URLS") URLs in $SOURCE"
jq -Rsc 'split("\n") | map(select(length > 0))' <<<"$URLS" | maxq_artifact_put urls -
