#!/bin/bash
# scrape_page: instance N "fetches" URL #N of fetch_urls' list -- offline,
# from fixtures/pages/{last path segment}.html -- and stores artifact
# "page_content" {url, title, words}, tagged "scraped".
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

FLOW_DIR=$(cd "$(dirname "$0")/../.." && pwd)

URL=$(maxq_artifact_get fetch_urls urls | jq -r --argjson i "$MAXQ_STEP_SEQUENCE" '.[$i] // empty')
[[ -n $URL ]] || maxq_die "fetch_urls listed no URL #$MAXQ_STEP_SEQUENCE"
echo "Scraping: $URL"

# The offline stand-in for `curl -fsS "$URL"`.
PAGE=${URL%/}
PAGE=${PAGE##*/}
PAGE=${PAGE%.html}
[[ $PAGE =~ ^[A-Za-z0-9_-]+$ ]] || maxq_die "no page file for $URL"
FILE=$FLOW_DIR/fixtures/pages/$PAGE.html
[[ -r $FILE ]] || maxq_die "no page file for $URL (looked for $FILE)"

# decode turns the common HTML entities into text (&amp; last).
decode() {
  sed -e 's/&lt;/</g' -e 's/&gt;/>/g' -e 's/&quot;/"/g' -e "s/&#39;/'/g" -e 's/&nbsp;/ /g' -e 's/&amp;/\&/g'
}

# The page on one line: tags may span lines.
HTML=$(tr '\n\r\t' '   ' <"$FILE")
TITLE=$(sed -n 's:.*<title[^>]*>[[:space:]]*\(.*[^[:space:]]\)[[:space:]]*</title>.*:\1:p' <<<"$HTML" | decode)
# The text of the body: everything between <body> and </body> with every
# tag replaced by a space.
WORDS=$(sed -e 's:.*<body[^>]*>::' -e 's:</body>.*::' -e 's/<[^>]*>/ /g' <<<"$HTML" | decode | wc -w)
WORDS=$((WORDS)) # wc may pad with spaces

echo "Title: $TITLE ($WORDS words)"
jq -nc --arg url "$URL" --arg title "$TITLE" --argjson words "$WORDS" '{url: $url, title: $title, words: $words}' |
  maxq_artifact_put page_content - scraped
