#!/bin/bash
# fetch_news: loads the articles of news source $SOURCE (offline, from
# fixtures/news/$SOURCE.json) and stores them as artifact "articles", an
# array of {id, title, body}.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

[[ $SOURCE =~ ^[a-z0-9_-]+$ ]] || maxq_die "SOURCE must be a news source name, not \"$SOURCE\""
FEED=$(dirname "$0")/../../fixtures/news/$SOURCE.json
[[ -r $FEED ]] || maxq_die "no news from source $SOURCE (no $FEED)"

ARTICLES=$(jq -c '.articles' "$FEED")
COUNT=$(jq length <<<"$ARTICLES")
echo "Fetched $COUNT articles from $SOURCE"

maxq_artifact_put articles "$ARTICLES" "news,$SOURCE" "$(jq -nc --arg source "$SOURCE" '{source: $source}')"
maxq_output "$(jq -nc --argjson n "$COUNT" '{articles: $n}')"
